// Package order owns an order's lifecycle: the statuses it moves through, why it ends, and the
// store that moves it. An order is made PENDING_PAYMENT, may be parked in NEEDS_ATTENTION and
// resumed, and ends once, CONFIRMED, FAILED or CANCELLED, by a conditional statement whose row
// count decides between racing actors. The saga (package workflows) decides when; this package
// is what each move writes.
package order

import "github.com/marketplace/checkout/internal/problem"

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

// Endings are the codes an order ends with (orders.failure_code, its failureCode), each with the
// status it ends in: CANCELLED when someone chose to stop it (its shopper, or support), FAILED
// otherwise. Every code of internal/problem's "why an order ended" kind is one; the others are
// codes a request is answered with too.
var endings = []struct {
	code problem.Code
	ends Status
}{
	{problem.OutOfStock, StatusFailed},
	{problem.PaymentDeclined, StatusFailed},
	{problem.PaymentUnavailable, StatusFailed},
	{problem.HoldExpired, StatusFailed},
	{problem.StockReleased, StatusFailed},
	{problem.StockShortfall, StatusFailed},
	{problem.CancelledByShopper, StatusCancelled},
	{problem.CancelledBySupport, StatusCancelled},
	{problem.RefundedBySupport, StatusCancelled},
	{problem.Unavailable, StatusFailed},
	{problem.Orphaned, StatusFailed},
	{problem.AttentionExpired, StatusFailed},
	{problem.AuthorizationExpired, StatusFailed},
}

// Endings are the codes an order may end with, in a fixed order (api/openapi.yaml's
// Order.failureCode enum is checked against them).
func Endings() []problem.Code {
	out := make([]problem.Code, len(endings))
	for i, e := range endings {
		out[i] = e.code
	}
	return out
}

// Ends is the status an order given up with this code ends in: CANCELLED when someone chose to
// stop it (its shopper, or support), FAILED otherwise.
func Ends(code problem.Code) Status {
	for _, e := range endings {
		if e.code == code {
			return e.ends
		}
	}
	return StatusFailed
}
