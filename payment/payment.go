// Package payment is the checkout's view of a payment provider: a small Gateway interface in the
// shape of Stripe PaymentIntents, the errors a caller must tell apart, and the signed webhooks a
// provider sends. The saga depends on this package only, so that the simulator (paysim) and a
// real provider are interchangeable adapters.
package payment

import (
	"context"
	"errors"
)

// Status is where a provider's intent stands.
type Status string

// Intent statuses. REQUIRES_ACTION waits for the shopper's 3-D Secure answer; DECLINED, VOIDED
// and REFUNDED are final.
const (
	StatusRequiresAction Status = "REQUIRES_ACTION"
	StatusAuthorized     Status = "AUTHORIZED"
	StatusCaptured       Status = "CAPTURED"
	StatusVoided         Status = "VOIDED"
	StatusRefunded       Status = "REFUNDED"
	StatusDeclined       Status = "DECLINED"
)

// AuthorizeRequest asks the provider to hold AmountMinor on the shopper's payment method. The
// IdempotencyKey names the authorization: the provider answers a repeat with the same intent.
type AuthorizeRequest struct {
	IdempotencyKey     string
	OrderID            int64
	AmountMinor        int64
	Currency           string
	PaymentMethodToken string
}

// PartialRefund is part of a capture given back, named by its own idempotency key.
type PartialRefund struct {
	IdempotencyKey string
	AmountMinor    int64
}

// Intent is the provider's record of one payment, addressed by its idempotency key.
type Intent struct {
	ID             string `json:"id"`
	IdempotencyKey string `json:"idempotencyKey"`
	OrderID        int64  `json:"orderId"`
	Status         Status `json:"status"`
	AmountMinor    int64  `json:"amountMinor"`
	CapturedMinor  int64  `json:"capturedMinor"`
	RefundedMinor  int64  `json:"refundedMinor"`
	Currency       string `json:"currency"`
	// RedirectURL is the 3-D Secure page the shopper must visit while REQUIRES_ACTION.
	RedirectURL string `json:"redirectUrl,omitempty"`
	// DeclineCode says why a DECLINED intent was refused ("card_declined", ...).
	DeclineCode string `json:"declineCode,omitempty"`
}

// Gateway is a payment provider. Every call is idempotent by key, so an activity may repeat it.
type Gateway interface {
	// Authorize creates the intent for req, or returns the one req.IdempotencyKey already names
	// (no second authorization). The same key with a different amount, currency, order or token
	// is ErrKeyReused. A refusal is an intent with status DECLINED, not an error.
	Authorize(ctx context.Context, req AuthorizeRequest) (Intent, error)
	// Capture takes the full authorized amount: AUTHORIZED → CAPTURED; already CAPTURED returns
	// the intent unchanged; any other status is ErrInvalidState.
	Capture(ctx context.Context, key string) (Intent, error)
	// Void releases the hold: REQUIRES_ACTION or AUTHORIZED → VOIDED; VOIDED or DECLINED return
	// the intent unchanged; CAPTURED or REFUNDED is ErrInvalidState (refund instead).
	Void(ctx context.Context, key string) (Intent, error)
	// Refund gives a capture back in full: CAPTURED → REFUNDED; already REFUNDED returns the
	// intent unchanged; any other status is ErrInvalidState.
	Refund(ctx context.Context, key string) (Intent, error)
	// RefundPart gives part of a capture back: refund.AmountMinor of the CAPTURED intent of key,
	// named by refund.IdempotencyKey. A repeat of the refund key answers the intent and moves no
	// more money; the same refund key with another amount or intent is ErrKeyReused. An intent
	// not CAPTURED is ErrInvalidState; an amount beyond what is left of the capture is
	// ErrInvalidRequest. The intent becomes REFUNDED once its refunds reach the capture.
	RefundPart(ctx context.Context, key string, refund PartialRefund) (Intent, error)
	// Lookup reads the intent of key; ErrNotFound when the provider never saw the key. It is how
	// a caller resolves an ErrTimeout.
	Lookup(ctx context.Context, key string) (Intent, error)
}

// Errors a Gateway returns, wrapped; test them with errors.Is.
var (
	// ErrTimeout: the call got no answer, so its outcome is UNKNOWN. The caller must Lookup the
	// key before deciding anything; it must never assume the call failed or succeeded.
	ErrTimeout = errors.New("payment provider timeout: outcome unknown")
	// ErrUnavailable: the provider is down or answered 5xx; nothing happened, retrying is safe.
	ErrUnavailable = errors.New("payment provider unavailable")
	// ErrNotFound: the provider has no intent for the key.
	ErrNotFound = errors.New("payment intent not found")
	// ErrInvalidState: the intent's status does not allow the operation (capture of a voided
	// intent, void of a capture, ...). Retrying will not help.
	ErrInvalidState = errors.New("payment intent in the wrong state for this operation")
	// ErrKeyReused: the idempotency key already names an authorization with other parameters.
	ErrKeyReused = errors.New("idempotency key reused with different parameters")
	// ErrInvalidRequest: the request itself is malformed (empty key, non-positive amount, bad
	// currency). Retrying will not help.
	ErrInvalidRequest = errors.New("invalid payment request")
)
