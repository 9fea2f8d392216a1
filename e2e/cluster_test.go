package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/internal/dev/attack"
	"github.com/marketplace/checkout/internal/dev/cluster"
	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/workflows"
)

// runningCluster is one `checkout-dev cluster` process and what it said.
type runningCluster struct {
	cmd   *exec.Cmd
	dir   string
	tools string // the folder of temporal-server and the others
	ports cluster.Ports
	out   string // its output file
	done  chan error
}

// startCluster runs `checkout-dev cluster` in dir on the ports from first (0: a free range) and waits
// until it says it runs.
func startCluster(t *testing.T, bin, dir string, first int, args ...string) *runningCluster {
	t.Helper()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	tools := filepath.Join(root, "bin")
	for _, name := range []string{"temporal-server", "temporal-sql-tool", "temporal-ui-server", "nats-server"} {
		if _, err := os.Stat(filepath.Join(tools, name)); err != nil {
			t.Skipf("bin/%s is missing, so the cluster was NOT tested: make test builds it (make cluster does too)", name)
		}
	}
	if _, err := exec.LookPath("haproxy"); err != nil {
		t.Skip("haproxy is missing, so the cluster was NOT tested: make test installs it (make haproxy)")
	}
	if first == 0 {
		first, err = cluster.FreeRange()
		require.NoError(t, err)
	}
	out, err := os.CreateTemp(dir, "cluster-*.out")
	require.NoError(t, err)
	defer out.Close()
	c := &runningCluster{dir: dir, tools: tools, ports: cluster.PortsFrom(first), out: out.Name(), done: make(chan error, 1)}
	c.cmd = exec.Command(bin, append([]string{"cluster", "--ports-from", strconv.Itoa(first), "--dir", dir, "--bin", tools,
		"--builds", filepath.Join(dir, "builds")}, args...)...)
	// Every order traced, so that the cluster's Jaeger has them to show.
	c.cmd.Env = append(cleanEnv(), "LOG_LEVEL=warn", "TRACES_SAMPLE_RATIO=1")
	c.cmd.Stdout, c.cmd.Stderr = out, out
	// The cluster stops its processes when it is told to, or when this test binary dies.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	require.NoError(t, c.cmd.Start())
	go func() { c.done <- c.cmd.Wait() }()
	t.Cleanup(func() { c.stop(t) })

	deadline := time.Now().Add(5 * time.Minute)
	for {
		if strings.Contains(c.output(), "checkout cluster is running") {
			return c
		}
		select {
		case err := <-c.done:
			c.done <- err
			t.Fatalf("checkout cluster exited while starting (%v):\n%s", err, c.output())
		case <-time.After(250 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("checkout cluster not running after 5 minutes:\n%s", c.output())
		}
	}
}

func (c *runningCluster) output() string {
	raw, _ := os.ReadFile(c.out)
	return string(raw)
}

// stop interrupts the cluster as Ctrl-C does and waits for it to end.
func (c *runningCluster) stop(t *testing.T) {
	if c.cmd.Process == nil {
		return
	}
	_ = c.cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-c.done:
		c.done <- err
	case <-time.After(2 * time.Minute):
		_ = c.cmd.Process.Kill()
		t.Errorf("checkout cluster still running 2 minutes after Ctrl-C:\n%s", c.output())
	}
}

// pids are the cluster's processes by name, as it records them.
func (c *runningCluster) pids(t *testing.T) map[string]int {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(c.dir, "processes.json"))
	require.NoError(t, err)
	var state map[string]struct{ Pid int }
	require.NoError(t, json.Unmarshal(raw, &state))
	out := map[string]int{}
	for name, p := range state {
		out[name] = p.Pid
	}
	return out
}

// replicaStatus is HAProxy's view of an API replica: UP, DOWN, … (its stats page as CSV).
func (c *runningCluster) replicaStatus(t *testing.T, name string) string {
	t.Helper()
	status, err := cluster.ReplicaStatus(context.Background(), fmt.Sprintf("127.0.0.1:%d", c.ports.Stats), name)
	require.NoError(t, err)
	return status
}

// TestCluster_OrdersThroughHAProxy_AReplicaThatDiesLeavesTheRotation: `make cluster`'s shape (the
// Temporal server as four processes on PostgreSQL, its UI, one worker, two API replicas behind
// HAProxy) takes an order through HAProxy to CONFIRMED; with one replica killed, requests still
// succeed, HAProxy takes it out of the rotation and the supervisor starts it again; Ctrl-C stops
// every process; a second run on the same folder keeps the orders. Not parallel: its dozen
// processes would take the CPU the load tests of this package measure their throughput on, so it
// runs before them, alone.
func TestCluster_OrdersThroughHAProxy_AReplicaThatDiesLeavesTheRotation(t *testing.T) {
	bin := buildHarness(t)
	dir := t.TempDir()
	c := startCluster(t, bin, dir, 0, "--apis", "2", "--workers", "1", "--history-shards", "4")

	pids := c.pids(t)
	for _, name := range []string{"temporal-frontend", "temporal-history", "temporal-matching", "temporal-worker",
		"temporal-ui", cluster.WorkerName(workflows.BuildID, 1), "api-1", "api-2", "haproxy"} {
		require.NotZero(t, pids[name], "%s runs as a process of its own", name)
	}
	ui, err := fetch(fmt.Sprintf("http://127.0.0.1:%d/", c.ports.UI))
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, ui.status, "the Temporal UI answers")

	c.frontendRequiresACertificate(t)
	c.legacyWorkersReachTemporalThroughTheSocket(t)

	secrets, err := config.ClusterSecretsOf(dir)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(secrets.CodecKeyID, "cluster-"), "the cluster's own codec key")
	s := clusterStack(t, c, secrets)
	sh := s.shopper(clusterShopper(7001))
	orderID := placeConfirmed(t, s, sh)
	c.tracesInJaeger(t)
	c.onlyStaffSendSupportActions_NoPlaintextObeyed(t, s)
	c.staffSignInThroughTheProvider(t, s)
	c.onlyTheProvidersTokens(t, s)

	// One replica killed: every request still answered (HAProxy sends it to the other), the
	// replica marked DOWN, then started again by the supervisor and back UP.
	require.NoError(t, syscall.Kill(pids["api-2"], syscall.SIGKILL))
	for i := range 20 {
		r := s.call(http.MethodGet, fmt.Sprintf("/api/v1/orders/%d", orderID), sh.token, nil, nil)
		require.Equal(t, http.StatusOK, r.status, "request %d after the kill: %s", i, r.raw)
	}
	haproxyLog := filepath.Join(dir, "logs", "haproxy.log")
	require.Eventually(t, func() bool {
		raw, _ := os.ReadFile(haproxyLog)
		return strings.Contains(string(raw), "Server api/api-2 is DOWN")
	}, 15*time.Second, 100*time.Millisecond, "HAProxy takes the dead replica out")
	placeConfirmed(t, s, s.shopper(clusterShopper(7002)))
	require.Eventually(t, func() bool { return c.replicaStatus(t, "api-2") == "UP" && c.pids(t)["api-2"] != pids["api-2"] },
		2*time.Minute, 250*time.Millisecond, "the supervisor starts the replica again and HAProxy takes it back")
	assert.Contains(t, c.output(), "api-2 exited (signal: killed); starting it again")

	// Ctrl-C stops every process of the cluster.
	pids = c.pids(t)
	c.stop(t)
	for name, pid := range pids {
		assert.Error(t, syscall.Kill(pid, 0), "%s (pid %d) still runs after Ctrl-C", name, pid)
	}

	// A second run on the same folder and ports: the same secrets, the order still there.
	c = startCluster(t, bin, dir, c.ports.LB, "--apis", "1", "--workers", "1", "--history-shards", "4")
	s = clusterStack(t, c, secrets)
	r := s.call(http.MethodGet, fmt.Sprintf("/api/v1/orders/%d", orderID), sh.token, nil, nil)
	require.Equal(t, http.StatusOK, r.status, r.raw)
	assert.Equal(t, "CONFIRMED", r.str("status"))

	// Another shard count is refused with one line before anything starts.
	c.stop(t)
	refuse := exec.Command(bin, "cluster", "--ports-from", strconv.Itoa(c.ports.LB), "--dir", dir, "--bin", c.tools,
		"--history-shards", "8")
	refuse.Env = cleanEnv()
	out, err := refuse.CombinedOutput()
	require.Error(t, err)
	assert.Equal(t, "checkout-dev cluster: this cluster was set up with 4 history shards, not 8: Temporal cannot change them (use the same count, or another data folder)",
		strings.TrimSpace(string(out)))
}

// tracesInJaeger: the cluster's Jaeger has the traces of the API replicas and the workers.
func (c *runningCluster) tracesInJaeger(t *testing.T) {
	t.Helper()
	services := fmt.Sprintf("http://127.0.0.1:%d/api/services", c.ports.Jaeger)
	waitFor(t, services, func(g got) bool {
		return strings.Contains(g.body, `"checkout-api"`) && strings.Contains(g.body, `"checkout-worker"`)
	})
}

// frontendRequiresACertificate: the Temporal CLI without a client certificate is refused by the
// frontend; with the tools' certificate of the cluster's CA it lists workflows.
func (c *runningCluster) frontendRequiresACertificate(t *testing.T) {
	t.Helper()
	temporal := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(c.tools, "temporal"), append([]string{"workflow", "list",
			"--address", fmt.Sprintf("127.0.0.1:%d", c.ports.Frontend), "--limit", "1"}, args...)...)
		cmd.Env = cleanEnv()
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := temporal()
	assert.Error(t, err, "no TLS: refused\n%s", out)
	pki := cluster.Options{Dir: c.dir}.PKI()
	out, err = temporal("--tls-ca-path", pki.CAFile(), "--tls-server-name", cluster.FrontendServerName)
	assert.Error(t, err, "TLS without a client certificate: refused\n%s", out)
	out, err = temporal("--tls-ca-path", pki.CAFile(), "--tls-server-name", cluster.FrontendServerName,
		"--tls-cert-path", pki.CertFile(cluster.IdentityTools), "--tls-key-path", pki.KeyFile(cluster.IdentityTools))
	assert.NoError(t, err, "the tools' certificate: served\n%s", out)
}

// legacyWorkersReachTemporalThroughTheSocket: a client as a build without TLS settings dials
// (plaintext, TEMPORAL_ADDRESS only) reaches the frontend through the legacy proxy's socket,
// which only the cluster's user may open.
func (c *runningCluster) legacyWorkersReachTemporalThroughTheSocket(t *testing.T) {
	t.Helper()
	o := cluster.Options{Dir: c.dir}
	env := cluster.LegacyEnv(o, cluster.IdentityWorker)
	require.Len(t, env, 1)
	addr, ok := strings.CutPrefix(env[0], "TEMPORAL_ADDRESS=")
	require.True(t, ok, env[0])
	fi, err := os.Stat(o.LegacySocket(cluster.IdentityWorker))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the cluster's user only")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tc, err := client.DialContext(ctx, client.Options{HostPort: addr, Namespace: "default"})
	require.NoError(t, err, "dialled as saga-6's worker dials: %s", addr)
	defer tc.Close()
	_, err = tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{PageSize: 1})
	assert.NoError(t, err, "served through the proxy's mutual TLS")
}

// onlyStaffSendSupportActions_NoPlaintextObeyed: the worker's certificate, without a person's
// token, may not send a support action (the authorizer refuses it before anything else) but may
// signal an order otherwise; a support action in clear, sent with the tools' certificate (which may
// send anything), is refused by the worker's codec and the order stays as it was.
func (c *runningCluster) onlyStaffSendSupportActions_NoPlaintextObeyed(t *testing.T, s *stack) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pki := cluster.Options{Dir: c.dir}.PKI()
	dial := func(id cluster.Identity) client.Client {
		tlsCfg, err := pki.ClientTLS(id)
		require.NoError(t, err)
		tc, err := client.DialContext(ctx, client.Options{HostPort: fmt.Sprintf("127.0.0.1:%d", c.ports.Frontend),
			Namespace: "default", ConnectionOptions: client.ConnectionOptions{TLS: tlsCfg}})
		require.NoError(t, err)
		t.Cleanup(tc.Close)
		return tc
	}
	worker := dial(cluster.IdentityWorker)
	err := worker.SignalWorkflow(ctx, "order-u1-none", "", workflows.SupportAction, map[string]string{"action": "refund"})
	var denied *serviceerror.PermissionDenied
	assert.ErrorAs(t, err, &denied, "the worker's certificate sends no support action")
	err = worker.SignalWorkflow(ctx, "order-u1-none", "", "another-signal", nil)
	var notFound *serviceerror.NotFound
	assert.ErrorAs(t, err, &notFound, "other signals pass the authorizer (and find no such order)")

	sh := s.shopper(clusterShopper(7003))
	sh.fill(map[int64]int32{71: 1})
	key := "cluster-plain-" + randomHex(4)
	r := sh.order(key, sh.preview(), "tok_3ds")
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	tools := dial(cluster.IdentityTools)
	h, err := tools.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: workflows.OrderWorkflowID(sh.id, key),
		UpdateName: workflows.SupportAction, WaitForStage: client.WorkflowUpdateStageCompleted,
		Args: []any{map[string]string{"action": "cancel", "reason": "plaintext"}}})
	if err == nil {
		err = h.Get(ctx, nil)
	}
	require.Error(t, err, "a support action in clear is not obeyed")
	assert.Contains(t, err.Error(), "not encrypted")
	got := s.call(http.MethodGet, fmt.Sprintf("/api/v1/orders/%d", r.int("orderId")), sh.token, nil, nil)
	assert.Equal(t, "PENDING_PAYMENT", got.str("status"), got.raw)
}

// clusterStack is the test's client of a running cluster: HTTP through HAProxy, shoppers' and
// sellers' tokens from its identity provider (the shared secret only to show that the API refuses
// what it signs), its database for the demo data's sellers.
func clusterStack(t *testing.T, c *runningCluster, secrets config.Secrets) *stack {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cfg := testenv.Config(t, map[string]string{"AUTH_JWT_SECRET": secrets.JWT})
	tokens, err := cluster.ClusterTokens(c.dir, cluster.Options{Ports: c.ports}.Issuer(), cluster.OIDCClientID)
	require.NoError(t, err)
	return &stack{t: t, ctx: ctx, cfg: cfg, base: fmt.Sprintf("http://127.0.0.1:%d", c.ports.LB), tokens: tokens,
		pool: testenv.PoolOn(t, cluster.DatabaseURL(c.ports.Postgres, "checkout"), 2),
		http: &http.Client{Timeout: time.Minute}}
}

// clusterShopper is the n-th shopper of the test, numbered as the harness's shoppers whose tokens
// the cluster's provider issues.
func clusterShopper(n int64) int64 { return cluster.MinShopperSubject + n }

// onlyTheProvidersTokens: the API takes a shopper's and a seller's token from the identity
// provider (the JWT-profile grant; a seller's ERP's client_credentials) and refuses theirs signed
// with the shared secret, which every mode but dev no longer accepts; the attack suite's forgery
// of them against the cluster says the same.
func (c *runningCluster) onlyTheProvidersTokens(t *testing.T, s *stack) {
	t.Helper()
	sh := s.shopper(clusterShopper(7005))
	r := s.call(http.MethodGet, "/api/v1/addresses", sh.token, nil, nil)
	require.Equal(t, http.StatusOK, r.status, r.raw)
	r = s.call(http.MethodGet, "/seller-api/v1/campaigns", s.seller(42), nil, nil)
	require.Equal(t, http.StatusOK, r.status, "the seller's ERP's token: %s", r.raw)
	for _, p := range []auth.Principal{{UserID: clusterShopper(7005), Role: auth.RoleShopper},
		{UserID: 1042, Role: auth.RoleSeller, SellerID: 42}} {
		tok, err := auth.Mint([]byte(s.cfg.JWTSecret), p, time.Hour)
		require.NoError(t, err)
		path := map[string]string{auth.RoleShopper: "/api/v1/addresses", auth.RoleSeller: "/seller-api/v1/campaigns"}[p.Role]
		r := s.call(http.MethodGet, path, tok, nil, nil)
		assert.Equal(t, http.StatusUnauthorized, r.status, "a %s's token of the shared secret: %s", p.Role, r.raw)
	}
	target, err := attack.ClusterTarget(attack.ClusterEnvFile(c.dir))
	require.NoError(t, err)
	target.Base = s.base
	rep, err := attack.Execute(s.ctx, target, attack.Options{Only: []string{"token-shared-secret", "token-staff-shared-secret",
		"token-claims-changed", "seller-stock-of-another"}, Out: testWriter{t}})
	require.NoError(t, err)
	for _, res := range rep.Results {
		assert.Equal(t, attack.Pass, res.Outcome.Verdict, "%s: %s", res.Name, res.Outcome.Detail)
	}
}

// placeConfirmed places an order of one unit paid at once and waits for it to be CONFIRMED.
func placeConfirmed(t *testing.T, s *stack, sh *shopper) int64 {
	t.Helper()
	sh.fill(map[int64]int32{71: 1})
	r := sh.order("cluster-"+randomHex(4), sh.preview(), "tok_ok")
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	id := r.int("orderId")
	final := s.waitFinal(sh.token, id, time.Minute)
	require.Equal(t, "CONFIRMED", final.str("status"), final.raw)
	return id
}
