package order_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

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

// TestFailureCode_Ends_CancelledOnlyWhenSomeoneChoseToStop: the shopper's cancel and support's
// cancel or refund end an order CANCELLED; every other reason FAILED.
func TestFailureCode_Ends_CancelledOnlyWhenSomeoneChoseToStop(t *testing.T) {
	t.Parallel()
	for code, want := range map[order.FailureCode]order.Status{
		order.FailCancelledByShopper: order.StatusCancelled,
		order.FailCancelledBySupport: order.StatusCancelled,
		order.FailRefundedBySupport:  order.StatusCancelled,
		order.FailOutOfStock:         order.StatusFailed,
		order.FailPaymentDeclined:    order.StatusFailed,
		order.FailPaymentUnavailable: order.StatusFailed,
		order.FailHoldExpired:        order.StatusFailed,
		order.FailStockReleased:      order.StatusFailed,
		order.FailStockShortfall:     order.StatusFailed,
		order.FailUnavailable:        order.StatusFailed,
		order.FailOrphaned:           order.StatusFailed,
	} {
		assert.Equal(t, want, code.Ends(), "%s", code)
	}
}
