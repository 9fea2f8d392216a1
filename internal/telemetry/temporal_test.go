package telemetry

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/marketplace/checkout/internal/metrics"
)

var orderAttr = temporal.NewSearchAttributeKeyInt64("OrderId")

type stepInput struct{ OrderID int64 }

func stepNamedByHeader(ctx context.Context) error {
	activity.GetLogger(ctx).Info("step ran")
	return nil
}

func stepNamedByInput(ctx context.Context, in stepInput) error {
	activity.GetLogger(ctx).Info("step with input ran")
	return nil
}

// loggingWorkflow logs before and after it names its order, and runs a step each time.
func loggingWorkflow(ctx workflow.Context) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	workflow.GetLogger(ctx).Info("before the order")
	if err := workflow.ExecuteActivity(ctx, stepNamedByInput, stepInput{OrderID: 41}).Get(ctx, nil); err != nil {
		return err
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, orderAttr.ValueSet(42)); err != nil {
		return err
	}
	workflow.GetLogger(ctx).Info("after the order")
	return workflow.ExecuteActivity(ctx, stepNamedByHeader).Get(ctx, nil)
}

func TestWorkerInterceptor_LogLinesNameTheOrderAndTheRun(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	var s testsuite.WorkflowTestSuite
	s.SetLogger(sdklog.NewStructuredLogger(slog.New(LogHandler(slog.NewJSONHandler(&buf, nil)))))
	env := s.NewTestWorkflowEnvironment()
	m := metrics.New()
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{
		WorkerInterceptor(WorkerOptions{Metrics: m, OrderIDAttr: orderAttr, OrderIDPrefixes: []string{"hold-"}})}})
	env.RegisterWorkflow(loggingWorkflow)
	env.RegisterActivity(stepNamedByHeader)
	env.RegisterActivity(stepNamedByInput)
	env.ExecuteWorkflow(loggingWorkflow)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())

	byMsg := map[string]map[string]any{}
	for _, line := range logLines(t, &buf) {
		byMsg[line["msg"].(string)] = line
	}
	for msg, order := range map[string]float64{"before the order": 0, "after the order": 42, "step with input ran": 41,
		"step ran": 42} {
		line := byMsg[msg]
		require.NotNil(t, line, "%q logged", msg)
		assert.Equal(t, "default-test-workflow-id", line["workflow_id"], msg)
		assert.NotEmpty(t, line["run_id"], msg)
		if order == 0 {
			assert.NotContains(t, line, "order_id", "%q: the workflow has not named its order yet", msg)
		} else {
			assert.Equal(t, order, line["order_id"], msg)
		}
	}
	assert.Equal(t, 2, testutil.CollectAndCount(m.SagaStepDuration), "each step timed")
	assert.Equal(t, 1, testutil.CollectAndCount(m.WorkflowHistoryEvents), "the history measured as the run ended")
}

func TestOrderFromID(t *testing.T) {
	t.Parallel()
	assert.Equal(t, int64(98213), orderFromID("hold-98213", []string{"hold-"}))
	assert.Zero(t, orderFromID("order-u7-k1", []string{"hold-"}))
	assert.Zero(t, orderFromID("hold-x", []string{"hold-"}))
}
