package workflows_test

import (
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/workflows"
)

type holdRun struct {
	env   *testsuite.TestWorkflowEnvironment
	calls map[string]int
}

func newHold(t *testing.T) *holdRun {
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	h := &holdRun{env: suite.NewTestWorkflowEnvironment(), calls: map[string]int{}}
	h.env.RegisterWorkflow(workflows.HoldWorkflow)
	h.env.RegisterActivity(&activities.Inventory{})
	h.env.RegisterActivity(&activities.PaymentReconciler{})
	return h
}

func (h *holdRun) on(name string) *testsuite.MockCallWrapper {
	return h.env.OnActivity(name, mock.Anything, mock.Anything).Run(func(mock.Arguments) { h.calls[name]++ })
}

func (h *holdRun) run(t *testing.T) workflows.HoldResult {
	h.env.ExecuteWorkflow(workflows.HoldWorkflow, workflows.HoldInput{OrderID: 501, ExpiresAt: h.env.Now().Add(15 * time.Minute),
		ParentWorkflowID: "order-u7-k1", Saga: 3})
	require.True(t, h.env.IsWorkflowCompleted())
	require.NoError(t, h.env.GetWorkflowError())
	var res workflows.HoldResult
	require.NoError(t, h.env.GetWorkflowResult(&res))
	return res
}

func TestHold_Expires_ReleasesAndEnds_TheRunningOrderLearnsFromItsEnd(t *testing.T) {
	h := newHold(t)
	h.on("Release").Return(2, nil)
	h.on("EndIfOrphaned").Return(activities.Orphan{Running: true}, nil)
	res := h.run(t)

	assert.Equal(t, workflows.HoldResult{Ended: "expired", Released: 2}, res)
	assert.Equal(t, 1, h.calls["EndIfOrphaned"], "looked whether the order's workflow was still there")
}

// TestHold_ParentGoneAtExpiry_EndsTheOrder: the order's workflow was terminated; at the expiry the
// hold releases the stock and ends the order (stock and money back), as the reconciler would.
func TestHold_ParentGoneAtExpiry_EndsTheOrder(t *testing.T) {
	h := newHold(t)
	h.on("Release").Return(1, nil)
	h.on("EndIfOrphaned").Return(activities.Orphan{Ended: true}, nil)
	res := h.run(t)

	assert.Equal(t, "expired; order ended by the hold", res.Ended)
	assert.Equal(t, 1, res.Released)
}

// TestHold_ReleaseFailsForLong_RetriedUntilDone: a release must never give up, whatever its
// outage's length.
func TestHold_ReleaseFailsForLong_RetriedUntilDone(t *testing.T) {
	h := newHold(t)
	h.on("Release").Return(0, errors.New("database down")).Times(30)
	h.on("Release").Return(3, nil)
	h.on("EndIfOrphaned").Return(activities.Orphan{Running: true}, nil)
	res := h.run(t)

	assert.Equal(t, 31, h.calls["Release"], "tried until it was done, well past its first ten seconds")
	assert.Equal(t, workflows.HoldResult{Ended: "expired", Released: 3}, res)
}

// TestHold_OrderClosed_GivesBackWhatIsLeftAndEnds: the order's workflow closed (the policy asks
// the hold to stop); a finished order holds nothing, and the hold ends at once.
func TestHold_OrderClosed_GivesBackWhatIsLeftAndEnds(t *testing.T) {
	h := newHold(t)
	h.on("EndIfOrphaned").Return(activities.Orphan{}, nil)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, time.Minute)
	res := h.run(t)

	assert.Equal(t, "order closed", res.Ended)
	assert.Zero(t, h.calls["Release"], "nothing to release on its own: the order gave back what it held")
	assert.Equal(t, 1, h.calls["EndIfOrphaned"])
}

// TestHold_OrderTerminatedUnfinished_StockBackAtOnce: support terminated the order's workflow; the
// hold gives the stock back and ends the order then, not at the expiry.
func TestHold_OrderTerminatedUnfinished_StockBackAtOnce(t *testing.T) {
	h := newHold(t)
	h.on("EndIfOrphaned").Return(activities.Orphan{Released: 2, Ended: true}, nil)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, time.Minute)
	res := h.run(t)

	assert.Equal(t, workflows.HoldResult{Ended: "order closed unfinished: ended by the hold", Released: 2}, res)
}

// TestHold_OrderReset_KeepsHoldingToTheExpiry: the order's workflow was reset (the old run closed,
// a new one runs the order): the hold still holds the stock until its expiry.
func TestHold_OrderReset_KeepsHoldingToTheExpiry(t *testing.T) {
	h := newHold(t)
	h.on("EndIfOrphaned").Return(activities.Orphan{Running: true}, nil)
	h.on("Release").Return(1, nil)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, time.Minute)
	res := h.run(t)

	assert.Equal(t, workflows.HoldResult{Ended: "expired", Released: 1}, res)
	assert.Equal(t, 2, h.calls["EndIfOrphaned"], "asked at the close, and again at the expiry")
}
