package benchkit

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/marketplace/checkout/internal/codec"
	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/internal/dev/cluster"
	"github.com/marketplace/checkout/internal/dev/pgserver"
)

// Stack is `bin/checkout-dev dev` (what `make run` starts: PostgreSQL cluster, Temporal dev server,
// worker and API in one process tree) on free ports and a data folder of its own.
type Stack struct {
	Cmd *exec.Cmd
	// Dir is the data folder: the cluster in Dir/pg, the dev server's log in Dir/temporal.log.
	Dir string
	// Base is the API's address, Metrics the stack's own /metrics (its METRICS_ADDR), Temporal the
	// dev server's frontend, TemporalMetrics the dev server's Prometheus /metrics, DatabaseURL the
	// cluster's checkout database, Secret the JWT secret the API accepts.
	Base, Metrics, Temporal, TemporalMetrics, DatabaseURL, Secret string
	// NATS is the event broker's URL (the dev stack's; empty for the cluster).
	NATS string
	// DataConverter is the stack's codec over the SDK's converter: the floor's workflows pay for
	// encryption as the orders do (the default converter for a build from before the codec).
	DataConverter converter.DataConverter
	// OpsToken is an ops person's token from the cluster's identity provider (oscar's), which the
	// cluster's API takes ops from (empty for the dev stack, which takes minted ones).
	OpsToken string
	// Tokens gives shoppers' and sellers' tokens from the cluster's identity provider, whose
	// tokens alone its API takes (nil for the dev stack, which takes tokens minted with Secret).
	Tokens *cluster.Tokens
	// TemporalTLS is how the tools dial Temporal: the cluster's tools certificate (nil: the dev
	// server, plaintext).
	TemporalTLS *tls.Config
	// Cluster is set for `checkout-dev cluster`: Metrics is then its first worker's /metrics,
	// TemporalMetrics its frontend's, and TemporalServiceMetrics those of each Temporal service.
	Cluster                bool
	TemporalServiceMetrics []string
	// Ports are the cluster's listeners, and Output the file of its own output (its lines on
	// restarts), for `checkout-dev cluster`.
	Ports  cluster.Ports
	Output string
	// Keep leaves the data folder (its logs) in place when the stack stops.
	Keep bool
	// exited is closed once the cluster's process has ended (the cluster only).
	exited chan struct{}
}

// StartStack starts `bin/checkout-dev dev` with env added to its environment and waits for
// /readyz. The tools run from the module root, where `make build` leaves bin/checkout-dev and the
// bin/checkout it keeps as its build's.
func StartStack(ctx context.Context, prefix string, env ...string) (*Stack, error) {
	return StartStackOf(ctx, "bin/checkout-dev", prefix, env...)
}

// StartStackOf is StartStack with another build of the binary that runs `dev` (a baseline to
// compare with: its checkout-dev, or the checkout of a build from before the two binaries).
func StartStackOf(ctx context.Context, binary, prefix string, env ...string) (*Stack, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, err
	}
	// The cluster runs as another user where the tool runs as root: the folder must be readable.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	ports := make([]int, 8)
	for i := range ports {
		if ports[i], err = pgserver.FreePort(); err != nil {
			return nil, err
		}
	}
	httpPort, tport, pgPort, uiPort, metricsPort, ownMetricsPort := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5]
	s := &Stack{Dir: dir, Base: fmt.Sprintf("http://127.0.0.1:%d", httpPort), Temporal: fmt.Sprintf("127.0.0.1:%d", tport),
		Metrics:         fmt.Sprintf("http://127.0.0.1:%d/metrics", ownMetricsPort),
		TemporalMetrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort),
		DatabaseURL:     fmt.Sprintf("postgres://%s@127.0.0.1:%d/checkout?sslmode=disable", pgserver.Superuser, pgPort),
		NATS:            fmt.Sprintf("nats://127.0.0.1:%d", ports[6])}
	s.Cmd = exec.CommandContext(ctx, binary, "dev")
	s.Cmd.Env = append(os.Environ(), "DATA_DIR="+dir, "PG_PORT="+strconv.Itoa(pgPort),
		"HTTP_ADDR=127.0.0.1:"+strconv.Itoa(httpPort), "PUBLIC_BASE_URL="+s.Base,
		"METRICS_ADDR=127.0.0.1:"+strconv.Itoa(ownMetricsPort),
		"TEMPORAL_PORT="+strconv.Itoa(tport), "TEMPORAL_UI_PORT="+strconv.Itoa(uiPort),
		"TEMPORAL_METRICS_PORT="+strconv.Itoa(metricsPort), "LOG_LEVEL=warn",
		"NATS_PORT="+strconv.Itoa(ports[6]), "NATS_MONITOR_PORT="+strconv.Itoa(ports[7]),
		// No traces unless env asks for them (TRACES_ENDPOINT, or Jaeger's ports): a benchmark
		// measures the product as it ran before tracing, and make run's Jaeger ports stay free.
		"JAEGER_UI_PORT=0")
	s.Cmd.Env = append(s.Cmd.Env, env...)
	if err := startLogged(s.Cmd, filepath.Join(dir, "dev.log")); err != nil {
		return nil, err
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if resp, err := hc.Get(s.Base + "/readyz"); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				// The stack's development secret, which it made in its data folder (a build from
				// before those were made per folder ran on the value it published).
				s.Secret = "dev-only-jwt-secret-change-me"
				if secrets, err := config.ReadDevSecrets(dir); err == nil {
					s.Secret = secrets.JWT
				}
				if s.DataConverter, err = devDataConverter(dir); err != nil {
					s.Stop()
					return nil, err
				}
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, errors.New("the dev stack did not become ready; see " + filepath.Join(dir, "dev.log"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// StartCluster starts `bin/checkout-dev cluster` (what `make cluster` runs: the Temporal server as four
// processes, workers and API replicas behind HAProxy) on free ports and a data folder of its own,
// with args added to its flags, and waits until it runs.
func StartCluster(ctx context.Context, prefix string, args ...string) (*Stack, error) {
	return StartClusterWith(ctx, ClusterSpec{Prefix: prefix, Args: args})
}

// ClusterSpec is how StartClusterWith runs `checkout-dev cluster`.
type ClusterSpec struct {
	// Binary is the harness's binary (default bin/checkout-dev), which runs the checkout beside
	// it unless Args give --binary; Tools the folder of temporal-server, temporal-sql-tool and
	// temporal-ui-server (default: the binary's).
	Binary, Tools string
	// Prefix begins the data folder's name.
	Prefix string
	// Env is the cluster's environment (default: this process's), with LOG_LEVEL=warn added.
	Env []string
	// Args are added to its flags.
	Args []string
}

// StartClusterWith is StartCluster as spec says.
func StartClusterWith(ctx context.Context, spec ClusterSpec) (*Stack, error) {
	binary, env := cmp.Or(spec.Binary, "bin/checkout-dev"), spec.Env
	if env == nil {
		env = os.Environ()
	}
	args := spec.Args
	if spec.Tools != "" {
		args = append([]string{"--bin", spec.Tools}, args...)
	}
	dir, err := os.MkdirTemp("", spec.Prefix)
	if err != nil {
		return nil, err
	}
	// The cluster's PostgreSQL runs as another user where the tool runs as root.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	first, err := cluster.FreeRange()
	if err != nil {
		return nil, err
	}
	pt := cluster.PortsFrom(first)
	loop := func(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }
	s := &Stack{Dir: dir, Cluster: true, Ports: pt, Base: "http://" + loop(pt.LB), Temporal: loop(pt.Frontend),
		Metrics:         "http://" + loop(pt.WorkerMetrics) + "/metrics",
		TemporalMetrics: "http://" + loop(pt.FrontendMetrics) + "/metrics",
		DatabaseURL:     cluster.DatabaseURL(pt.Postgres, "checkout")}
	for _, port := range []int{pt.FrontendMetrics, pt.HistoryMetrics, pt.MatchingMetrics, pt.WorkerServiceMetrics} {
		s.TemporalServiceMetrics = append(s.TemporalServiceMetrics, "http://"+loop(port)+"/metrics")
	}
	// Its kept binaries in its own folder: the repository's bin/builds is make cluster's.
	s.Cmd = exec.CommandContext(ctx, binary, append([]string{"cluster", "--ports-from", strconv.Itoa(first),
		"--dir", dir, "--builds", filepath.Join(dir, "builds")}, args...)...)
	s.Cmd.Env = append(env, "LOG_LEVEL=warn")
	out := filepath.Join(dir, "cluster.out")
	s.Output = out
	if err := startLogged(s.Cmd, out); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	s.exited = make(chan struct{})
	go func() { done <- s.Cmd.Wait(); close(s.exited) }()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		said, _ := os.ReadFile(out)
		if strings.Contains(string(said), "checkout cluster is running") {
			break
		}
		select {
		case err := <-done:
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("checkout cluster exited while starting (%v):\n%s", err, said)
		case <-time.After(250 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, errors.New("checkout cluster not running after 5 minutes; see " + out)
		}
	}
	secrets, err := config.ClusterSecretsOf(dir)
	if err == nil {
		s.TemporalTLS, err = cluster.Options{Dir: dir}.PKI().ClientTLS(cluster.IdentityTools)
	}
	if err == nil {
		s.Secret = secrets.JWT
		var key codec.Key
		if key, err = secrets.Codec(); err == nil {
			var pc *codec.Codec
			if pc, err = codec.New(key); err == nil {
				s.DataConverter = pc.DataConverter()
			}
		}
	}
	if err == nil {
		s.OpsToken, err = cluster.StaffToken(ctx, dir, pt, "oscar")
	}
	if err == nil {
		o := cluster.Options{Dir: dir, Ports: pt}
		s.Tokens, err = cluster.ClusterTokens(dir, o.Issuer(), cluster.OIDCClientID)
	}
	if err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// startLogged starts cmd with its output in the file log; it is interrupted (and stops its
// children) when this process dies.
func startLogged(cmd *exec.Cmd, log string) error {
	f, err := os.Create(log)
	if err != nil {
		return err
	}
	defer f.Close() // the child has its own copy
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGINT}
	return cmd.Start()
}

// CheckoutMetrics are the /metrics of the checkout's processes: the dev stack's one, or the
// cluster's first replicas API replicas and workers.
func (s *Stack) CheckoutMetrics(replicas int) []string {
	if !s.Cluster {
		return []string{s.Metrics}
	}
	var urls []string
	for i := range replicas {
		urls = append(urls, "http://127.0.0.1:"+strconv.Itoa(s.Ports.APIMetrics+i)+"/metrics",
			"http://127.0.0.1:"+strconv.Itoa(s.Ports.WorkerMetrics+i)+"/metrics")
	}
	return urls
}

// Stop interrupts the stack (it stops its children) and removes its data folder, unless Keep.
func (s *Stack) Stop() {
	if s.Cmd.Process != nil {
		_ = s.Cmd.Process.Signal(os.Interrupt)
		if s.exited != nil {
			<-s.exited // its own goroutine waits for it
		} else {
			_ = s.Cmd.Wait()
		}
	}
	if !s.Keep {
		_ = os.RemoveAll(s.Dir)
	}
}

// floorQueue is the task queue of the floor's own worker.
const floorQueue = "bench-floor"

// EmptyWorkflow answers its update at once and ends: the floor of a workflow round trip.
func EmptyWorkflow(ctx workflow.Context) error {
	done := false
	if err := workflow.SetUpdateHandler(ctx, "ping", func(ctx workflow.Context) (string, error) {
		done = true
		return "pong", nil
	}); err != nil {
		return err
	}
	return workflow.Await(ctx, func() bool { return done && workflow.AllHandlersFinished(ctx) })
}

// Floor starts empty workflows the way the API starts an order: Update-with-Start, conflict
// policy use-existing, waiting for the update's result; its worker runs in the tool's process.
type Floor struct {
	c client.Client
	w worker.Worker
}

// StartFloor connects to the stack's dev server with its data converter and starts the floor's
// worker.
func StartFloor(s *Stack) (*Floor, error) {
	f, err := StartFloorClient(s)
	if err != nil {
		return nil, err
	}
	f.w = worker.New(f.c, floorQueue, worker.Options{})
	f.w.RegisterWorkflow(EmptyWorkflow)
	if err := f.w.Start(); err != nil {
		f.c.Close()
		return nil, err
	}
	return f, nil
}

// StartFloorClient is StartFloor without the worker: the floor's workflows then run on a worker of
// another process (RunFloorWorker), whose CPU can be read apart from the client's.
func StartFloorClient(s *Stack) (*Floor, error) {
	c, err := client.Dial(client.Options{HostPort: s.Temporal, DataConverter: s.DataConverter,
		Logger:            sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler)),
		ConnectionOptions: client.ConnectionOptions{TLS: s.TemporalTLS}})
	if err != nil {
		return nil, err
	}
	return &Floor{c: c}, nil
}

// RunFloorWorker runs the floor's worker on the dev stack whose frontend is temporal and whose
// data folder (its codec key) is dir, until ctx ends; ready is called once it polls.
func RunFloorWorker(ctx context.Context, temporal, dir string, ready func()) error {
	dc, err := devDataConverter(dir)
	if err != nil {
		return err
	}
	f, err := StartFloor(&Stack{Temporal: temporal, DataConverter: dc})
	if err != nil {
		return err
	}
	defer f.Close()
	ready()
	<-ctx.Done()
	return nil
}

// Run starts one empty workflow with id and waits for its update's answer.
func (f *Floor) Run(ctx context.Context, id string) error {
	op := f.c.NewWithStartWorkflowOperation(client.StartWorkflowOptions{ID: id, TaskQueue: floorQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING}, EmptyWorkflow)
	h, err := f.c.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{StartWorkflowOperation: op,
		UpdateOptions: client.UpdateWorkflowOptions{UpdateName: "ping", WaitForStage: client.WorkflowUpdateStageCompleted}})
	if err != nil {
		return err
	}
	return h.Get(ctx, nil)
}

// Close stops the worker and the client.
func (f *Floor) Close() {
	if f.w != nil {
		f.w.Stop()
	}
	f.c.Close()
}

// Client is the floor's Temporal client (the tools' other calls to the dev server use it too).
func (f *Floor) Client() client.Client { return f.c }

// devDataConverter is the codec of the dev stack on data folder dir over the SDK's converter (the
// default converter for a build from before development secrets or the codec).
func devDataConverter(dir string) (converter.DataConverter, error) {
	secrets, err := config.ReadDevSecrets(dir)
	if errors.Is(err, os.ErrNotExist) {
		return converter.GetDefaultDataConverter(), nil
	}
	if err != nil {
		return nil, err
	}
	key, err := secrets.Codec()
	if err != nil {
		return converter.GetDefaultDataConverter(), nil
	}
	pc, err := codec.New(key)
	if err != nil {
		return nil, err
	}
	return pc.DataConverter(), nil
}
