package e2e_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/marketplace/checkout/worker"
	"github.com/marketplace/checkout/workflows"
)

// buildBSaga is the order workflow of a later build with a change no run of the earlier build
// could replay: a marker before anything the earlier code records.
func buildBSaga(ctx workflow.Context, in workflows.OrderInput) (workflows.OrderState, error) {
	_ = workflow.SideEffect(ctx, func(workflow.Context) any { return "build B" })
	return workflows.OrderWorkflow(ctx, in)
}

// TestRelease_OrdersWaitingOnBuildA_FinishOnA_NewOrdersOnB: orders wait for 3-D Secure on build A;
// build B, whose order workflow cannot replay A's runs, becomes the current version; the waiting
// orders are approved and complete on A's workers, new orders run on B, and A drains and retires.
func TestRelease_OrdersWaitingOnBuildA_FinishOnA_NewOrdersOnB(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{hold: 2 * time.Minute, noWorker: true})
	ctx := s.ctx
	start := func(build string, saga func(workflow.Context, workflows.OrderInput) (workflows.OrderState, error)) sdkworker.Worker {
		d := s.deps
		d.BuildID, d.OrderWorkflow = build, saga
		w := worker.New(s.temporal, d)
		require.NoError(t, w.Start())
		require.NoError(t, worker.SetCurrent(ctx, s.temporal, worker.Version(s.cfg, build), worker.SetCurrentAlways, quietLog()))
		return w
	}
	a := start("A", nil)
	aStopped := false
	defer func() {
		if !aStopped {
			a.Stop()
		}
	}()

	type waiting struct {
		sh       *shopper
		key      string
		id       int64
		redirect string
	}
	var onA []waiting
	for i := range 3 {
		sh := s.shopper(int64(7700 + i))
		sh.fill(map[int64]int32{71: 1})
		key := "k-" + randomHex(8)
		r := sh.order(key, sh.preview(), "tok_3ds")
		require.Equal(t, http.StatusCreated, r.status, r.raw)
		onA = append(onA, waiting{sh: sh, key: key, id: r.int("orderId"), redirect: r.str("payment", "redirectUrl")})
	}

	// B's change is incompatible: replaying a run of A on B's code fails, where A's code replays
	// it (with the product's codec: the history's payloads are encrypted).
	hist := s.history(onA[0].sh.workflowOf(onA[0].key))
	replay := func(saga func(workflow.Context, workflows.OrderInput) (workflows.OrderState, error)) error {
		replayer, err := sdkworker.NewWorkflowReplayerWithOptions(sdkworker.WorkflowReplayerOptions{
			DataConverter: s.codec.DataConverter()})
		require.NoError(t, err)
		replayer.RegisterWorkflowWithOptions(saga, workflow.RegisterOptions{Name: workflows.OrderWorkflowName})
		replayer.RegisterWorkflow(workflows.HoldWorkflow)
		return replayer.ReplayWorkflowHistory(nil, hist)
	}
	require.NoError(t, replay(workflows.OrderWorkflow), "A replays its own runs")
	require.Error(t, replay(buildBSaga), "B must not be able to replay A's runs")

	b := start("B", buildBSaga)
	defer b.Stop()

	for _, o := range onA {
		require.Equal(t, http.StatusOK, s.answer3DS(o.redirect, "approve").status)
	}
	for _, o := range onA {
		final := s.waitFinal(o.sh.token, o.id, 30*time.Second)
		assert.Equal(t, "CONFIRMED", final.str("status"), final.raw)
		assert.Equal(t, []string{"A"}, s.taskBuilds(o.sh.workflowOf(o.key)), "every task of an A order ran on A")
		assert.Equal(t, "A", s.pinnedBuild(workflows.HoldWorkflowID(o.id)), "its hold ran on A too")
	}

	sh := s.shopper(7710)
	sh.fill(map[int64]int32{72: 1})
	key := "k-" + randomHex(8)
	r := sh.order(key, sh.preview(), "tok_3ds")
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	require.Equal(t, http.StatusOK, s.answer3DS(r.str("payment", "redirectUrl"), "approve").status)
	assert.Equal(t, "CONFIRMED", s.waitFinal(sh.token, r.int("orderId"), 30*time.Second).str("status"))
	assert.Equal(t, []string{"B"}, s.taskBuilds(sh.workflowOf(key)), "a new order runs on B")

	// A has no open run left: it drains, and its workers can go.
	h := s.temporal.WorkerDeploymentClient().GetHandle(s.cfg.DeploymentName)
	require.Eventually(t, func() bool {
		d, err := h.DescribeVersion(ctx, client.WorkerDeploymentDescribeVersionOptions{BuildID: "A"})
		return err == nil && d.Info.DrainageInfo != nil &&
			d.Info.DrainageInfo.DrainageStatus == client.WorkerDeploymentVersionDrainageStatusDrained
	}, 60*time.Second, 500*time.Millisecond, "build A drains once its orders are done")
	a.Stop()
	aStopped = true
	sh2 := s.shopper(7711)
	sh2.fill(map[int64]int32{72: 1})
	r2 := sh2.order("k-"+randomHex(8), sh2.preview(), "tok_ok")
	require.Equal(t, http.StatusCreated, r2.status, r2.raw)
	assert.Equal(t, "CONFIRMED", s.waitFinal(sh2.token, r2.int("orderId"), 30*time.Second).str("status"))
}

// history reads a workflow's whole history.
func (s *stack) history(workflowID string) *historypb.History {
	s.t.Helper()
	var events []*historypb.HistoryEvent
	it := s.temporal.GetWorkflowHistory(s.ctx, workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(s.t, err)
		events = append(events, e)
	}
	return &historypb.History{Events: events}
}

// taskBuilds lists the builds whose workers completed the workflow's tasks, each once, in order.
func (s *stack) taskBuilds(workflowID string) []string {
	s.t.Helper()
	var builds []string
	for _, e := range s.history(workflowID).Events {
		a := e.GetWorkflowTaskCompletedEventAttributes()
		if a == nil {
			continue
		}
		b := a.GetDeploymentVersion().GetBuildId()
		if len(builds) == 0 || builds[len(builds)-1] != b {
			builds = append(builds, b)
		}
	}
	return builds
}

// pinnedBuild is the build a workflow is pinned to.
func (s *stack) pinnedBuild(workflowID string) string {
	s.t.Helper()
	d, err := s.temporal.DescribeWorkflow(s.ctx, workflowID, "")
	require.NoError(s.t, err)
	v := d.RawResponse.GetWorkflowExecutionInfo().GetVersioningInfo()
	require.Equal(s.t, enumspb.VERSIONING_BEHAVIOR_PINNED, v.GetBehavior(), "%s is pinned", workflowID)
	return v.GetDeploymentVersion().GetBuildId()
}
