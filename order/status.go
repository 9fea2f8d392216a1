// Package order owns an order's lifecycle: the statuses it moves through, why it ends, and the
// store that moves it. An order is made PENDING_PAYMENT, may be parked in NEEDS_ATTENTION and
// resumed, and ends once, CONFIRMED, FAILED or CANCELLED, by a conditional statement whose row
// count decides between racing actors. The saga (package workflows) decides when; this package
// is what each move writes.
package order

// Status is an order's status, as stored in orders.status and shown to shoppers and support.
type Status string

// Order statuses.
const (
	StatusPendingPayment Status = "PENDING_PAYMENT"
	StatusConfirmed      Status = "CONFIRMED"
	StatusFailed         Status = "FAILED"
	StatusCancelled      Status = "CANCELLED"
	// StatusNeedsAttention: a step of the saga ran out of retries and waits for support.
	StatusNeedsAttention Status = "NEEDS_ATTENTION"
)

// Open: the order has not ended yet (it waits for its payment, or for support); only an open order
// moves.
func (s Status) Open() bool { return s == StatusPendingPayment || s == StatusNeedsAttention }

// Final: the order has ended and never moves again.
func (s Status) Final() bool {
	return s == StatusConfirmed || s == StatusFailed || s == StatusCancelled
}

// GaveUp: the order ended without being confirmed (FAILED or CANCELLED); its stock and money go
// back.
func (s Status) GaveUp() bool { return s == StatusFailed || s == StatusCancelled }

// openStatuses are the statuses an order can leave, as the conditional statements take them.
var openStatuses = []string{string(StatusPendingPayment), string(StatusNeedsAttention)}

// FailureCode says why an order failed or was cancelled (orders.failure_code).
type FailureCode string

// Failure codes.
const (
	FailOutOfStock         FailureCode = "OUT_OF_STOCK"
	FailPaymentDeclined    FailureCode = "PAYMENT_DECLINED"
	FailPaymentUnavailable FailureCode = "PAYMENT_UNAVAILABLE"
	FailHoldExpired        FailureCode = "HOLD_EXPIRED"
	FailStockReleased      FailureCode = "STOCK_RELEASED"
	FailStockShortfall     FailureCode = "STOCK_SHORTFALL"
	FailCancelledByShopper FailureCode = "CANCELLED_BY_SHOPPER"
	FailCancelledBySupport FailureCode = "CANCELLED_BY_SUPPORT"
	FailRefundedBySupport  FailureCode = "REFUNDED_BY_SUPPORT"
	FailUnavailable        FailureCode = "UNAVAILABLE"
	// FailOrphaned: the order was left open by a workflow that ended without finishing it
	// (support terminated it); the payment reconciler or the order's hold ended it.
	FailOrphaned FailureCode = "ORPHANED"
	// FailAttentionExpired: the order waited for support past the worker's PARKED_GIVE_UP_AFTER;
	// its saga gave it up (stock back, payment voided) before the authorization expired.
	FailAttentionExpired FailureCode = "ATTENTION_EXPIRED"
	// FailAuthorizationExpired: the payment's authorization lapsed at the provider (or was about
	// to) before the order could capture it; the order gives its stock back and voids it.
	FailAuthorizationExpired FailureCode = "AUTHORIZATION_EXPIRED"
)

// Ends is the status an order given up for this reason ends in: CANCELLED when someone chose to
// stop it (its shopper, or support), FAILED otherwise.
func (c FailureCode) Ends() Status {
	switch c {
	case FailCancelledByShopper, FailCancelledBySupport, FailRefundedBySupport:
		return StatusCancelled
	}
	return StatusFailed
}
