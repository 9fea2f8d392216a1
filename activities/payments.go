package activities

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sqlc-dev/pqtype"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/order"
	"github.com/marketplace/checkout/payment"
)

// Payment statuses as the order sees them: the provider's, plus UNKNOWN (a call timed out and
// the provider has not yet told us what happened) and NOT_FOUND (the provider never saw it).
const (
	PaymentUnknown  = "UNKNOWN"
	PaymentNotFound = "NOT_FOUND"
)

// Payments are the order's calls to the payment provider. Every call carries the order's
// idempotency key, and the payments row mirrors the provider's answer.
type Payments struct {
	Pool    *pgxpool.Pool
	Gateway payment.Gateway
}

// AuthorizeInput asks the provider to hold the order's total.
type AuthorizeInput struct {
	OrderID     int64  `json:"orderId"`
	AmountMinor int64  `json:"amountMinor"`
	Currency    string `json:"currency"`
	// Token is the payment method token as orders of earlier releases carried it. Orders now
	// leave it empty: the token stays in PostgreSQL, where the API put it, and never enters the
	// workflow's history.
	Token string `json:"token,omitempty"`
}

// PaymentResult is the provider's state of the order's payment.
type PaymentResult struct {
	Status      string `json:"status"`
	IntentID    string `json:"intentId,omitempty"`
	RedirectURL string `json:"redirectUrl,omitempty"`
	DeclineCode string `json:"declineCode,omitempty"`
}

// Authorize asks the provider to authorize the order's total. A timeout leaves the outcome
// UNKNOWN: the row says so and a non-retryable PAYMENT_OUTCOME_UNKNOWN tells the workflow to ask
// the provider (ResolvePayment) before deciding anything.
func (a *Payments) Authorize(ctx context.Context, in AuthorizeInput) (PaymentResult, error) {
	if in.Token == "" {
		token, err := db.New(a.Pool).PaymentMethodToken(ctx, in.OrderID)
		if db.NotFound(err) {
			// The token is forgotten once the provider answered: this is a repeat of a call whose
			// answer was recorded but lost on its way back (the worker died). The provider's
			// intent under the order's key is that answer.
			return a.answered(ctx, in.OrderID)
		}
		if err != nil {
			return PaymentResult{}, fmt.Errorf("reading the payment method of order %d: %w", in.OrderID, err)
		}
		in.Token = token
	}
	intent, err := a.Gateway.Authorize(ctx, payment.AuthorizeRequest{IdempotencyKey: order.PaymentKey(in.OrderID),
		OrderID: in.OrderID, AmountMinor: in.AmountMinor, Currency: in.Currency, PaymentMethodToken: in.Token})
	if errors.Is(err, payment.ErrTimeout) {
		if rerr := a.record(ctx, in.OrderID, payment.Intent{Status: PaymentUnknown}); rerr != nil {
			return PaymentResult{}, rerr
		}
		return PaymentResult{Status: PaymentUnknown}, failure(problem.PaymentOutcomeUnknown,
			"payment provider timed out: outcome unknown", err)
	}
	if err != nil {
		return PaymentResult{}, providerError(err)
	}
	return a.mirror(ctx, in.OrderID, intent)
}

// answered returns the provider's intent for an order whose authorization it already answered;
// PAYMENT_METHOD_GONE when it holds none: the order's payment method token is no longer on record
// (the order request was never stored, or its token was forgotten after a day), and no retry can
// help.
func (a *Payments) answered(ctx context.Context, orderID int64) (PaymentResult, error) {
	intent, err := a.Gateway.Lookup(ctx, order.PaymentKey(orderID))
	if errors.Is(err, payment.ErrNotFound) {
		return PaymentResult{}, failure(problem.PaymentMethodGone, "the order's payment method is no longer on record", err)
	}
	if err != nil {
		return PaymentResult{}, providerError(err)
	}
	return a.mirror(ctx, orderID, intent)
}

// ResolvePayment asks the provider what became of the order's payment.
func (a *Payments) ResolvePayment(ctx context.Context, orderID int64) (PaymentResult, error) {
	intent, err := a.Gateway.Lookup(ctx, order.PaymentKey(orderID))
	if errors.Is(err, payment.ErrNotFound) {
		return PaymentResult{Status: PaymentNotFound}, nil
	}
	if err != nil {
		return PaymentResult{}, providerError(err)
	}
	return a.mirror(ctx, orderID, intent)
}

// SettleUnknown finds out what became of an authorization whose outcome is UNKNOWN: it asks the
// provider by the order's key, and authorizes again with the same key when the provider never saw
// it. While the provider cannot tell (it is down, or timed out again), it fails retryably with
// PAYMENT_STILL_UNKNOWN, so the order's workflow leaves the retries to the server (with backoff) and
// its history does not grow while it waits.
func (a *Payments) SettleUnknown(ctx context.Context, in AuthorizeInput) (PaymentResult, error) {
	res, err := a.ResolvePayment(ctx, in.OrderID)
	if err == nil && res.Status == PaymentNotFound {
		res, err = a.Authorize(ctx, in)
	}
	if err != nil || res.Status == PaymentUnknown {
		msg := "the provider cannot tell the payment's outcome yet"
		if err != nil {
			msg += ": " + err.Error()
		}
		return PaymentResult{}, temporal.NewApplicationError(msg, string(problem.PaymentStillUnknown))
	}
	return res, nil
}

// VerifyEventInput is a payment event as the order received it, and what the order expects.
type VerifyEventInput struct {
	OrderID     int64  `json:"orderId"`
	IntentID    string `json:"intentId"`
	AmountMinor int64  `json:"amountMinor"`
	Currency    string `json:"currency"`
	// Claimed is the status the event said; only the provider's answer is acted on.
	Claimed string `json:"claimed,omitempty"`
}

// VerifyEvent asks the provider for the order's intent before the order acts on an event about
// it: the intent must be the one the provider holds under the order's own key, for this order,
// amount and currency. The provider's status, not the event's, is returned and mirrored. An
// intent that is not the order's, or one the provider holds for another amount or currency, is a
// non-retryable PAYMENT_EVENT_REFUSED, and the order does not act on the event; a provider that
// cannot be asked is retried.
func (a *Payments) VerifyEvent(ctx context.Context, in VerifyEventInput) (PaymentResult, error) {
	intent, err := a.Gateway.Lookup(ctx, order.PaymentKey(in.OrderID))
	if errors.Is(err, payment.ErrNotFound) {
		return PaymentResult{}, failure(problem.PaymentEventRefused, "the provider holds no intent for this order", err)
	}
	if err != nil {
		return PaymentResult{}, providerError(err)
	}
	if msg := eventMismatch(in, intent); msg != "" {
		activity.GetLogger(ctx).Warn("payment event refused", "order_id", in.OrderID, "intent_id", in.IntentID, "reason", msg)
		return PaymentResult{}, failure(problem.PaymentEventRefused, msg, nil)
	}
	if in.Claimed != "" && in.Claimed != string(intent.Status) {
		activity.GetLogger(ctx).Warn("payment event disagrees with the provider", "order_id", in.OrderID,
			"event_status", in.Claimed, "provider_status", intent.Status)
	}
	return a.mirror(ctx, in.OrderID, intent)
}

// eventMismatch says why the provider's intent does not back the event, or "" when it does.
func eventMismatch(in VerifyEventInput, intent payment.Intent) string {
	switch {
	case intent.ID != in.IntentID:
		return "the event names intent " + in.IntentID + ", the order's is " + intent.ID
	case intent.OrderID != in.OrderID:
		return "the provider's intent belongs to another order"
	case intent.AmountMinor != in.AmountMinor || intent.Currency != in.Currency:
		return "the provider's intent is for another amount"
	}
	return ""
}

// Capture takes the authorized money. A repeat captures nothing more.
func (a *Payments) Capture(ctx context.Context, orderID int64) (PaymentResult, error) {
	intent, err := a.Gateway.Capture(ctx, order.PaymentKey(orderID))
	if err != nil {
		return PaymentResult{}, providerError(err)
	}
	return a.mirror(ctx, orderID, intent)
}

// Refund gives captured money back.
func (a *Payments) Refund(ctx context.Context, orderID int64) (PaymentResult, error) {
	intent, err := a.Gateway.Refund(ctx, order.PaymentKey(orderID))
	if err != nil {
		return PaymentResult{}, providerError(err)
	}
	return a.mirror(ctx, orderID, intent)
}

// Reverse undoes the payment whatever state it reached: an intent awaiting 3-D Secure or an
// authorization is voided, a capture is refunded, and an intent the provider never saw needs
// nothing. It is the payment's compensation, safe to run any number of times.
func (a *Payments) Reverse(ctx context.Context, orderID int64) (PaymentResult, error) {
	key := order.PaymentKey(orderID)
	intent, err := a.Gateway.Lookup(ctx, key)
	if errors.Is(err, payment.ErrNotFound) {
		return PaymentResult{Status: PaymentNotFound}, nil
	}
	if err != nil {
		return PaymentResult{}, providerError(err)
	}
	switch intent.Status {
	case payment.StatusRequiresAction, payment.StatusAuthorized:
		intent, err = a.Gateway.Void(ctx, key)
		if errors.Is(err, payment.ErrInvalidState) {
			// Captured in between: refund instead.
			intent, err = a.Gateway.Refund(ctx, key)
		}
	case payment.StatusCaptured:
		intent, err = a.Gateway.Refund(ctx, key)
	}
	if err != nil {
		return PaymentResult{}, providerError(err)
	}
	return a.mirror(ctx, orderID, intent)
}

func (a *Payments) mirror(ctx context.Context, orderID int64, intent payment.Intent) (PaymentResult, error) {
	if err := a.record(ctx, orderID, intent); err != nil {
		return PaymentResult{}, err
	}
	return PaymentResult{Status: string(intent.Status), IntentID: intent.ID, RedirectURL: intent.RedirectURL,
		DeclineCode: intent.DeclineCode}, nil
}

func (a *Payments) record(ctx context.Context, orderID int64, intent payment.Intent) error {
	p := db.RecordPaymentParams{OrderID: orderID, Status: string(intent.Status),
		CapturedMinor: intent.CapturedMinor, RefundedMinor: intent.RefundedMinor}
	if intent.ID != "" {
		p.IntentID = &intent.ID
	}
	if intent.RedirectURL != "" {
		p.RedirectUrl = &intent.RedirectURL
	}
	if err := db.New(a.Pool).RecordPayment(ctx, p); err != nil {
		return fmt.Errorf("recording the payment of order %d: %w", orderID, err)
	}
	return nil
}

// providerError keeps "the provider is down" retryable (PAYMENT_PROVIDER_UNAVAILABLE) and makes
// the provider's refusals (invalid state, key reused: PAYMENT_REFUSED; no such intent:
// PAYMENT_NOT_FOUND) non-retryable: retrying cannot change them.
func providerError(err error) error {
	switch {
	case errors.Is(err, payment.ErrUnavailable), errors.Is(err, payment.ErrTimeout):
		return temporal.NewApplicationError(err.Error(), string(problem.PaymentProviderUnavailable), err)
	case errors.Is(err, payment.ErrInvalidState), errors.Is(err, payment.ErrKeyReused), errors.Is(err, payment.ErrInvalidRequest):
		return failure(problem.PaymentRefused, err.Error(), err)
	case errors.Is(err, payment.ErrNotFound):
		return failure(problem.PaymentNotFound, err.Error(), err)
	}
	return fmt.Errorf("asking the payment provider: %w", err)
}

func nullJSON(raw []byte) pqtype.NullRawMessage {
	return pqtype.NullRawMessage{RawMessage: raw, Valid: raw != nil}
}
