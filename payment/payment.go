// Package payment is the checkout's view of a payment provider: a small Gateway interface in the
// shape of Stripe PaymentIntents, the errors a caller must tell apart, and the signed webhooks a
// provider sends. The saga depends on this package only, so that the simulator (paysim) and a
// real provider are interchangeable adapters.
package payment

import (
	"context"
	"errors"
	"time"
)

// Status is where a provider's intent stands.
type Status string

// Intent statuses. CREATED is an intent made but not yet confirmed (no money is held:
// authorizing again with the same keys confirms it); REQUIRES_ACTION waits for the shopper's
// 3-D Secure answer; DECLINED, VOIDED and REFUNDED are final.
const (
	StatusCreated        Status = "CREATED"
	StatusRequiresAction Status = "REQUIRES_ACTION"
	StatusAuthorized     Status = "AUTHORIZED"
	StatusCaptured       Status = "CAPTURED"
	StatusVoided         Status = "VOIDED"
	StatusRefunded       Status = "REFUNDED"
	StatusDeclined       Status = "DECLINED"
)

// The payment as the order sees it, beside the intent's statuses: PENDING (not asked yet, or the
// answer to the authorize lost before anything was recorded), UNKNOWN (a call timed out and the
// provider has not yet told us what happened) and NOT_FOUND (the provider never saw it). The
// payments row, the order's state and its PaymentStatus search attribute hold these and the
// intent's.
const (
	StatusPending  Status = "PENDING"
	StatusUnknown  Status = "UNKNOWN"
	StatusNotFound Status = "NOT_FOUND"
)

// DeclineAuthorizationExpired is the DeclineCode of an intent VOIDED by the provider because its
// authorization lapsed before it was captured.
const DeclineAuthorizationExpired = "authorization_expired"

// Operations on a payment, each with an idempotency key of its own (Ref.OpKey), so that a retry
// of one repeats it and a new one never collides with another's key: a provider refuses a key
// reused with other parameters.
const (
	OpCreate  = "authorize"
	OpConfirm = "confirm"
	OpCapture = "capture"
	OpVoid    = "void"
	OpRefund  = "refund"
)

// Ref names one payment at the provider. Every call but Authorize takes one.
type Ref struct {
	// Key is the payment's own name, from its order ("order-<id>"): it is written in the intent's
	// metadata, so that the intent can be searched for, and every operation's idempotency key
	// derives from it (OpKey).
	Key     string `json:"key"`
	OrderID int64  `json:"orderId"`
	// IntentID is the provider's id of the intent, once recorded: the provider is then asked by
	// id. Empty when the order never learnt it (the answer of the intent's creation was lost):
	// the provider is then searched by metadata, which lags (Rules.SearchLag).
	IntentID string `json:"intentId,omitempty"`
}

// OpKey is the idempotency key of operation op on the payment: "order-42-capture".
func (r Ref) OpKey(op string) string { return r.Key + "-" + op }

// AuthorizeRequest asks the provider to hold AmountMinor (in Currency's own minor unit) on the
// shopper's payment method, for the payment Ref names (Ref.IntentID is ignored).
type AuthorizeRequest struct {
	Ref
	// OrderVersion is the order's priceVersion: the prices it is charged for, written in the
	// intent's metadata beside the order id, the payment key and the operation.
	OrderVersion       string
	AmountMinor        int64
	Currency           string
	PaymentMethodToken string
	// Created, when set, is told the intent's id as soon as the provider has made it and before
	// it is confirmed, so that the caller records it: an answer lost after that point is found by
	// id, never by the lagging search. An error from it stops the authorization (nothing is held
	// yet) and is returned.
	Created func(ctx context.Context, intentID string) error
}

// PartialRefund is part of a capture given back, named by its own idempotency key, which is also
// written in the refund's metadata so that a repeat after the provider forgot the key is still
// found.
type PartialRefund struct {
	IdempotencyKey string
	AmountMinor    int64
}

// Intent is the provider's record of one payment.
type Intent struct {
	ID string `json:"id"`
	// IdempotencyKey is the payment's key (Ref.Key) as the intent's metadata carries it.
	IdempotencyKey string `json:"idempotencyKey"`
	OrderID        int64  `json:"orderId"`
	Status         Status `json:"status"`
	AmountMinor    int64  `json:"amountMinor"`
	CapturedMinor  int64  `json:"capturedMinor"`
	RefundedMinor  int64  `json:"refundedMinor"`
	Currency       string `json:"currency"`
	// RedirectURL is the 3-D Secure page the shopper must visit while REQUIRES_ACTION.
	RedirectURL string `json:"redirectUrl,omitempty"`
	// DeclineCode says why a DECLINED intent was refused ("card_declined", ...), or why one was
	// VOIDED by the provider (DeclineAuthorizationExpired).
	DeclineCode string `json:"declineCode,omitempty"`
	// CaptureBefore is when an AUTHORIZED intent's authorization lapses, as the provider says
	// (zero when it does not say): a capture after it fails.
	CaptureBefore time.Time `json:"captureBefore,omitzero"`
}

// Rules are the provider's limits that a caller must plan around (docs/payments.md).
type Rules struct {
	// KeyWindow is how long the provider keeps an idempotency key: a repeat after it is a new
	// request (Stripe: 24 hours). Zero: for ever.
	KeyWindow time.Duration
	// SearchLag is how long after an intent is written a search by metadata may still miss it
	// (Stripe: up to a minute). Only after it does "not found" mean the provider never made it.
	SearchLag time.Duration
	// AuthorizationWindow is how long an authorization stays capturable when the intent does not
	// say (CaptureBefore); Stripe's card authorizations last about seven days.
	AuthorizationWindow time.Duration
}

// Gateway is a payment provider. Every call that moves money carries an idempotency key of its
// own operation (Ref.OpKey), so an activity may repeat it; a repeat answers the intent as it
// stands now.
type Gateway interface {
	// Authorize creates the intent for req (key OpCreate), tells req.Created its id, and confirms
	// it with the payment method (key OpConfirm); a repeat within the provider's key window
	// answers the same intent (no second authorization). The same key with a different amount,
	// currency, order or token is ErrKeyReused. A refusal is an intent with status DECLINED, not
	// an error.
	Authorize(ctx context.Context, req AuthorizeRequest) (Intent, error)
	// Capture takes the full authorized amount: AUTHORIZED → CAPTURED; already CAPTURED returns
	// the intent unchanged; any other status (a lapsed authorization included) is ErrInvalidState.
	Capture(ctx context.Context, ref Ref) (Intent, error)
	// Void releases the hold: CREATED, REQUIRES_ACTION or AUTHORIZED → VOIDED; VOIDED or DECLINED
	// return the intent unchanged; CAPTURED or REFUNDED is ErrInvalidState (refund instead).
	Void(ctx context.Context, ref Ref) (Intent, error)
	// Refund gives what is left of a capture back: CAPTURED → REFUNDED; already REFUNDED returns
	// the intent unchanged; any other status is ErrInvalidState.
	Refund(ctx context.Context, ref Ref) (Intent, error)
	// RefundPart gives part of a capture back: refund.AmountMinor of the CAPTURED intent,
	// named by refund.IdempotencyKey. A repeat of the refund key answers the intent and moves no
	// more money, even after the provider's key window (the refund is found by its metadata); the
	// same refund key with another amount or intent is ErrKeyReused. An intent not CAPTURED is
	// ErrInvalidState; an amount beyond what is left of the capture is ErrInvalidRequest. The
	// intent becomes REFUNDED once its refunds reach the capture.
	RefundPart(ctx context.Context, ref Ref, refund PartialRefund) (Intent, error)
	// Lookup reads the intent: by ref.IntentID when set, else by a search of the metadata for
	// ref.Key (the newest intent under it), which may miss an intent younger than
	// Rules().SearchLag. ErrNotFound when there is none, or none the search sees yet. It is how a
	// caller resolves an ErrTimeout.
	Lookup(ctx context.Context, ref Ref) (Intent, error)
	// Rules are the provider's limits.
	Rules() Rules
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
	// ErrKeyReused: the idempotency key already names a request with other parameters.
	ErrKeyReused = errors.New("idempotency key reused with different parameters")
	// ErrInvalidRequest: the request itself is malformed (empty key, non-positive amount, bad
	// currency). Retrying will not help.
	ErrInvalidRequest = errors.New("invalid payment request")
)
