package workflows_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/order"
	"github.com/marketplace/checkout/workflows"
)

// extendAt sends the shopper's extend-hold update after d and keeps its answer.
func (s *saga) extendAt(d time.Duration, id string, out *extendAnswer) {
	s.at(d, func() {
		s.env.UpdateWorkflow(workflows.UpdateExtendHold, id, &testsuite.TestUpdateCallback{
			OnAccept: func() {},
			OnReject: func(err error) { out.rejected = err },
			OnComplete: func(v any, err error) {
				out.err = err
				if err == nil {
					r := v.(workflows.ExtendHoldResult)
					out.res = &r
				}
			}})
	})
}

type extendAnswer struct {
	res           *workflows.ExtendHoldResult
	err, rejected error
}

// TestOrder_HoldExtendedAtMinute14_PaidAfterTheOriginalExpiry_Confirmed: the shopper extends the
// hold in its last minutes and pays after the original expiry: the hold child's timer moved with
// it, so the order is confirmed and nothing was released.
func TestOrder_HoldExtendedAtMinute14_PaidAfterTheOriginalExpiry_Confirmed(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("REQUIRES_ACTION")
	start := s.env.Now()
	s.on("ExtendHold").Return(func(ctx context.Context, orderID int64) (activities.ExtendedHold, error) {
		return activities.ExtendedHold{ExpiresAt: start.Add(hold + 5*time.Minute), ExtensionsLeft: 0}, nil
	})
	var released []time.Duration
	s.on("ReleaseExpired").Return(func(ctx context.Context, orderID int64) (inventory.Expiry, error) {
		released = append(released, s.env.Now().Sub(start))
		return inventory.Expiry{Released: 1}, nil
	})
	// The order closes once confirmed, and its hold child learns it then (not a reset run).
	s.on("EndIfOrphaned").Return(activities.Orphan{}, nil)
	var first, second extendAnswer
	s.extendAt(14*time.Minute, "x1", &first)
	s.extendAt(14*time.Minute+time.Second, "x2", &second)
	s.signal(17*time.Minute, workflows.SignalPaymentResult, workflows.PaymentSignal{EventID: "evt_1", IntentID: "pi_1", Status: "AUTHORIZED"})
	st := s.run(input("tok_3ds"))

	require.NoError(t, first.rejected)
	require.NoError(t, first.err)
	require.NotNil(t, first.res)
	assert.True(t, start.Add(hold+5*time.Minute).Equal(first.res.HoldExpiresAt))
	requireAppError(t, second.rejected, string(problem.HoldExtensionUsed))
	assert.Equal(t, 1, s.calls["ExtendHold"], "the second extension was refused before it reached the database")

	assert.Equal(t, order.StatusConfirmed, st.Status, "paid at minute 17, within the extended hold")
	assert.Empty(t, released, "the hold child's timer moved: nothing expired")
	assert.True(t, start.Add(hold+5*time.Minute).Equal(*st.HoldExpiresAt), "the order shows the new expiry")
	assert.Equal(t, 1, s.calls["CaptureFinish"])
}

// TestOrder_HoldExtended_NotPaid_ExpiresAtTheNewTime: the extended hold still ends, at its new time.
func TestOrder_HoldExtended_NotPaid_ExpiresAtTheNewTime(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("REQUIRES_ACTION")
	start := s.env.Now()
	s.on("ExtendHold").Return(activities.ExtendedHold{ExpiresAt: start.Add(hold + 5*time.Minute), ExtensionsLeft: 1}, nil)
	var released []time.Duration
	s.on("ReleaseExpired").Return(func(ctx context.Context, orderID int64) (inventory.Expiry, error) {
		released = append(released, s.env.Now().Sub(start))
		return inventory.Expiry{Released: 1}, nil
	})
	var ext extendAnswer
	s.extendAt(12*time.Minute, "x1", &ext)
	st := s.run(input("tok_3ds"))

	require.NotNil(t, ext.res)
	assert.Equal(t, 1, ext.res.ExtensionsLeft)
	assert.Equal(t, order.StatusFailed, st.Status)
	assert.Equal(t, problem.HoldExpired, st.FailureCode)
	require.Len(t, released, 1)
	assert.GreaterOrEqual(t, released[0], hold+5*time.Minute, "released at the extended expiry, not the first")
}

// TestOrder_HoldExtensionRefusedByTheDatabase_OrderWaitsOn: too early (or any refusal) changes
// nothing: the order keeps its hold and its next extension is still allowed.
func TestOrder_HoldExtensionRefusedByTheDatabase_OrderWaitsOn(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("REQUIRES_ACTION")
	s.on("ExtendHold").Return(activities.ExtendedHold{}, activities.RefusalError(
		activities.HoldRefusal{Reason: problem.HoldExtensionTooEarly}.Problem("too early"))).Once()
	s.on("ExtendHold").Return(activities.ExtendedHold{ExpiresAt: s.env.Now().Add(hold + 5*time.Minute)}, nil)
	var early, later extendAnswer
	s.extendAt(2*time.Minute, "x1", &early)
	s.extendAt(12*time.Minute, "x2", &later)
	s.signal(16*time.Minute, workflows.SignalPaymentResult, workflows.PaymentSignal{EventID: "evt_1", IntentID: "pi_1", Status: "AUTHORIZED"})
	st := s.run(input("tok_3ds"))

	requireAppError(t, early.err, string(problem.HoldExtensionTooEarly))
	require.NoError(t, later.err)
	require.NotNil(t, later.res)
	assert.Equal(t, order.StatusConfirmed, st.Status)
}

// TestOrder_HoldExtensionOfAPaidOrder_Refused: once the payment is in, there is nothing to extend.
func TestOrder_HoldExtensionOfAPaidOrder_Refused(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("AUTHORIZED")
	s.on("CaptureFinish").Return(s.captured).After(time.Second)
	var ext extendAnswer
	s.extendAt(time.Millisecond, "x1", &ext)
	st := s.run(input("tok_ok"))

	assert.Equal(t, order.StatusConfirmed, st.Status)
	requireAppError(t, ext.rejected, string(problem.OrderNotPendingPayment))
	assert.Zero(t, s.calls["ExtendHold"])
}
