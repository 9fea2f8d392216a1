package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"text/tabwriter"
	"time"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/internal/service"
	"github.com/marketplace/checkout/worker"
	"github.com/marketplace/checkout/workflows"
)

// versionInfo is what `checkout version` says of this binary.
type versionInfo struct {
	// BuildID is the build of the workflow code (workflows.BuildID): the worker deployment
	// version this binary's workers poll as.
	BuildID string `json:"buildId"`
	// Commit is the source revision it was built from, and Modified whether the tree had
	// uncommitted changes.
	Commit   string `json:"commit,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
	// TemporalTLS: its processes reach Temporal over mutual TLS (TEMPORAL_TLS_*). A cluster runs
	// a build without it through its legacy proxy.
	TemporalTLS bool `json:"temporalTLS"`
}

func thisVersion() versionInfo {
	v := versionInfo{BuildID: workflows.BuildID, Go: runtime.Version(), TemporalTLS: true}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Commit = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	return v
}

// runVersion is `checkout version [--json]`.
func runVersion(args []string) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "write it as JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	v := thisVersion()
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(v)
	}
	commit := v.Commit
	if commit == "" {
		commit = "unknown"
	} else if v.Modified {
		commit += " (modified)"
	}
	fmt.Printf("checkout build %s, commit %s, %s\n", v.BuildID, commit, v.Go)
	return nil
}

const buildsUsage = `usage: checkout builds [list]
       checkout builds move --from BUILD [--dry-run] [--limit N]
       checkout builds set-current BUILD
       checkout builds ramp BUILD PERCENT

list         every build of the worker deployment: current, ramping, draining, drained or
             inactive, its open runs and the oldest of them; and the open runs of retired builds
move         move the open runs pinned to BUILD onto this binary's build where their history
             replays on this build's code; list those that stay, with the reason
set-current  make BUILD take every new run (its workers must be polling)
ramp         let BUILD take PERCENT of new runs beside the current build (0 ends the ramp)

Against TEMPORAL_ADDRESS and TEMPORAL_NAMESPACE (the local stack's when unset), deployment
TEMPORAL_DEPLOYMENT_NAME; move decrypts histories with the TEMPORAL_CODEC_* keys.
`

// runBuilds is `checkout builds`: the builds of the workflow code in the worker deployment, and
// moving long-waiting runs to this build.
func runBuilds(ctx context.Context, cfg config.Config, args []string) error {
	sub := "list"
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		sub, args = args[0], args[1:]
	}
	cfg = service.DevDefaults(cfg)
	c, err := dialTemporal(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	switch sub {
	case "list":
		return listBuilds(ctx, c, cfg, os.Stdout)
	case "move":
		return moveRuns(ctx, c, cfg, args, os.Stdout)
	case "set-current", "ramp":
		return route(ctx, c, cfg, sub, args)
	case "help", "-h", "--help":
		fmt.Print(buildsUsage)
		return nil
	}
	return fmt.Errorf("unknown builds command %q\n\n%s", sub, buildsUsage)
}

// dialTemporal connects to Temporal with the product's codec (histories are encrypted).
func dialTemporal(ctx context.Context, cfg config.Config) (client.Client, error) {
	cdc, err := cfg.PayloadCodec()
	if err != nil {
		return nil, err
	}
	tlsCfg, err := cfg.TemporalTLSConfig()
	if err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := client.DialContext(dctx, client.Options{HostPort: cfg.TemporalAddress, Namespace: cfg.TemporalNamespace,
		Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler)), DataConverter: cdc.DataConverter(),
		ConnectionOptions: client.ConnectionOptions{TLS: tlsCfg}})
	if err != nil {
		return nil, fmt.Errorf("cannot reach Temporal at %s (set TEMPORAL_ADDRESS): %w", cfg.TemporalAddress, err)
	}
	return c, nil
}

func listBuilds(ctx context.Context, c client.Client, cfg config.Config, out io.Writer) error {
	builds, err := worker.Builds(ctx, c, cfg.DeploymentName)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "BUILD\tSTATE\tOPEN RUNS\tOLDEST OPEN RUN\n")
	for _, b := range builds {
		state := b.Role
		switch {
		case b.Role == worker.RoleRamping:
			state = fmt.Sprintf("%s %g%%", b.Role, b.RampPercentage)
		case !b.DrainedSince.IsZero():
			state += " since " + b.DrainedSince.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", b.BuildID, state, b.Open.Count, oldest(b.Open))
	}
	for _, rc := range worker.RetiredChecks(cfg.DeploymentName, workflows.RetiredBuilds) {
		open, err := worker.CountOpen(ctx, c, rc.Query)
		if err != nil {
			return err
		}
		fmt.Fprintf(tw, "%s\tretired\t%d\t%s\n", rc.Label, open.Count, oldest(open))
	}
	if len(builds) == 0 {
		fmt.Fprintf(tw, "(no worker of deployment %s has polled yet)\t\t\t\n", cfg.DeploymentName)
	}
	return tw.Flush()
}

func oldest(o worker.OpenRuns) string {
	if o.Oldest == nil {
		return "-"
	}
	return o.Oldest.Started.UTC().Format(time.RFC3339) + "  " + o.Oldest.WorkflowID
}

func moveRuns(ctx context.Context, c client.Client, cfg config.Config, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("builds move", flag.ContinueOnError)
	from := fs.String("from", "", "the build whose open runs move (required)")
	dry := fs.Bool("dry-run", false, "check every run, move none")
	limit := fs.Int("limit", 0, "look at no more than this many runs (0: 10000)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *from == "" {
		return errors.New("--from BUILD is required")
	}
	cdc, err := cfg.PayloadCodec()
	if err != nil {
		return err
	}
	rp, err := worker.NewReplayer(cdc.DataConverter())
	if err != nil {
		return err
	}
	moves, err := worker.MoveRuns(ctx, c, rp, worker.MoveOptions{Deployment: cfg.DeploymentName, From: *from,
		To: workflows.BuildID, DryRun: *dry, Limit: *limit})
	if err != nil {
		return err
	}
	moved, movable := 0, 0
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "WORKFLOW\tTYPE\tSTARTED\tRESULT\n")
	for _, m := range moves {
		var result string
		switch {
		case m.Moved:
			result = "moved to " + workflows.BuildID
			moved++
		case m.Movable:
			result = "replays on " + workflows.BuildID + ": would move"
			movable++
		default:
			result = "stays on " + *from + ": " + m.Reason
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", m.WorkflowID, m.Type, m.Started.UTC().Format(time.RFC3339), result)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if *dry {
		fmt.Fprintf(out, "%d of %d open runs of %s would move to %s (dry run: none moved)\n", movable, len(moves), *from, workflows.BuildID)
		return nil
	}
	fmt.Fprintf(out, "%d of %d open runs of %s moved to %s\n", moved, len(moves), *from, workflows.BuildID)
	return nil
}

// route is `builds set-current BUILD` and `builds ramp BUILD PERCENT`.
func route(ctx context.Context, c client.Client, cfg config.Config, sub string, args []string) error {
	if len(args) < 1 || (sub == "ramp" && len(args) != 2) || (sub == "set-current" && len(args) != 1) {
		return fmt.Errorf("usage: checkout builds %s\n\n%s", map[string]string{"set-current": "set-current BUILD",
			"ramp": "ramp BUILD PERCENT"}[sub], buildsUsage)
	}
	h := c.WorkerDeploymentClient().GetHandle(cfg.DeploymentName)
	if sub == "set-current" {
		if _, err := h.SetCurrentVersion(ctx, client.WorkerDeploymentSetCurrentVersionOptions{BuildID: args[0]}); err != nil {
			return fmt.Errorf("make %s current: %w", args[0], err)
		}
		fmt.Printf("%s is current: new runs start on it; runs begun on earlier builds stay on theirs\n", args[0])
		return nil
	}
	var pct float32
	if _, err := fmt.Sscanf(args[1], "%g", &pct); err != nil || pct < 0 || pct > 100 {
		return fmt.Errorf("PERCENT %q: a number from 0 to 100", args[1])
	}
	build := args[0]
	if pct == 0 {
		build = "" // no ramping version
	}
	if _, err := h.SetRampingVersion(ctx, client.WorkerDeploymentSetRampingVersionOptions{BuildID: build, Percentage: pct}); err != nil {
		return fmt.Errorf("ramp %s to %g%%: %w", args[0], pct, err)
	}
	fmt.Printf("%s takes %g%% of new runs\n", args[0], pct)
	return nil
}
