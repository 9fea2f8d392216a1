package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sqlc-dev/pqtype"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/order"
	"github.com/marketplace/checkout/payment"
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
	Status      payment.Status `json:"status"`
	IntentID    string         `json:"intentId,omitempty"`
	RedirectURL string         `json:"redirectUrl,omitempty"`
	DeclineCode string         `json:"declineCode,omitempty"`
}

// CaptureMargin: a capture is not sent when the provider's authorization lapses sooner than
// this (it could lapse on its way); the step refuses with PAYMENT_AUTHORIZATION_EXPIRED instead.
const CaptureMargin = time.Hour

// payRef is what the provider is asked by, from the payments row.
type payRef struct {
	payment.Ref
	version       string
	captureBefore *time.Time
	// attempted is how long ago the first authorization was attempted; negative: never.
	attempted time.Duration
}

func (a *Payments) ref(ctx context.Context, orderID int64) (payRef, error) {
	row, err := order.DataOf(a.Pool).PaymentRef(ctx, orderID)
	if err != nil {
		return payRef{}, fmt.Errorf("reading the payment of order %d: %w", orderID, err)
	}
	return payRefOf(orderID, row), nil
}

func payRefOf(orderID int64, row order.PaymentRef) payRef {
	return payRef{Ref: payment.Ref{Key: row.IdempotencyKey, OrderID: orderID, IntentID: row.IntentID},
		version: row.PriceVersion, captureBefore: row.CaptureBefore,
		attempted: time.Duration(row.AttemptedSecondsAgo * float64(time.Second))}
}

// withinKeyWindow: the provider still keeps the keys of the payment's first authorization, so
// authorizing again under them answers the same intent rather than making a second one.
func (a *Payments) withinKeyWindow(r payRef) bool {
	w := a.Gateway.Rules().KeyWindow
	return w <= 0 || r.attempted < w-keyWindowMargin
}

// keyWindowMargin keeps clear of the end of the provider's key window: a request sent just
// before it may reach the provider just after.
const keyWindowMargin = time.Hour

// errNotSearchableYet: the provider's search does not show the intent, but the search lags and
// the authorization was attempted too recently for that to mean it was never made.
var errNotSearchableYet = fmt.Errorf("%w: the provider's search may not show the intent yet", payment.ErrUnavailable)

// lookup asks the provider for the order's intent: by id when recorded, else by the lagging
// search, whose "not found" is trusted only once the first attempt is older than the search lag
// (errNotSearchableYet before).
func (a *Payments) lookup(ctx context.Context, r payRef) (payment.Intent, error) {
	intent, err := a.Gateway.Lookup(ctx, r.Ref)
	if errors.Is(err, payment.ErrNotFound) && r.IntentID == "" && r.attempted >= 0 &&
		r.attempted < a.Gateway.Rules().SearchLag {
		return intent, errNotSearchableYet
	}
	return intent, err
}

// Authorize asks the provider to authorize the order's total. The intent's id is recorded as soon
// as the provider made it, before it holds money, so that a lost answer is found by id. A timeout
// leaves the outcome UNKNOWN: the row says so and a non-retryable PAYMENT_OUTCOME_UNKNOWN tells
// the workflow to ask the provider (ResolvePayment) before deciding anything. Past the provider's
// key window, the same keys would make a second intent: the provider is then only asked, never
// asked to authorize again.
func (a *Payments) Authorize(ctx context.Context, in AuthorizeInput) (PaymentResult, error) {
	return a.authorize(ctx, in, false)
}

// AuthorizeForCapture is Authorize for an order that goes on to capture at once: an authorization
// is answered without its mirror on the payments row, which CaptureFinish writes (as the capture)
// in the transaction that confirms the order. The intent's id and the attempt are recorded before
// the provider holds any money, as Authorize records them; every other answer is mirrored at once.
// The order writes the mirror itself (ResolvePayment) before it waits for anything, so the row is
// behind the provider only within the workflow task that authorized. A repeat after a lost answer
// finds the token still kept and authorizes again under the same keys: the provider answers with
// the same intent.
func (a *Payments) AuthorizeForCapture(ctx context.Context, in AuthorizeInput) (PaymentResult, error) {
	return a.authorize(ctx, in, true)
}

func (a *Payments) authorize(ctx context.Context, in AuthorizeInput, captureNext bool) (PaymentResult, error) {
	var r payRef
	if in.Token == "" {
		// The payment and its method's token, in one round trip.
		row, token, kept, err := order.PaymentToAuthorize(ctx, a.Pool, in.OrderID)
		if err != nil {
			return PaymentResult{}, fmt.Errorf("reading the payment of order %d: %w", in.OrderID, err)
		}
		r = payRefOf(in.OrderID, row)
		if !kept {
			// The token is forgotten once the provider answered: this is a repeat of a call whose
			// answer was recorded but lost on its way back (the worker died). The provider's
			// intent for the order is that answer.
			return a.answered(ctx, r)
		}
		in.Token = token
	} else {
		var err error
		if r, err = a.ref(ctx, in.OrderID); err != nil {
			return PaymentResult{}, err
		}
	}
	if r.attempted >= 0 && !a.withinKeyWindow(r) {
		return a.answered(ctx, r)
	}
	q := order.DataOf(db.Traced(a.Pool))
	if err := q.AuthorizeAttempted(ctx, in.OrderID); err != nil {
		return PaymentResult{}, fmt.Errorf("recording the authorization of order %d: %w", in.OrderID, err)
	}
	req := payment.AuthorizeRequest{Ref: payment.Ref{Key: r.Key, OrderID: in.OrderID}, OrderVersion: r.version,
		AmountMinor: in.AmountMinor, Currency: in.Currency, PaymentMethodToken: in.Token,
		Created: func(ctx context.Context, intentID string) error {
			if err := q.RecordIntentID(ctx, &intentID, in.OrderID); err != nil {
				return fmt.Errorf("recording the intent of order %d: %w", in.OrderID, err)
			}
			return nil
		}}
	intent, err := a.Gateway.Authorize(ctx, req)
	if errors.Is(err, payment.ErrTimeout) {
		if rerr := a.record(ctx, in.OrderID, payment.Intent{Status: payment.StatusUnknown}); rerr != nil {
			return PaymentResult{}, rerr
		}
		return PaymentResult{Status: payment.StatusUnknown}, failure(problem.PaymentOutcomeUnknown,
			"payment provider timed out: outcome unknown", err)
	}
	if err != nil {
		return PaymentResult{}, providerError(err)
	}
	if captureNext && intent.Status == payment.StatusAuthorized {
		return resultOf(intent), nil
	}
	return a.mirror(ctx, in.OrderID, intent)
}

// answered returns the provider's intent for an order whose authorization it already answered;
// PAYMENT_METHOD_GONE when it holds none: the order's payment method token is no longer on record
// (the order request was never stored, or its token was forgotten after a day), or the provider's
// keys of the first attempt are gone, and no retry can help.
func (a *Payments) answered(ctx context.Context, r payRef) (PaymentResult, error) {
	intent, err := a.lookup(ctx, r)
	if errors.Is(err, payment.ErrNotFound) || (err == nil && intent.Status == payment.StatusCreated) {
		return PaymentResult{}, failure(problem.PaymentMethodGone, "the order's payment method is no longer on record", err)
	}
	if err != nil {
		return PaymentResult{}, providerError(err)
	}
	return a.mirror(ctx, r.OrderID, intent)
}

// ResolvePayment asks the provider what became of the order's payment. NOT_FOUND means that
// authorizing again under the same keys makes no second authorization: the provider never made
// the intent (its search can see it by now), or made it without confirming it, or it still keeps
// the keys. Otherwise a search that cannot tell yet leaves the payment UNKNOWN.
func (a *Payments) ResolvePayment(ctx context.Context, orderID int64) (PaymentResult, error) {
	r, err := a.ref(ctx, orderID)
	if err != nil {
		return PaymentResult{}, err
	}
	intent, err := a.lookup(ctx, r)
	switch {
	case errors.Is(err, payment.ErrNotFound), err == nil && intent.Status == payment.StatusCreated:
		return PaymentResult{Status: payment.StatusNotFound}, nil
	case errors.Is(err, errNotSearchableYet) && a.withinKeyWindow(r):
		return PaymentResult{Status: payment.StatusNotFound}, nil
	case errors.Is(err, errNotSearchableYet):
		return PaymentResult{Status: payment.StatusUnknown}, nil
	case err != nil:
		return PaymentResult{}, providerError(err)
	}
	return a.mirror(ctx, orderID, intent)
}

// SettleUnknown finds out what became of an authorization whose outcome is UNKNOWN: it asks the
// provider, and authorizes again under the same keys when the provider never made it. While the
// provider cannot tell (it is down, timed out again, or its search does not show the intent yet),
// it fails retryably with PAYMENT_STILL_UNKNOWN, so the order's workflow leaves the retries to the
// server (with backoff) and its history does not grow while it waits.
//
// The order stops it when it stops waiting (a cancel, the hold's end) and waits for it to end
// before reversing the payment. Before authorizing, it heartbeats, which is how the cancel reaches
// it, and authorizes nothing once cancelled; an authorization it still made is in its result, which
// the order reads before its reversal.
func (a *Payments) SettleUnknown(ctx context.Context, in AuthorizeInput) (PaymentResult, error) {
	res, err := a.ResolvePayment(ctx, in.OrderID)
	if err == nil && res.Status == payment.StatusNotFound {
		activity.RecordHeartbeat(ctx)
		if err := ctx.Err(); err != nil {
			return PaymentResult{}, err
		}
		res, err = a.Authorize(ctx, in)
	}
	if err != nil || res.Status == payment.StatusUnknown {
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
	Claimed payment.Status `json:"claimed,omitempty"`
}

// VerifyEvent asks the provider for the order's intent before the order acts on an event about
// it: the intent the order recorded (or, when it recorded none, the event's, which must carry the
// order's own key in its metadata), for this order, amount and currency. The provider's status,
// not the event's, is returned and mirrored. An intent that is not the order's, or one the
// provider holds for another amount or currency, is a non-retryable PAYMENT_EVENT_REFUSED, and
// the order does not act on the event; a provider that cannot be asked is retried.
func (a *Payments) VerifyEvent(ctx context.Context, in VerifyEventInput) (PaymentResult, error) {
	r, err := a.ref(ctx, in.OrderID)
	if err != nil {
		return PaymentResult{}, err
	}
	ref := r.Ref
	if ref.IntentID == "" {
		ref.IntentID = in.IntentID
	}
	intent, err := a.Gateway.Lookup(ctx, ref)
	if errors.Is(err, payment.ErrNotFound) {
		return PaymentResult{}, failure(problem.PaymentEventRefused, "the provider holds no such intent for this order", err)
	}
	if err != nil {
		return PaymentResult{}, providerError(err)
	}
	if msg := eventMismatch(in, r.Key, intent); msg != "" {
		activity.GetLogger(ctx).Warn("payment event refused", "order_id", in.OrderID, "intent_id", in.IntentID, "reason", msg)
		return PaymentResult{}, failure(problem.PaymentEventRefused, msg, nil)
	}
	if in.Claimed != "" && in.Claimed != intent.Status {
		activity.GetLogger(ctx).Warn("payment event disagrees with the provider", "order_id", in.OrderID,
			"event_status", in.Claimed, "provider_status", intent.Status)
	}
	return a.mirror(ctx, in.OrderID, intent)
}

// eventMismatch says why the provider's intent does not back the event, or "" when it does.
func eventMismatch(in VerifyEventInput, key string, intent payment.Intent) string {
	switch {
	case intent.ID != in.IntentID:
		return "the event names intent " + in.IntentID + ", the order's is " + intent.ID
	case intent.OrderID != in.OrderID || intent.IdempotencyKey != key:
		return "the provider's intent belongs to another order"
	case intent.AmountMinor != in.AmountMinor || intent.Currency != in.Currency:
		return "the provider's intent is for another amount"
	}
	return ""
}

// Capture takes the authorized money. A repeat captures nothing more. An authorization that the
// provider lets lapse within CaptureMargin is not sent for capture: the step refuses with a
// non-retryable PAYMENT_AUTHORIZATION_EXPIRED (no retry can bring it back), and so does one the
// provider reports lapsed.
func (a *Payments) Capture(ctx context.Context, orderID int64) (PaymentResult, error) {
	intent, err := a.capture(ctx, orderID)
	if err != nil {
		return PaymentResult{}, err
	}
	return a.mirror(ctx, orderID, intent)
}

// capture asks the provider to capture, unmirrored (see Capture).
func (a *Payments) capture(ctx context.Context, orderID int64) (payment.Intent, error) {
	r, err := a.ref(ctx, orderID)
	if err != nil {
		return payment.Intent{}, err
	}
	if r.captureBefore != nil && time.Until(*r.captureBefore) < CaptureMargin {
		return payment.Intent{}, authorizationExpired(*r.captureBefore)
	}
	intent, err := a.Gateway.Capture(ctx, r.Ref)
	if errors.Is(err, payment.ErrInvalidState) {
		if cur, lerr := a.Gateway.Lookup(ctx, r.Ref); lerr == nil && cur.DeclineCode == payment.DeclineAuthorizationExpired {
			_, _ = a.mirror(ctx, orderID, cur)
			return payment.Intent{}, authorizationExpired(cur.CaptureBefore)
		}
	}
	if err != nil {
		return payment.Intent{}, providerError(err)
	}
	return intent, nil
}

// CaptureFinishInput captures an order's payment and confirms the order; Answer, when set, is the
// answer to the order's request, recorded in the same transaction.
type CaptureFinishInput struct {
	OrderID int64               `json:"orderId"`
	Answer  *RecordOutcomeInput `json:"answer,omitempty"`
}

// CaptureFinished is what CaptureFinish did: the payment as the provider has it, and the order.
type CaptureFinished struct {
	Payment  PaymentResult `json:"payment"`
	Finished Finished      `json:"finished"`
}

// CaptureFinish is Capture and Finish to CONFIRMED as one step: the provider's capture outside
// any transaction, then one transaction that mirrors it on the payments row, records the answer to
// the order's request (Answer) and ends the order CONFIRMED with its timeline entry and outbox
// event (order.Store.FinishAlong). A repeat after a lost answer captures nothing more (the
// provider answers the capture it made), mirrors the same capture and finds the order confirmed.
// When another actor ended the order first, the capture is still mirrored and Finished says where
// the order stands: the caller gives the money back. Refusals are Capture's.
func (a *Payments) CaptureFinish(ctx context.Context, in CaptureFinishInput) (CaptureFinished, error) {
	intent, err := a.capture(ctx, in.OrderID)
	if err != nil {
		return CaptureFinished{}, err
	}
	along := []order.Along{order.PaymentAlong(paymentUpdate(in.OrderID, intent))}
	answer, err := outcomeAlong(in.Answer)
	if err != nil {
		return CaptureFinished{}, err
	}
	if answer != nil {
		along = append(along, answer)
	}
	f, err := order.Store{Pool: a.Pool}.FinishAlong(ctx, in.OrderID, order.StatusConfirmed, "", nil, along...)
	if err != nil {
		return CaptureFinished{}, fmt.Errorf("confirming order %d with its capture: %w", in.OrderID, err)
	}
	return CaptureFinished{Payment: resultOf(intent), Finished: f}, nil
}

func authorizationExpired(at time.Time) error {
	return failure(problem.PaymentAuthorizationExpired, fmt.Sprintf("the provider's authorization lapses at %s: not captured",
		at.UTC().Format(time.RFC3339)), nil)
}

// Refund gives captured money back.
func (a *Payments) Refund(ctx context.Context, orderID int64) (PaymentResult, error) {
	r, err := a.ref(ctx, orderID)
	if err != nil {
		return PaymentResult{}, err
	}
	intent, err := a.Gateway.Refund(ctx, r.Ref)
	if err != nil {
		return PaymentResult{}, providerError(err)
	}
	return a.mirror(ctx, orderID, intent)
}

// Reverse undoes the payment whatever state it reached: an intent made, awaiting 3-D Secure or
// authorized is voided, a capture is refunded, and an intent the provider never made needs
// nothing — which is trusted only once its search can see it (retried before). It is the
// payment's compensation, safe to run any number of times.
func (a *Payments) Reverse(ctx context.Context, orderID int64) (PaymentResult, error) {
	r, err := a.ref(ctx, orderID)
	if err != nil {
		return PaymentResult{}, err
	}
	intent, err := a.lookup(ctx, r)
	if errors.Is(err, payment.ErrNotFound) {
		return PaymentResult{Status: payment.StatusNotFound}, nil
	}
	if err != nil {
		return PaymentResult{}, providerError(err)
	}
	ref := r.Ref
	ref.IntentID = intent.ID
	switch intent.Status {
	case payment.StatusCreated, payment.StatusRequiresAction, payment.StatusAuthorized:
		intent, err = a.Gateway.Void(ctx, ref)
		if errors.Is(err, payment.ErrInvalidState) {
			// Captured in between: refund instead.
			intent, err = a.Gateway.Refund(ctx, ref)
		}
	case payment.StatusCaptured:
		intent, err = a.Gateway.Refund(ctx, ref)
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
	return resultOf(intent), nil
}

func resultOf(intent payment.Intent) PaymentResult {
	return PaymentResult{Status: intent.Status, IntentID: intent.ID, RedirectURL: intent.RedirectURL,
		DeclineCode: intent.DeclineCode}
}

func (a *Payments) record(ctx context.Context, orderID int64, intent payment.Intent) error {
	if intent.Status == payment.StatusCreated {
		// Made, not confirmed: nothing is held, and the row keeps what it said.
		return nil
	}
	if err := order.DataOf(db.Traced(a.Pool)).RecordPayment(ctx, paymentUpdate(orderID, intent)); err != nil {
		return fmt.Errorf("recording the payment of order %d: %w", orderID, err)
	}
	return nil
}

// paymentUpdate is the payments row's mirror of the provider's intent.
func paymentUpdate(orderID int64, intent payment.Intent) order.PaymentUpdate {
	p := order.PaymentUpdate{OrderID: orderID, Status: string(intent.Status),
		CapturedMinor: intent.CapturedMinor, RefundedMinor: intent.RefundedMinor}
	if intent.ID != "" {
		p.IntentID = &intent.ID
	}
	if intent.RedirectURL != "" {
		p.RedirectUrl = &intent.RedirectURL
	}
	if !intent.CaptureBefore.IsZero() {
		p.CaptureBefore = &intent.CaptureBefore
	}
	return p
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
