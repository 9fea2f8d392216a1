package worker

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"

	"github.com/marketplace/checkout/workflows"
)

// unversionedReleases are the releases that ran before worker versioning: their runs carry no
// deployment version, so they are found as the unversioned open runs.
var unversionedReleases = []string{"v1", "v2"}

// RetiredCheck is one visibility query for the open runs of retired builds, and the label its
// count goes under.
type RetiredCheck struct {
	Label, Query string
}

// RetiredChecks are the queries for the open runs of the retired builds: the unversioned
// releases together, then each retired versioned build.
func RetiredChecks(deployment string, retired []string) []RetiredCheck {
	var out []RetiredCheck
	var unversioned []string
	for _, b := range retired {
		if slices.Contains(unversionedReleases, b) {
			unversioned = append(unversioned, b)
			continue
		}
		out = append(out, RetiredCheck{Label: b, Query: PinnedQuery(deployment, b)})
	}
	if len(unversioned) > 0 {
		out = append([]RetiredCheck{{Label: "unversioned (" + strings.Join(unversioned, ", ") + ")", Query: UnversionedQuery}}, out...)
	}
	return out
}

// retiredCheckEvery is how often a worker counts the retired builds' open runs again, so that
// the alert clears once support has ended them.
const retiredCheckEvery = 5 * time.Minute

// retiredWatch counts, at start-up and every few minutes, the open runs of the builds whose code
// is gone (workflows.RetiredBuilds): no worker can run them, so each is an incident. It logs an
// error naming them and exports the count (alert CheckoutRunsOfRetiredBuild).
func retiredWatch(c client.Client, deployment string, log *slog.Logger, runs *prometheus.GaugeVec, checkError prometheus.Gauge) Loop {
	checks := RetiredChecks(deployment, workflows.RetiredBuilds)
	check := func(ctx context.Context) {
		failed := 0.0
		for _, rc := range checks {
			open, err := CountOpen(ctx, c, rc.Query)
			if err != nil {
				if ctx.Err() == nil {
					log.Warn("could not count the open runs of a retired build", "build", rc.Label, "error", err)
				}
				failed = 1
				continue
			}
			runs.WithLabelValues(rc.Label).Set(float64(open.Count))
			if open.Count > 0 {
				args := []any{"build", rc.Label, "open_runs", open.Count, "query", rc.Query}
				if open.Oldest != nil {
					args = append(args, "workflow_id", open.Oldest.WorkflowID, "started", open.Oldest.Started)
				}
				log.Error("open runs of a retired build: no worker can run them (docs/runbook.md, CheckoutRunsOfRetiredBuild)", args...)
			}
		}
		checkError.Set(failed)
	}
	return Loop{Name: "retired builds check", Run: func(ctx context.Context) error {
		if len(checks) == 0 {
			<-ctx.Done()
			return nil
		}
		t := time.NewTicker(retiredCheckEvery)
		defer t.Stop()
		for {
			check(ctx)
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
	}}
}
