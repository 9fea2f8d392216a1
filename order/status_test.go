package order_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/order"
)

// TestStatus_OpenFinalGaveUp: an order is open until it ends, ends once in one of three statuses,
// and only FAILED and CANCELLED give its stock and money back.
func TestStatus_OpenFinalGaveUp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status              order.Status
		open, final, gaveUp bool
	}{
		{order.StatusPendingPayment, true, false, false},
		{order.StatusNeedsAttention, true, false, false},
		{order.StatusConfirmed, false, true, false},
		{order.StatusFailed, false, true, true},
		{order.StatusCancelled, false, true, true},
		{"", false, false, false},
	} {
		assert.Equal(t, tc.open, tc.status.Open(), "%q open", tc.status)
		assert.Equal(t, tc.final, tc.status.Final(), "%q final", tc.status)
		assert.Equal(t, tc.gaveUp, tc.status.GaveUp(), "%q gave up", tc.status)
	}
}

// TestEnds_CancelledOnlyWhenSomeoneChoseToStop: the shopper's cancel and support's
// cancel or refund end an order CANCELLED; every other reason FAILED.
func TestEnds_CancelledOnlyWhenSomeoneChoseToStop(t *testing.T) {
	t.Parallel()
	for code, want := range map[problem.Code]order.Status{
		problem.CancelledByShopper: order.StatusCancelled,
		problem.CancelledBySupport: order.StatusCancelled,
		problem.RefundedBySupport:  order.StatusCancelled,
		problem.OutOfStock:         order.StatusFailed,
		problem.PaymentDeclined:    order.StatusFailed,
		problem.PaymentUnavailable: order.StatusFailed,
		problem.HoldExpired:        order.StatusFailed,
		problem.StockReleased:      order.StatusFailed,
		problem.StockShortfall:     order.StatusFailed,
		problem.Unavailable:        order.StatusFailed,
		problem.Orphaned:           order.StatusFailed,
	} {
		assert.Equal(t, want, order.Ends(code), "%s", code)
	}
}

// TestEndings_EveryEndedCodeEndsAnOrder: every code of the vocabulary's "why an order ended" kind
// is one an order ends with, each listed once, and every ending is a code: a code added to one
// list only fails here.
func TestEndings_EveryEndedCodeEndsAnOrder(t *testing.T) {
	t.Parallel()
	endings := order.Endings()
	seen := map[problem.Code]bool{}
	for _, c := range endings {
		assert.True(t, c.Known(), "%s is no code of internal/problem", c)
		assert.False(t, c.Internal(), "%s: an order's failureCode is read by its shopper", c)
		assert.False(t, seen[c], "%s listed twice", c)
		seen[c] = true
	}
	for _, c := range problem.Codes() {
		if c.Kind() == problem.KindEnded {
			assert.True(t, seen[c], "%s says why an order ended, but order.Endings does not list it", c)
		}
	}
}
