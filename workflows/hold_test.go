package workflows_test

import (
	"context"
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
	"github.com/marketplace/checkout/inventory"
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
		ParentWorkflowID: "order-u7-k1"})
	require.True(t, h.env.IsWorkflowCompleted())
	require.NoError(t, h.env.GetWorkflowError())
	var res workflows.HoldResult
	require.NoError(t, h.env.GetWorkflowResult(&res))
	return res
}

func TestHold_Expires_ReleasesAndEnds_TheRunningOrderLearnsFromItsEnd(t *testing.T) {
	h := newHold(t)
	h.on("ReleaseExpired").Return(inventory.Expiry{Released: 2}, nil)
	h.on("EndIfOrphaned").Return(activities.Orphan{Running: true}, nil)
	res := h.run(t)

	assert.Equal(t, workflows.HoldResult{Ended: "expired", Released: 2}, res)
	assert.Equal(t, 1, h.calls["EndIfOrphaned"], "looked whether the order's workflow was still there")
}

// TestHold_ParentGoneAtExpiry_EndsTheOrder: the order's workflow was terminated; at the expiry the
// hold releases the stock and ends the order (stock and money back), as the reconciler would.
func TestHold_ParentGoneAtExpiry_EndsTheOrder(t *testing.T) {
	h := newHold(t)
	h.on("ReleaseExpired").Return(inventory.Expiry{Released: 1}, nil)
	h.on("EndIfOrphaned").Return(activities.Orphan{Ended: true}, nil)
	res := h.run(t)

	assert.Equal(t, "expired; order ended by the hold", res.Ended)
	assert.Equal(t, 1, res.Released)
}

// TestHold_ReleaseFailsForLong_RetriedUntilDone: a release must never give up, whatever its
// outage's length.
func TestHold_ReleaseFailsForLong_RetriedUntilDone(t *testing.T) {
	h := newHold(t)
	h.on("ReleaseExpired").Return(inventory.Expiry{}, errors.New("database down")).Times(30)
	h.on("ReleaseExpired").Return(inventory.Expiry{Released: 3}, nil)
	h.on("EndIfOrphaned").Return(activities.Orphan{Running: true}, nil)
	res := h.run(t)

	assert.Equal(t, 31, h.calls["ReleaseExpired"], "tried until it was done, well past its first ten seconds")
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
	assert.Zero(t, h.calls["ReleaseExpired"], "nothing to release on its own: the order gave back what it held")
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
	h.on("ReleaseExpired").Return(inventory.Expiry{Released: 1}, nil)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, time.Minute)
	res := h.run(t)

	assert.Equal(t, workflows.HoldResult{Ended: "expired", Released: 1}, res)
	assert.Equal(t, 2, h.calls["EndIfOrphaned"], "asked at the close, and again at the expiry")
}

// TestHold_Extended_TimerMovesWithTheSignal: the order's extension moves the hold's timer; the
// stock is released at the new expiry, once.
func TestHold_Extended_TimerMovesWithTheSignal(t *testing.T) {
	h := newHold(t)
	start := h.env.Now()
	var at []time.Duration
	h.on("ReleaseExpired").Return(func(ctx context.Context, orderID int64) (inventory.Expiry, error) {
		at = append(at, h.env.Now().Sub(start))
		return inventory.Expiry{Released: 2}, nil
	})
	h.on("EndIfOrphaned").Return(activities.Orphan{Running: true}, nil)
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(workflows.SignalHoldExtend, workflows.HoldExtend{ExpiresAt: start.Add(20 * time.Minute)})
	}, 14*time.Minute)
	res := h.run(t)

	assert.Equal(t, workflows.HoldResult{Ended: "expired", Released: 2}, res)
	require.Len(t, at, 1)
	assert.GreaterOrEqual(t, at[0], 20*time.Minute)
}

// TestHold_ExtensionCommittedBeforeItsSignal_KeepsHolding: the timer fires at the old expiry but
// the database already holds the stock longer (the extension's signal is still on its way): the
// hold keeps the stock and waits for the new expiry.
func TestHold_ExtensionCommittedBeforeItsSignal_KeepsHolding(t *testing.T) {
	h := newHold(t)
	start := h.env.Now()
	until := start.Add(20 * time.Minute)
	h.on("ReleaseExpired").Return(inventory.Expiry{Until: &until}, nil).Once()
	var at time.Duration
	h.on("ReleaseExpired").Return(func(ctx context.Context, orderID int64) (inventory.Expiry, error) {
		at = h.env.Now().Sub(start)
		return inventory.Expiry{Released: 1}, nil
	})
	h.on("EndIfOrphaned").Return(activities.Orphan{Running: true}, nil)
	res := h.run(t)

	assert.Equal(t, workflows.HoldResult{Ended: "expired", Released: 1}, res)
	assert.Equal(t, 2, h.calls["ReleaseExpired"])
	assert.GreaterOrEqual(t, at, 20*time.Minute)
}

// TestHold_DatabaseClockBehind_WaitsTheDatabasesRestNotZeroLengthTimers: the database's clock is
// ten minutes behind Temporal's. At the hold's timer the database still holds the stock (by its
// clock it has not expired) and says how long it holds it yet; the hold waits that long, once,
// instead of firing zero-length timers at the same expiry until the clocks agree.
func TestHold_DatabaseClockBehind_WaitsTheDatabasesRestNotZeroLengthTimers(t *testing.T) {
	h := newHold(t)
	start := h.env.Now()
	expiry := start.Add(15 * time.Minute)
	const behind = 10 * time.Minute
	var released time.Duration
	h.on("ReleaseExpired").Return(func(ctx context.Context, orderID int64) (inventory.Expiry, error) {
		dbNow := h.env.Now().Add(-behind)
		if dbNow.Before(expiry) && h.calls["ReleaseExpired"] < 50 {
			return inventory.Expiry{Until: &expiry, Left: expiry.Sub(dbNow)}, nil
		}
		released = h.env.Now().Sub(start)
		return inventory.Expiry{Released: 1}, nil
	})
	h.on("EndIfOrphaned").Return(activities.Orphan{Running: true}, nil)
	res := h.run(t)

	assert.Equal(t, workflows.HoldResult{Ended: "expired", Released: 1}, res)
	assert.Equal(t, 2, h.calls["ReleaseExpired"], "at the hold's timer, then once more when the database's clock says it expired")
	assert.GreaterOrEqual(t, released, 15*time.Minute+behind)
}

// TestHold_DatabaseSaysHeldButNotHowLong_BacksOff: a result that names the hold's end but not how
// much of it is left (a step of a build before that figure) at a time Temporal's clock has passed
// makes the hold look again with a growing wait, never at once.
func TestHold_DatabaseSaysHeldButNotHowLong_BacksOff(t *testing.T) {
	h := newHold(t)
	start := h.env.Now()
	expiry := start.Add(15 * time.Minute)
	h.on("ReleaseExpired").Return(func(ctx context.Context, orderID int64) (inventory.Expiry, error) {
		if h.env.Now().Before(expiry.Add(10*time.Minute)) && h.calls["ReleaseExpired"] < 100 {
			return inventory.Expiry{Until: &expiry}, nil
		}
		return inventory.Expiry{Released: 1}, nil
	})
	h.on("EndIfOrphaned").Return(activities.Orphan{Running: true}, nil)
	res := h.run(t)

	assert.Equal(t, workflows.HoldResult{Ended: "expired", Released: 1}, res)
	assert.Less(t, h.calls["ReleaseExpired"], 20, "ten minutes of a clock behind cost a few looks, not one per instant")
}
