package workflows_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/order"
	"github.com/marketplace/checkout/workflows"
)

// The writes of saga-8 that ride in others: the answer under the key and the authorization's
// mirror are written with the order's end (CaptureFinish, FinishAnswered), or before the order
// first waits for anything or closes.

// trail records, in order, every activity the worker starts (a local one's quick tries once each)
// and where the order first waited on the server ("wait": an activity's server retries, or the
// hold child, which starts as the order first waits).
func (s *saga) trail() *[]string {
	var seq []string
	add := func(name string) { seq = append(seq, name) }
	s.env.SetOnLocalActivityStartedListener(func(info *activity.Info, _ context.Context, _ []any) {
		if info.Attempt <= 1 {
			add(info.ActivityType.Name)
		}
	})
	s.env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		add("wait:" + info.ActivityType.Name)
	})
	return &seq
}

// before says whether a comes before b in seq (both in it).
func before(t *testing.T, seq []string, a, b string) {
	t.Helper()
	i, j := index(seq, a), index(seq, b)
	require.True(t, i >= 0 && j >= 0, "%s and %s in %v", a, b, seq)
	assert.Less(t, i, j, "%s before %s in %v", a, b, seq)
}

func index(seq []string, name string) int {
	for i, n := range seq {
		if n == name {
			return i
		}
	}
	return -1
}

// TestFold_PaidAtOnce_AnswerAndMirrorRideInTheCapture: an order paid at once writes no answer and
// no mirror of its authorization of their own: the capture's transaction records both.
func TestFold_PaidAtOnce_AnswerAndMirrorRideInTheCapture(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("AUTHORIZED")
	var captureIn activities.CaptureFinishInput
	s.on("CaptureFinish").Return(func(ctx context.Context, in activities.CaptureFinishInput) (activities.CaptureFinished, error) {
		captureIn = in
		return s.captured(ctx, in)
	})
	st := s.run(input("tok_ok"))

	assert.Equal(t, order.StatusConfirmed, st.Status)
	assert.Equal(t, []string{"CaptureFinish CREATED"}, s.recorded, "the answer rides in the capture")
	require.NotNil(t, captureIn.Answer)
	assert.Equal(t, int64(7), captureIn.Answer.UserID)
	assert.Equal(t, "k1", captureIn.Answer.IdempotencyKey)
	assert.Equal(t, hash, captureIn.Answer.RequestHash)
	assert.Zero(t, s.calls["RecordOutcome"], "no transaction of its own")
	assert.Zero(t, s.calls["ResolvePayment"], "the authorization is mirrored by the capture")
	assert.Zero(t, s.calls["SetHold"], "the reservation wrote the hold's end")
}

// TestFold_WaitsFor3DS_AnswerRecordedBeforeItWaits: an order that waits for 3-D Secure records its
// answer under the key before it first waits (before its hold child starts), so a repeat of the key
// after any close finds it; the capture then carries no second one. Its REQUIRES_ACTION was
// mirrored by the authorization itself: nothing more to mirror.
func TestFold_WaitsFor3DS_AnswerRecordedBeforeItWaits(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("REQUIRES_ACTION")
	holdsAtRecord := -1
	s.on("RecordOutcome").Return(func(ctx context.Context, in activities.RecordOutcomeInput) error {
		holdsAtRecord = s.holds
		s.record("RecordOutcome", &in)
		return nil
	})
	s.signal(2*time.Minute, workflows.SignalPaymentResult, workflows.PaymentSignal{EventID: "evt_1", IntentID: "pi_1", Status: "AUTHORIZED"})
	seq := s.trail()
	st := s.run(input("tok_3ds"))

	assert.Equal(t, order.StatusConfirmed, st.Status)
	assert.Equal(t, []string{"RecordOutcome CREATED"}, s.recorded, "recorded once, before the wait; not by the capture")
	assert.Zero(t, holdsAtRecord, "recorded before the hold child started: before the order waited")
	assert.Equal(t, 1, s.holds)
	before(t, *seq, "RecordOutcome", "VerifyEvent")
	assert.Zero(t, s.calls["ResolvePayment"], "REQUIRES_ACTION was mirrored as it was answered")
}

// TestFold_PaidAtOnceButWaits_AnswerAndAuthorizationWrittenBeforeItWaits: an order paid at once
// whose confirm has to wait for the server's retries writes its answer and its authorization's
// mirror (asking the provider, who tells when the authorization lapses) before it waits: a
// payments row that says PENDING while the provider holds the money lasts no longer than the
// workflow task that authorized.
func TestFold_PaidAtOnceButWaits_AnswerAndAuthorizationWrittenBeforeItWaits(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("AUTHORIZED")
	s.on("Confirm").Return(inventory.ConfirmResult{}, errors.New("database restarting")).Times(4)
	s.on("Confirm").Return(inventory.ConfirmResult{Confirmed: 1}, nil)
	s.on("ResolvePayment").Return(activities.PaymentResult{Status: "AUTHORIZED", IntentID: "pi_1"}, nil)
	var captureIn activities.CaptureFinishInput
	s.on("CaptureFinish").Return(func(ctx context.Context, in activities.CaptureFinishInput) (activities.CaptureFinished, error) {
		captureIn = in
		return s.captured(ctx, in)
	})
	seq := s.trail()
	st := s.run(input("tok_ok"))

	assert.Equal(t, order.StatusConfirmed, st.Status)
	assert.Equal(t, []string{"RecordOutcome CREATED"}, s.recorded, "recorded once, before the wait")
	assert.Equal(t, 1, s.calls["ResolvePayment"], "the authorization mirrored once")
	before(t, *seq, "RecordOutcome", "wait:Confirm")
	before(t, *seq, "ResolvePayment", "wait:Confirm")
	assert.Nil(t, captureIn.Answer, "the capture carries no second answer")
}

// TestFold_FailedAsPlaced_RefusalRecordedWithTheOrdersEnd: an order refused as it was placed
// (declined at once, out of stock at the reservation, its stock released by an earlier run) has
// its refusal recorded by the transaction that ends it, not by one of its own.
func TestFold_FailedAsPlaced_RefusalRecordedWithTheOrdersEnd(t *testing.T) {
	cases := []struct {
		name  string
		setup func(s *saga)
		want  string
	}{
		{"declined at once", func(s *saga) { s.authorizeReturns("DECLINED") }, "FinishAnswered PAYMENT_DECLINED"},
		{"out of stock", func(s *saga) {
			s.on("Reserve").Return(inventory.Reservation{}, activities.RefusalError(problem.New(problem.OutOfStock,
				"out of stock").WithDetails(activities.OutOfStockDetails{Items: []inventory.ShortLine{{SKUID: 77, Requested: 1}}})))
		}, "FinishAnswered OUT_OF_STOCK"},
		{"stock released by an earlier run", func(s *saga) {
			s.on("Reserve").Return(inventory.Reservation{OrderID: orderID, ExpiresAt: s.env.Now().Add(hold),
				Allocations: []inventory.Allocation{{ReservationID: 1, SKUID: 77, WarehouseID: 1, Quantity: 1,
					Status: inventory.StatusReleased}}}, nil)
		}, "FinishAnswered OUT_OF_STOCK"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newSaga(t)
			c.setup(s)
			st := s.run(input("tok_ok"))

			assert.Equal(t, order.StatusFailed, st.Status)
			assert.Equal(t, []string{c.want}, s.recorded)
			assert.Zero(t, s.calls["RecordOutcome"], "no transaction of its own")
		})
	}
}

// TestFold_FailedAsPlaced_OrderEndedByAnother_RefusalNotRecordedAsItsEnd: the order's end finds the
// order already ended (a reset run's). A CONFIRMED order is answered from the row, its refusal
// never recorded; one another actor failed is recorded with the row's status, as before.
func TestFold_FailedAsPlaced_OrderEndedByAnother_RefusalNotRecordedAsItsEnd(t *testing.T) {
	for _, ended := range []activities.Finished{{Status: order.StatusConfirmed},
		{Status: order.StatusCancelled, FailureCode: problem.CancelledBySupport}} {
		t.Run(string(ended.Status), func(t *testing.T) {
			s := newSaga(t)
			s.authorizeReturns("DECLINED")
			var refusal *activities.RecordOutcomeInput
			s.on("FinishAnswered").Return(func(ctx context.Context, in activities.FinishInput) (activities.Finished, error) {
				refusal = in.Refusal
				return ended, nil
			})
			st := s.run(input("tok_decline"))

			require.NotNil(t, refusal, "offered to the order's end, which records it only if it ends the order")
			assert.Equal(t, ended.Status, st.Status, "the row's word")
			if ended.Status == order.StatusConfirmed {
				assert.Empty(t, s.recorded, "a sold order is never recorded as refused")
				assert.Equal(t, workflows.OutcomeReplay, s.placed.Outcome, "answered from the order")
				return
			}
			assert.Equal(t, []string{"RecordOutcome PAYMENT_DECLINED"}, s.recorded)
			assert.Equal(t, order.StatusCancelled, s.placed.Status, "with the row's status")
		})
	}
}
