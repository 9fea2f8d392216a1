package deploy_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/dev/devprometheus"
	"github.com/marketplace/checkout/internal/dev/testenv"
)

// The alert on lost workflow tasks, on a live server: Prometheus with the product's rules scrapes a
// dev server of the pinned CLI as the `temporal` job; the recorded rate of tasks lost reads 0 and
// CheckoutWorkflowTasksLost stays quiet while one started task has been timed out, then the alert
// is pending (its `for` is five minutes) once five more have been, more than three in five
// minutes.
func TestRules_WorkflowTasksLost_PendingOnALiveServer(t *testing.T) {
	testenv.SkipIfShort(t, "a Temporal dev server and Prometheus")
	// Not parallel: its worker would share the process's sticky cache with the SDK probe's
	// (temporalExported), whose size that probe sets to see a miss.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, err := startLosingServer(ctx, "deploy-alert-probe")
	require.NoError(t, err)
	defer srv.stop()
	prom, err := devprometheus.Start(ctx, devprometheus.Options{Dir: t.TempDir(), Interval: time.Second,
		Targets: map[string][]string{"temporal": {srv.metrics}}, Rules: []string{"../" + devprometheus.RulesFile}})
	require.NoError(t, err)
	defer prom.Stop()

	// Prometheus sees the counter's series appear with the first task lost; only what it adds
	// after that is an increase, so the first comes on its own: the recorded rate stays 0.
	const lostRate = "checkout:temporal_workflow_tasks_lost:rate5m"
	require.NoError(t, srv.lose(ctx, 1))
	require.Eventually(t, func() bool {
		v, err := prom.Value(ctx, lostRate)
		return err == nil && v == "0"
	}, time.Minute, 250*time.Millisecond, "Prometheus records the rate from the server's series, none lost yet by its count")
	state, err := prom.AlertState(ctx, "CheckoutWorkflowTasksLost")
	require.NoError(t, err)
	assert.Empty(t, state, "one task lost is not an alert")

	require.NoError(t, srv.lose(ctx, 5))
	require.Eventually(t, func() bool {
		s, err := prom.AlertState(ctx, "CheckoutWorkflowTasksLost")
		return err == nil && (s == "pending" || s == "firing")
	}, time.Minute, 250*time.Millisecond, "five more tasks lost put the alert in pending")
}
