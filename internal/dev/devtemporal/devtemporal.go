// Package devtemporal runs the pinned Temporal CLI dev server as a child process, with the same
// settings for `dev` and for the tests: a SQLite file in WAL mode and eager activity execution.
package devtemporal

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/marketplace/checkout/internal/dev/childproc"
	"github.com/marketplace/checkout/internal/dev/pgserver"
)

// Options describe the dev server to run.
type Options struct {
	// CLI is the path of the temporal binary (bin/temporal, installed by the Makefile).
	CLI string
	// DBFile is the SQLite file; empty keeps everything in memory.
	DBFile string
	// SQLiteSync is the SQLite file's `synchronous` pragma: normal (empty: in WAL mode a commit is
	// not fsynced, the checkpoint is) or full (every commit fsynced).
	SQLiteSync string
	// Port is the frontend gRPC port; 0 picks a free one.
	Port int
	// UIPort serves the Web UI; 0 runs headless.
	UIPort int
	// UICodecEndpoint is the codec server the Web UI asks to decode payloads (empty: none).
	UICodecEndpoint string
	// MetricsPort serves the dev server's Prometheus /metrics; 0 lets the CLI pick a port.
	MetricsPort int
	Namespace   string
	// DynamicConfig are more dynamic config values (key=JSON value), over the defaults of Start.
	DynamicConfig []string
	// SearchAttributes are registered as the server starts (name → Int, Keyword, Bool, …), so they
	// are there before any client uses them.
	SearchAttributes map[string]string
	// Log receives the server's output; nil discards it.
	Log io.Writer
}

// Server is a running dev server.
type Server struct {
	Address string
	proc    *childproc.Process
}

// FindCLI resolves the temporal binary: the given path, then the project's bin/ walking up from
// the working directory (tests run in package folders), then PATH.
func FindCLI(path string) (string, error) {
	if path == "" {
		path = "bin/temporal"
	}
	if filepath.IsAbs(path) {
		if _, err := os.Stat(path); err == nil {
			return path, nil
		}
	} else if wd, err := os.Getwd(); err == nil {
		for dir := wd; ; dir = filepath.Dir(dir) {
			p := filepath.Join(dir, path)
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
			if dir == filepath.Dir(dir) {
				break
			}
		}
	}
	if p, err := exec.LookPath("temporal"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("temporal CLI not found at %s: run `make tools` (installs the pinned v1.5.1)", path)
}

// Start launches the dev server and waits until its frontend answers.
func Start(ctx context.Context, o Options) (*Server, error) {
	cli, err := FindCLI(o.CLI)
	if err != nil {
		return nil, err
	}
	port := o.Port
	if port == 0 {
		if port, err = pgserver.FreePort(); err != nil {
			return nil, err
		}
	}
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	args := []string{"server", "start-dev",
		"--ip", "127.0.0.1", "--port", strconv.Itoa(port),
		"--namespace", o.Namespace,
		"--log-level", "warn", "--log-format", "json",
		"--dynamic-config-value", "system.enableActivityEagerExecution=true",
		"--dynamic-config-value", "frontend.enableUpdateWorkflowExecution=true",
		"--dynamic-config-value", "frontend.enableExecuteMultiOperation=true",
		// One partition per task queue: with several, a task and the poller waiting for it can sit
		// on different partitions and meet only after a forwarding delay (tens to hundreds of ms),
		// which a single-node dev server gains nothing from.
		"--dynamic-config-value", "matching.numTaskqueueReadPartitions=1",
		"--dynamic-config-value", "matching.numTaskqueueWritePartitions=1",
		// The CLI turns this on for its own tests: every search attribute read (each upsert, each
		// visibility write) then re-reads the cluster metadata from SQLite. A server keeps it off
		// and caches them; the product registers its attributes before it uses them.
		"--dynamic-config-value", "system.forceSearchAttributesCacheRefreshOnRead=false",
		// Worker versions: a version that stopped taking new runs reports itself drained within
		// seconds of its last pinned run ending (visibility is immediate here; a cluster keeps the
		// minutes-long defaults).
		"--dynamic-config-value", "matching.wv.VersionDrainageStatusRefreshInterval=\"2s\"",
		"--dynamic-config-value", "matching.wv.VersionDrainageStatusVisibilityGracePeriod=\"2s\"",
	}
	// Given after the defaults above, which they override (the CLI keeps the last value of a key).
	for _, kv := range o.DynamicConfig {
		args = append(args, "--dynamic-config-value", kv)
	}
	if o.DBFile != "" {
		if err := os.MkdirAll(filepath.Dir(o.DBFile), 0o755); err != nil {
			return nil, err
		}
		args = append(args, "--db-filename", o.DBFile,
			"--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous="+cmp.Or(o.SQLiteSync, "normal"))
	}
	if o.MetricsPort > 0 {
		args = append(args, "--metrics-port", strconv.Itoa(o.MetricsPort))
	}
	for _, name := range slices.Sorted(maps.Keys(o.SearchAttributes)) {
		args = append(args, "--search-attribute", name+"="+o.SearchAttributes[name])
	}
	if o.UIPort > 0 {
		args = append(args, "--ui-port", strconv.Itoa(o.UIPort))
		if o.UICodecEndpoint != "" {
			args = append(args, "--ui-codec-endpoint", o.UICodecEndpoint)
		}
	} else {
		args = append(args, "--headless")
	}
	proc, err := childproc.Start("temporal dev server", exec.Command(cli, args...), o.Log)
	if err != nil {
		return nil, err
	}
	s := &Server{Address: "127.0.0.1:" + strconv.Itoa(port), proc: proc}
	if err := proc.WaitReady(ctx, 90*time.Second, func(ctx context.Context) error { return s.ready(ctx, o.Namespace) }); err != nil {
		proc.Stop()
		return nil, err
	}
	return s, nil
}

// ready: the frontend answers, and knows the namespace.
func (s *Server) ready(ctx context.Context, namespace string) error {
	c, err := client.Dial(client.Options{HostPort: s.Address, Namespace: namespace, Logger: quietLogger})
	if err != nil {
		return err
	}
	defer c.Close()
	hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := c.CheckHealth(hctx, &client.CheckHealthRequest{}); err != nil {
		return err
	}
	_, err = c.WorkflowService().DescribeNamespace(hctx, describeNamespace(namespace))
	return err
}

// Stop ends the server and waits for it.
func (s *Server) Stop() {
	if s != nil {
		s.proc.Stop()
	}
}

func describeNamespace(ns string) *workflowservice.DescribeNamespaceRequest {
	return &workflowservice.DescribeNamespaceRequest{Namespace: ns}
}

// quietLogger keeps the SDK's dial retries out of the output while the server starts.
var quietLogger = sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))
