package cluster_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/api"
	"github.com/marketplace/checkout/deploy"
	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/internal/dev/cluster"
	"github.com/marketplace/checkout/internal/dev/testenv"
)

func options(dir string, apis, workers int) cluster.Options {
	return cluster.Options{Dir: dir, Checkout: "/bin/checkout", TemporalServer: "/bin/temporal-server",
		SQLTool: "/bin/temporal-sql-tool", UIServer: "/bin/temporal-ui-server", HAProxy: "/usr/sbin/haproxy",
		APIs: apis, Workers: workers, HistoryShards: 16, Ports: cluster.DefaultPorts(), Namespace: "default",
		Secrets:       config.Secrets{JWT: "j", Webhook: "w", CodecKey: "k", CodecKeyID: "cluster-1"},
		PublicBaseURL: "http://localhost:8080", BuildID: "saga-x"}
}

// envKeys are the names of the settings a process is given.
func envKeys(env []string) []string {
	var keys []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// TestPlan_EveryListenerOnLoopback_NoPortTwice: with the standard ports and with consecutive ones,
// at the most replicas, every process listens on 127.0.0.1 and no two on one port.
func TestPlan_EveryListenerOnLoopback_NoPortTwice(t *testing.T) {
	t.Parallel()
	for name, ports := range map[string]cluster.Ports{"standard": cluster.DefaultPorts(), "from 20000": cluster.PortsFrom(20000)} {
		o := options(t.TempDir(), cluster.MaxReplicas, cluster.MaxReplicas)
		o.Ports = ports
		seen := map[string]string{"127.0.0.1:" + strconv.Itoa(ports.Postgres): "postgres"}
		for _, p := range cluster.NewPlan(o).All() {
			for _, addr := range p.Listens {
				host, port, err := net.SplitHostPort(addr)
				require.NoError(t, err)
				assert.Equal(t, "127.0.0.1", host, "%s: %s %s", name, p.Name, addr)
				n, _ := strconv.Atoi(port)
				if name != "standard" {
					assert.Less(t, n, 20000+cluster.PortsSpan, "%s within the span", p.Name)
				}
				assert.NotContains(t, seen, addr, "%s: %s and %s", name, seen[addr], p.Name)
				seen[addr] = p.Name
			}
		}
	}
}

// TestHAProxyConfig_EveryReplica_CheckedOnReadyz: the rendered configuration names each replica
// once, checks each on /readyz, and is one HAProxy accepts.
func TestHAProxyConfig_EveryReplica_CheckedOnReadyz(t *testing.T) {
	t.Parallel()
	testenv.SkipIfShort(t, "HAProxy")
	plan := cluster.NewPlan(options(t.TempDir(), 3, 1))
	cfg, err := cluster.HAProxyConfig(plan.APIs)
	require.NoError(t, err)
	for _, p := range plan.APIs {
		assert.Equal(t, 1, strings.Count(cfg, "server "+p.Name+" "+p.Listens[0]+" check\n"), p.Name)
	}
	assert.NotRegexp(t, `(?m)^\s*server-template`, cfg)
	assert.Contains(t, cfg, "option httpchk GET /readyz")
	assert.Contains(t, cfg, "option forwardfor")
	for _, status := range []string{"502", "503", "504"} {
		assert.Contains(t, cfg, "errorfile "+status+` "${HAPROXY_UNAVAILABLE}"`)
	}

	haproxy, err := exec.LookPath("haproxy")
	if err != nil {
		t.Skip("haproxy is not installed (make test installs it): the configuration was not checked by HAProxy itself")
	}
	plan.HAProxy.Env = writeHAProxyFiles(t, plan, cfg)
	check := exec.Command(haproxy, "-c", "-f", plan.HAProxy.Args[len(plan.HAProxy.Args)-1])
	check.Env = append(os.Environ(), plan.HAProxy.Env...)
	out, err := check.CombinedOutput()
	require.NoError(t, err, string(out))
}

// writeHAProxyFiles writes cfg and the 503 page where plan's HAProxy reads them, and returns its
// settings with the page's path.
func writeHAProxyFiles(t *testing.T, plan cluster.Plan, cfg string) []string {
	t.Helper()
	dir := t.TempDir()
	plan.HAProxy.Args[len(plan.HAProxy.Args)-1] = filepath.Join(dir, "haproxy.cfg")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "haproxy.cfg"), []byte(cfg), 0o644))
	page, err := deploy.Files.ReadFile(deploy.HAProxyUnavailable)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "unavailable.http"), page, 0o644))
	// The codec frontend's certificate, in the cluster's folder (<dir>/tls).
	_, err = cluster.EnsurePKI(filepath.Dir(filepath.Dir(envOf(plan.HAProxy.Env)["HAPROXY_CODEC_CERT"])))
	require.NoError(t, err)
	var env []string
	for _, kv := range plan.HAProxy.Env {
		if strings.HasPrefix(kv, "HAPROXY_UNAVAILABLE=") {
			kv = "HAPROXY_UNAVAILABLE=" + filepath.Join(dir, "unavailable.http")
		}
		env = append(env, kv)
	}
	return env
}

// TestHAProxy_NoReplicaAnswers_503UnavailableWithRetryAfter: HAProxy in front of a replica that
// drops every request (a 502 of its own) and then of none it counts up (its 503) answers the API's
// 503 UNAVAILABLE with Retry-After each time, as a dependency that is down does, never its HTML
// page.
func TestHAProxy_NoReplicaAnswers_503UnavailableWithRetryAfter(t *testing.T) {
	t.Parallel()
	testenv.SkipIfShort(t, "HAProxy")
	haproxy, err := exec.LookPath("haproxy")
	if err != nil {
		t.Skip("haproxy is not installed (make test installs it): HAProxy's answers were NOT checked")
	}
	first, err := cluster.FreeRange()
	require.NoError(t, err)
	o := options(t.TempDir(), 1, 1)
	o.Ports = cluster.PortsFrom(first)
	plan := cluster.NewPlan(o)
	// The replica accepts each connection and closes it unanswered, as one killed mid-request.
	replica, err := net.Listen("tcp", plan.APIs[0].Listens[0])
	require.NoError(t, err)
	t.Cleanup(func() { replica.Close() })
	go func() {
		for {
			c, err := replica.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	cfg, err := cluster.HAProxyConfig(plan.APIs)
	require.NoError(t, err)
	env := writeHAProxyFiles(t, plan, cfg)
	// Without -W (the master process): one process, stopped with the test.
	cmd := exec.Command(haproxy, "-db", "-f", plan.HAProxy.Args[len(plan.HAProxy.Args)-1])
	cmd.Env = append(os.Environ(), env...)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	lb := "http://" + plan.HAProxy.Listens[0] + "/api/v1/cart"
	seen := 0
	for deadline := time.Now().Add(4 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get(lb)
		if err != nil {
			continue // HAProxy still starting
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		seen++
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, string(body))
		assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		assert.Equal(t, "2", resp.Header.Get("Retry-After"))
		var e struct{ Code, Message string }
		if assert.NoError(t, json.Unmarshal(body, &e), string(body)) {
			assert.Equal(t, "UNAVAILABLE", e.Code)
			assert.NotEmpty(t, e.Message)
		}
	}
	assert.Greater(t, seen, 10, "HAProxy answered")
}

func TestCheckShards_FixedWhenFirstSetUp(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, cluster.CheckShards(dir, 16))
	require.NoError(t, cluster.CheckShards(dir, 16), "the same count again")
	err := cluster.CheckShards(dir, 32)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "set up with 16 history shards, not 32")
}

func TestHistoryShards_AFolderKeepsItsCount(t *testing.T) {
	t.Parallel()
	fresh := t.TempDir()
	n, err := cluster.HistoryShards(fresh, 0)
	require.NoError(t, err)
	assert.Equal(t, cluster.DefaultHistoryShards, n, "a new folder without a count: the default")
	n, err = cluster.HistoryShards(fresh, 64)
	require.NoError(t, err)
	assert.Equal(t, 64, n, "a new folder: the count asked for")
	assert.NoFileExists(t, filepath.Join(fresh, "cluster.json"), "choosing records nothing")

	// A folder set up with a count other than today's default keeps it when none is asked for.
	old := t.TempDir()
	set := cluster.DefaultHistoryShards + 3
	require.NoError(t, cluster.CheckShards(old, set))
	n, err = cluster.HistoryShards(old, 0)
	require.NoError(t, err)
	assert.Equal(t, set, n, "the folder's recorded count, not the default")
	require.NoError(t, cluster.CheckShards(old, n), "and it starts with it")
	n, err = cluster.HistoryShards(old, set)
	require.NoError(t, err)
	assert.Equal(t, set, n)
	_, err = cluster.HistoryShards(old, 2*set)
	require.Error(t, err)
	assert.Contains(t, err.Error(), fmt.Sprintf("set up with %d history shards, not %d", set, 2*set))
}

func TestCheckFree_NamesTheAddressInUse(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	err = cluster.CheckFree([]cluster.Process{{Name: "api-1", Listens: []string{l.Addr().String()}}})
	require.Error(t, err)
	assert.Equal(t, l.Addr().String()+" (api-1) is in use: stop what listens there, or move the cluster's ports with --ports-from", err.Error())
}

// TestHAProxy_ClientOnLoopback_CannotNameAnotherAddress: through the cluster's HAProxy, a client on
// this machine (127.0.0.1) that writes an X-Forwarded-For of its own is counted by the API as
// 127.0.0.1, never as the address it wrote: HAProxy reaches the replicas from an address of its
// own, the one TRUSTED_PROXIES names, which no client of the load balancer comes from.
func TestHAProxy_ClientOnLoopback_CannotNameAnotherAddress(t *testing.T) {
	t.Parallel()
	testenv.SkipIfShort(t, "HAProxy")
	haproxy, err := exec.LookPath("haproxy")
	if err != nil {
		t.Skip("haproxy is not installed (make test installs it): the client's address through HAProxy was NOT checked")
	}
	first, err := cluster.FreeRange()
	require.NoError(t, err)
	o := options(t.TempDir(), 1, 1)
	o.Ports = cluster.PortsFrom(first)
	plan := cluster.NewPlan(o)
	trusted := envOf(plan.APIs[0].Env)["TRUSTED_PROXIES"]
	cfg, err := config.Load(func(k string) string { return map[string]string{"TRUSTED_PROXIES": trusted}[k] })
	require.NoError(t, err)
	require.NotEmpty(t, cfg.TrustedProxies, "the replicas trust HAProxy")

	// The replica: the API's reading of the client's address, on the replica's address.
	e := echo.New()
	e.IPExtractor = api.IPExtractor(cfg.TrustedProxies)
	e.GET("/readyz", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
	e.GET("/whoami", func(c echo.Context) error { return c.String(http.StatusOK, c.RealIP()) })
	e.GET("/codec/whoami", func(c echo.Context) error { return c.String(http.StatusOK, c.RealIP()) })
	replica, err := net.Listen("tcp", plan.APIs[0].Listens[0])
	require.NoError(t, err)
	srv := &http.Server{Handler: e, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(replica) }()
	t.Cleanup(func() { _ = srv.Close() })

	lbCfg, err := cluster.HAProxyConfig(plan.APIs)
	require.NoError(t, err)
	env := writeHAProxyFiles(t, plan, lbCfg)
	cmd := exec.Command(haproxy, "-db", "-f", plan.HAProxy.Args[len(plan.HAProxy.Args)-1])
	cmd.Env = append(os.Environ(), env...)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	whoami := func(xff string) (string, bool) {
		req, err := http.NewRequest(http.MethodGet, "http://"+plan.HAProxy.Listens[0]+"/whoami", nil)
		require.NoError(t, err)
		if xff != "" {
			req.Header.Set("X-Forwarded-For", xff)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body), resp.StatusCode == http.StatusOK
	}
	require.Eventually(t, func() bool { _, ok := whoami(""); return ok }, 10*time.Second, 100*time.Millisecond,
		"HAProxy forwards to the replica")
	for _, forged := range []string{"203.0.113.9", "10.1.2.3, 198.51.100.7", cfg.TrustedProxies[0].IP.String()} {
		got, ok := whoami(forged)
		require.True(t, ok)
		assert.Equal(t, "127.0.0.1", got, "X-Forwarded-For: %s", forged)
	}
	got, _ := whoami("")
	assert.Equal(t, "127.0.0.1", got)

	// The codec frontend: https with the cluster's certificate for localhost, to the same replicas,
	// for /codec only.
	tlsCfg, err := cluster.PKI{Dir: filepath.Dir(envOf(plan.HAProxy.Env)["HAPROXY_CODEC_CERT"])}.ClientTLS(cluster.IdentityTools)
	require.NoError(t, err)
	tlsCfg.ServerName, tlsCfg.Certificates = "localhost", nil
	browser := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}, Timeout: 5 * time.Second}
	codec := strings.TrimSuffix(o.CodecEndpoint(), "/codec")
	resp, err := browser.Get(codec + "/codec/whoami")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "127.0.0.1", string(body), "the replica sees the browser's address")
	resp, err = browser.Get(codec + "/whoami")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "nothing but /codec over the codec frontend")
}

// envOf is a process's settings by name.
func envOf(env []string) map[string]string {
	out := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		out[k] = v
	}
	return out
}

// TestPlan_ScrapeTargets_ReplicasWorkersAndTemporal: a Prometheus of the cluster scrapes the four
// Temporal services' /metrics at their fixed ports, and each API replica's and worker's (never
// their public ports) as the supervisor lists them.
func TestPlan_ScrapeTargets_ReplicasWorkersAndTemporal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	plan := cluster.NewPlan(options(dir, 2, 1))
	assert.Equal(t, map[string][]string{
		"temporal": {"127.0.0.1:8000", "127.0.0.1:8001", "127.0.0.1:8002", "127.0.0.1:8003"},
	}, plan.ScrapeTargets())
	assert.Equal(t, map[string]string{"checkout-api": cluster.TargetsFile(dir, "api"),
		"checkout-worker": cluster.TargetsFile(dir, "worker")}, cluster.ScrapeFiles(dir))
	assert.Equal(t, []string{"127.0.0.1:9101", "127.0.0.1:9102"}, []string{plan.APIs[0].Metrics, plan.APIs[1].Metrics})
	assert.Equal(t, "127.0.0.1:9201", plan.Workers[0].Metrics)
	assert.Equal(t, "127.0.0.1:9203", plan.Worker("saga-8", 1, "checkout", 2, false).Metrics,
		"a release's worker, in the third slot")
}
