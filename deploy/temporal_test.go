package deploy_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/grpc"

	"github.com/marketplace/checkout/internal/dev/benchkit"
	"github.com/marketplace/checkout/internal/dev/devtemporal"
	"github.com/marketplace/checkout/internal/dev/pgserver"
	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/internal/telemetry"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var (
	sdkOnce   sync.Once
	sdkSeries map[string]bool
	sdkErr    error
	// panicked makes the probe's first workflow task fail, once per test binary.
	panicked atomic.Bool
)

func probeActivity(context.Context) error { return nil }

// probeWorkflow runs an activity and a local activity, fails its first workflow task, and waits
// for a signal.
func probeWorkflow(ctx workflow.Context) error {
	if panicked.CompareAndSwap(false, true) {
		panic("the probe's first workflow task fails")
	}
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second})
	if err := workflow.ExecuteActivity(ctx, probeActivity).Get(ctx, nil); err != nil {
		return err
	}
	ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: 10 * time.Second})
	if err := workflow.ExecuteLocalActivity(ctx, probeActivity).Get(ctx, nil); err != nil {
		return err
	}
	workflow.GetSignalChannel(ctx, "go").Receive(ctx, nil)
	return nil
}

// temporalExported is every series the Temporal SDK serves through the product's metrics handler
// (telemetry.TemporalMetrics) once a worker has done what the rules watch: workflow tasks and
// activities scheduled and run, a workflow task failed, a run's task finding the worker's cache
// without it (a sticky cache miss), a request refused.
func temporalExported(t *testing.T) map[string]bool {
	t.Helper()
	testenv.SkipIfShort(t, "the Temporal dev server, whose SDK series it reads") // before the Once: a skip inside it would leave it done and empty
	sdkOnce.Do(func() { sdkSeries, sdkErr = runProbe(testenv.TemporalAddress(t)) })
	require.NoError(t, sdkErr)
	return sdkSeries
}

func runProbe(address string) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reg := prometheus.NewRegistry()
	handler, err := telemetry.TemporalMetrics(reg)
	if err != nil {
		return nil, err
	}
	c, err := client.Dial(client.Options{HostPort: address, MetricsHandler: handler,
		Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	// Two runs fit in the cache: the third evicts the first, whose signal then misses it.
	worker.SetStickyWorkflowCacheSize(2)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	queue := "deploy-probe-" + hex.EncodeToString(b)
	w := worker.New(c, queue, worker.Options{})
	w.RegisterWorkflow(probeWorkflow)
	w.RegisterActivity(probeActivity)
	if err := w.Start(); err != nil {
		return nil, err
	}
	defer w.Stop()
	var runs []client.WorkflowRun
	for i := range 3 {
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: queue + "-" + string(rune('a'+i)), TaskQueue: queue},
			probeWorkflow)
		if err != nil {
			return nil, err
		}
		runs = append(runs, run)
		if err := waitForSignalWait(ctx, c, run); err != nil {
			return nil, err
		}
	}
	// The last run, in the cache, finds it (a hit); the first, evicted, misses it.
	for _, run := range []client.WorkflowRun{runs[2], runs[1], runs[0]} {
		if err := c.SignalWorkflow(ctx, run.GetID(), run.GetRunID(), "go", nil); err != nil {
			return nil, err
		}
		if err := run.Get(ctx, nil); err != nil {
			return nil, err
		}
	}
	if _, err := c.DescribeWorkflow(ctx, queue+"-none", ""); err == nil {
		return nil, errors.New("a workflow that does not exist was found")
	}
	families, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
		if f.GetType().String() == "HISTOGRAM" {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				names[f.GetName()+suffix] = true
			}
		}
	}
	return names, nil
}

// waitForSignalWait waits until the run has run its activities and waits for its signal.
func waitForSignalWait(ctx context.Context, c client.Client, run client.WorkflowRun) error {
	for {
		it := c.GetWorkflowHistory(ctx, run.GetID(), run.GetRunID(), false, 0)
		local := false
		for it.HasNext() {
			e, err := it.Next()
			if err != nil {
				return err
			}
			if e.GetMarkerRecordedEventAttributes() != nil {
				local = true
			}
		}
		if local {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

var (
	serverOnce   sync.Once
	serverSeries map[string]bool
	serverErr    error
)

// temporalServerExported is every series the Temporal server serves once it has timed out a
// workflow task that no worker received: a dev server of the pinned CLI of its own, with its
// /metrics on (the shared one keeps them off), whose probe workflow's first task is recorded as
// started while the worker is answered with an empty poll. The rules read the server's series
// from its own job (`temporal` in prometheus.yml).
func temporalServerExported(t *testing.T) map[string]bool {
	t.Helper()
	testenv.SkipIfShort(t, "a Temporal dev server, whose series it reads") // before the Once, as temporalExported
	serverOnce.Do(func() { serverSeries, serverErr = runServerProbe() })
	require.NoError(t, serverErr)
	return serverSeries
}

func runServerProbe() (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := startLosingServer(ctx, "deploy-server-probe")
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	if err := srv.lose(ctx, 1); err != nil {
		return nil, err
	}
	// The server's counters reach /metrics as their reporter flushes them.
	for {
		names := map[string]bool{}
		if err := benchkit.ScrapeMetrics(ctx, "http://"+srv.metrics+"/metrics",
			func(name string, _ map[string]string, _ float64) { names[name] = true }); err != nil {
			return nil, err
		}
		if names["start_to_close_timeout"] {
			return names, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no start_to_close_timeout on the dev server's /metrics: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// losingServer is a dev server of the pinned CLI with its /metrics on (at metrics, host:port)
// and a worker whose client loses the first workflow task of each workflow it is given.
type losingServer struct {
	metrics string
	lose    func(ctx context.Context, n int) error
	stop    func()
}

// startLosingServer starts a losingServer whose worker polls taskQueue. lose(n) starts n empty
// workflows with a workflow task timeout of one second and returns once the server has timed out
// each one's first task and the next has completed it.
func startLosingServer(ctx context.Context, taskQueue string) (*losingServer, error) {
	port, err := pgserver.FreePort()
	if err != nil {
		return nil, err
	}
	srv, err := devtemporal.Start(ctx, devtemporal.Options{CLI: os.Getenv("TEMPORAL_CLI"), MetricsPort: port})
	if err != nil {
		return nil, err
	}
	option, lost := testenv.LoseWorkflowTask(func(string) bool { return true })
	c, err := client.Dial(client.Options{HostPort: srv.Address, Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler)),
		ConnectionOptions: client.ConnectionOptions{DialOptions: []grpc.DialOption{option}}})
	if err != nil {
		srv.Stop()
		return nil, err
	}
	w := worker.New(c, taskQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(func(workflow.Context) error { return nil }, workflow.RegisterOptions{Name: "lost"})
	if err := w.Start(); err != nil {
		c.Close()
		srv.Stop()
		return nil, err
	}
	lose := func(ctx context.Context, n int) error {
		before := lost.Load()
		var runs []client.WorkflowRun
		for range n {
			run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: taskQueue,
				WorkflowTaskTimeout: time.Second}, "lost")
			if err != nil {
				return err
			}
			runs = append(runs, run)
		}
		for _, run := range runs {
			if err := run.Get(ctx, nil); err != nil {
				return err
			}
		}
		if got := lost.Load() - before; got != int32(n) {
			return fmt.Errorf("%d workflow tasks lost, want %d", got, n)
		}
		return nil
	}
	return &losingServer{metrics: "127.0.0.1:" + strconv.Itoa(port), lose: lose,
		stop: func() { w.Stop(); c.Close(); srv.Stop() }}, nil
}
