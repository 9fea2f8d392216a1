package worker

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/marketplace/checkout/internal/config"
)

// The worker's tuning settings reach the SDK's options; a worker given none polls for workflow
// tasks with up to 8 polls on each of its queues, scaled by the SDK, and leaves every other value
// to the SDK's default (0).
func TestOptions_Tuning(t *testing.T) {
	cfg, err := config.Load(func(string) string { return "" })
	require.NoError(t, err)
	o := options(Deps{Config: cfg})
	assert.Zero(t, o.MaxConcurrentWorkflowTaskPollers, "the fixed pollers are not used")
	assert.Equal(t, autoscaled(2, 8), o.WorkflowTaskPollerBehavior)
	assert.Zero(t, o.MaxConcurrentActivityTaskPollers)
	assert.Zero(t, o.MaxConcurrentWorkflowTaskExecutionSize)
	assert.Zero(t, o.MaxConcurrentActivityExecutionSize)
	assert.Zero(t, o.MaxConcurrentLocalActivityExecutionSize)
	assert.True(t, o.DeploymentOptions.UseVersioning)

	env := map[string]string{"WORKER_WORKFLOW_POLLERS": "4", "WORKER_ACTIVITY_POLLERS": "3", "WORKER_MAX_WORKFLOW_TASKS": "50",
		"WORKER_MAX_ACTIVITIES": "60", "WORKER_MAX_LOCAL_ACTIVITIES": "70", "WORKER_STICKY_CACHE_SIZE": "500"}
	cfg, err = config.Load(func(k string) string { return env[k] })
	require.NoError(t, err)
	o = options(Deps{Config: cfg})
	assert.Equal(t, autoscaled(2, 4), o.WorkflowTaskPollerBehavior)
	assert.Equal(t, 3, o.MaxConcurrentActivityTaskPollers)
	assert.Equal(t, 50, o.MaxConcurrentWorkflowTaskExecutionSize)
	assert.Equal(t, 60, o.MaxConcurrentActivityExecutionSize)
	assert.Equal(t, 70, o.MaxConcurrentLocalActivityExecutionSize)
	assert.Equal(t, 500, cfg.WorkerTuning.StickyCacheSize)

	// A queue keeps two polls open at least, one where it may have one at most; 0 leaves the start
	// and the most to the SDK.
	assert.Equal(t, autoscaled(1, 1), workflowPollers(1))
	assert.Equal(t, autoscaled(2, 0), workflowPollers(0))
}

// autoscaled is the SDK's autoscaling poller behaviour from least to n polls, starting at n.
func autoscaled(least, n int) sdkworker.PollerBehavior {
	return sdkworker.NewPollerBehaviorAutoscaling(sdkworker.PollerBehaviorAutoscalingOptions{
		InitialNumberOfPollers: n, MinimumNumberOfPollers: least, MaximumNumberOfPollers: n})
}
