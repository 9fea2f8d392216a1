// Package stripepay is the Stripe adapter behind payment.Gateway, on the official
// github.com/stripe/stripe-go: manual-capture PaymentIntents made first and confirmed after (so
// that the order records the intent's id before money is held), 3-D Secure through the intent's
// next_action redirect, capture, cancel (void), full and partial refunds, a search by metadata
// for an intent whose id was never learnt, and Stripe-signed webhooks checked by stripe-go's own
// verifier (webhook.go). Every call carries the idempotency key of its own operation
// (payment.Ref.OpKey). docs/payments.md holds how it meets each rule of the gateway's contract.
package stripepay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v82"

	"github.com/marketplace/checkout/internal/money"
	"github.com/marketplace/checkout/payment"
)

// Metadata keys the adapter writes on every intent, and on every refund (RefundKey).
const (
	MetaOrderID      = "order_id"
	MetaOrderVersion = "order_version"
	MetaPaymentKey   = "payment_key"
	MetaOperation    = "operation"
	MetaRefundKey    = "refund_key"
)

// Stripe's rules, as its documentation states them: idempotency keys are kept for 24 hours, the
// search API's index lags writes by up to a minute, and a card authorization made with manual
// capture lasts seven days (the charge says exactly until when: capture_before).
var stripeRules = payment.Rules{KeyWindow: 24 * time.Hour, SearchLag: time.Minute,
	AuthorizationWindow: 7 * 24 * time.Hour}

// Options configure the adapter.
type Options struct {
	// SecretKey is the account's secret API key (sk_test_… in test mode).
	SecretKey string
	// APIURL replaces Stripe's API address (stripe-mock in tests); empty: Stripe's.
	APIURL string
	// ReturnURL is where Stripe sends the shopper's browser after 3-D Secure.
	ReturnURL string
	// HTTPClient, when set, makes the requests (its timeout bounds each call).
	HTTPClient *http.Client
	// MaxNetworkRetries is how many times stripe-go repeats a request that failed on the network,
	// with the same idempotency key (default 1).
	MaxNetworkRetries int64
}

// Gateway is the Stripe adapter. It is safe for concurrent use.
type Gateway struct {
	sc   *stripe.Client
	opts Options
}

var _ payment.Gateway = (*Gateway)(nil)

// New returns the adapter; it makes no call.
func New(opts Options) *Gateway {
	if opts.MaxNetworkRetries == 0 {
		opts.MaxNetworkRetries = 1
	}
	cfg := &stripe.BackendConfig{MaxNetworkRetries: stripe.Int64(opts.MaxNetworkRetries),
		LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull}}
	if opts.APIURL != "" {
		cfg.URL = stripe.String(strings.TrimRight(opts.APIURL, "/"))
	}
	if opts.HTTPClient != nil {
		cfg.HTTPClient = opts.HTTPClient
	}
	return &Gateway{sc: stripe.NewClient(opts.SecretKey, stripe.WithBackends(stripe.NewBackendsWithConfig(cfg))), opts: opts}
}

// Rules implements payment.Gateway.
func (g *Gateway) Rules() payment.Rules { return stripeRules }

// Authorize implements payment.Gateway: create (capture_method=manual, the order in metadata),
// tell req.Created the id, confirm with the payment method and the return URL.
func (g *Gateway) Authorize(ctx context.Context, req payment.AuthorizeRequest) (payment.Intent, error) {
	amount, err := ToStripeAmount(req.AmountMinor, req.Currency)
	if err != nil {
		return payment.Intent{}, err
	}
	if req.Key == "" || req.PaymentMethodToken == "" {
		return payment.Intent{}, fmt.Errorf("stripe: %w: a payment key and a payment method are required", payment.ErrInvalidRequest)
	}
	create := &stripe.PaymentIntentCreateParams{Amount: stripe.Int64(amount), Currency: stripe.String(strings.ToLower(req.Currency)),
		CaptureMethod: stripe.String(string(stripe.PaymentIntentCaptureMethodManual)), PaymentMethodTypes: []*string{stripe.String("card")},
		Metadata: map[string]string{MetaOrderID: strconv.FormatInt(req.OrderID, 10), MetaOrderVersion: req.OrderVersion,
			MetaPaymentKey: req.Key, MetaOperation: payment.OpCreate}}
	create.SetIdempotencyKey(req.OpKey(payment.OpCreate))
	pi, err := g.sc.V1PaymentIntents.Create(ctx, create)
	if err != nil {
		return payment.Intent{}, g.callError("create", err, true)
	}
	if req.Created != nil {
		if err := req.Created(ctx, pi.ID); err != nil {
			return payment.Intent{}, err
		}
	}
	confirm := &stripe.PaymentIntentConfirmParams{PaymentMethod: stripe.String(req.PaymentMethodToken)}
	if g.opts.ReturnURL != "" {
		confirm.ReturnURL = stripe.String(g.opts.ReturnURL)
	}
	confirm.SetIdempotencyKey(req.OpKey(payment.OpConfirm))
	confirm.AddExpand("latest_charge")
	confirmed, err := g.sc.V1PaymentIntents.Confirm(ctx, pi.ID, confirm)
	var se *stripe.Error
	if errors.As(err, &se) && se.Type == stripe.ErrorTypeCard && se.PaymentIntent != nil {
		// A refusal is an intent DECLINED, not an error.
		in, cerr := toIntent(se.PaymentIntent)
		if cerr == nil && in.Status == payment.StatusCreated {
			in.Status, in.DeclineCode = payment.StatusDeclined, declineCode(se)
		}
		return in, cerr
	}
	if err != nil {
		if isUnexpectedState(err) {
			// Confirmed before under a key the provider forgot, or answered otherwise: the intent
			// as it stands is the answer.
			return g.retrieve(ctx, pi.ID)
		}
		return payment.Intent{}, g.callError("confirm", err, true)
	}
	return g.fresh(ctx, confirmed)
}

// Capture implements payment.Gateway. The capture is sent as it is; a refusal for the intent's
// state is then read: already captured answers the intent, anything else is ErrInvalidState.
func (g *Gateway) Capture(ctx context.Context, ref payment.Ref) (payment.Intent, error) {
	id, err := g.intentID(ctx, ref)
	if err != nil {
		return payment.Intent{}, err
	}
	p := &stripe.PaymentIntentCaptureParams{}
	p.SetIdempotencyKey(ref.OpKey(payment.OpCapture))
	p.AddExpand("latest_charge")
	pi, err := g.sc.V1PaymentIntents.Capture(ctx, id, p)
	if err != nil {
		return g.settled(ctx, "capture", id, err, payment.StatusCaptured)
	}
	return g.fresh(ctx, pi)
}

// Void implements payment.Gateway: the intent is cancelled.
func (g *Gateway) Void(ctx context.Context, ref payment.Ref) (payment.Intent, error) {
	id, err := g.intentID(ctx, ref)
	if err != nil {
		return payment.Intent{}, err
	}
	p := &stripe.PaymentIntentCancelParams{}
	p.SetIdempotencyKey(ref.OpKey(payment.OpVoid))
	p.AddExpand("latest_charge")
	pi, err := g.sc.V1PaymentIntents.Cancel(ctx, id, p)
	if err != nil {
		return g.settled(ctx, "void", id, err, payment.StatusVoided, payment.StatusDeclined)
	}
	return g.fresh(ctx, pi)
}

// Refund implements payment.Gateway: what is left of the capture is refunded.
func (g *Gateway) Refund(ctx context.Context, ref payment.Ref) (payment.Intent, error) {
	id, err := g.intentID(ctx, ref)
	if err != nil {
		return payment.Intent{}, err
	}
	p := &stripe.RefundCreateParams{PaymentIntent: stripe.String(id),
		Metadata: map[string]string{MetaRefundKey: ref.OpKey(payment.OpRefund), MetaOrderID: strconv.FormatInt(ref.OrderID, 10)}}
	p.SetIdempotencyKey(ref.OpKey(payment.OpRefund))
	if _, err := g.sc.V1Refunds.Create(ctx, p); err != nil {
		return g.refused(ctx, "refund", id, err, payment.StatusRefunded)
	}
	return g.retrieve(ctx, id)
}

// RefundPart implements payment.Gateway. The refund's key is also in its metadata: before a
// refund is created, the intent's refunds are listed, so a repeat after Stripe forgot the key (24
// hours) finds the first instead of refunding twice.
func (g *Gateway) RefundPart(ctx context.Context, ref payment.Ref, refund payment.PartialRefund) (payment.Intent, error) {
	if refund.IdempotencyKey == "" || len(refund.IdempotencyKey) > 255 || refund.AmountMinor <= 0 {
		return payment.Intent{}, fmt.Errorf("stripe: %w: a refund needs a key and a positive amount", payment.ErrInvalidRequest)
	}
	cur, err := g.Lookup(ctx, ref)
	if err != nil {
		return payment.Intent{}, err
	}
	amount, err := ToStripeAmount(refund.AmountMinor, cur.Currency)
	if err != nil {
		return payment.Intent{}, err
	}
	list := &stripe.RefundListParams{PaymentIntent: stripe.String(cur.ID)}
	for r, err := range g.sc.V1Refunds.List(ctx, list) {
		if err != nil {
			return payment.Intent{}, g.callError("list refunds", err, false)
		}
		if r.Metadata[MetaRefundKey] != refund.IdempotencyKey {
			continue
		}
		if r.Amount != amount {
			return payment.Intent{}, fmt.Errorf("stripe: refund %q: %w", refund.IdempotencyKey, payment.ErrKeyReused)
		}
		return cur, nil
	}
	p := &stripe.RefundCreateParams{PaymentIntent: stripe.String(cur.ID), Amount: stripe.Int64(amount),
		Metadata: map[string]string{MetaRefundKey: refund.IdempotencyKey, MetaOrderID: strconv.FormatInt(ref.OrderID, 10)}}
	p.SetIdempotencyKey(refund.IdempotencyKey)
	if _, err := g.sc.V1Refunds.Create(ctx, p); err != nil {
		_, rerr := g.refused(ctx, "refund part", cur.ID, err)
		return payment.Intent{}, rerr
	}
	return g.retrieve(ctx, cur.ID)
}

// intentID is the intent's id: the recorded one, else the search's.
func (g *Gateway) intentID(ctx context.Context, ref payment.Ref) (string, error) {
	if ref.IntentID != "" {
		return ref.IntentID, nil
	}
	in, err := g.Lookup(ctx, ref)
	return in.ID, err
}

// refused reads an intent whose refund Stripe refused: one already where the call leads answers
// it; one not CAPTURED is ErrInvalidState; otherwise the refusal stands (an amount beyond what is
// left of the capture is ErrInvalidRequest).
func (g *Gateway) refused(ctx context.Context, op, id string, err error, done ...payment.Status) (payment.Intent, error) {
	mapped := g.callError(op, err, true)
	var se *stripe.Error
	if !errors.As(err, &se) || se.HTTPStatusCode >= 500 {
		return payment.Intent{}, mapped
	}
	cur, rerr := g.retrieve(ctx, id)
	switch {
	case rerr != nil:
		return payment.Intent{}, rerr
	case slices.Contains(done, cur.Status):
		return cur, nil
	case cur.Status != payment.StatusCaptured:
		return payment.Intent{}, fmt.Errorf("stripe: %s %s: intent is %s: %w", op, id, cur.Status, payment.ErrInvalidState)
	}
	return payment.Intent{}, mapped
}

// Lookup implements payment.Gateway: by id, else the newest intent whose metadata names the
// payment key (Stripe's search, which lags writes by up to a minute).
func (g *Gateway) Lookup(ctx context.Context, ref payment.Ref) (payment.Intent, error) {
	if ref.IntentID != "" {
		return g.retrieve(ctx, ref.IntentID)
	}
	if ref.Key == "" || strings.ContainsAny(ref.Key, `'\`) {
		return payment.Intent{}, fmt.Errorf("stripe: %w: a payment key to search by", payment.ErrInvalidRequest)
	}
	p := &stripe.PaymentIntentSearchParams{SearchParams: stripe.SearchParams{
		Query: "metadata['" + MetaPaymentKey + "']:'" + ref.Key + "'", Single: true}}
	var newest *stripe.PaymentIntent
	for pi, err := range g.sc.V1PaymentIntents.Search(ctx, p) {
		if err != nil {
			return payment.Intent{}, g.callError("search", err, false)
		}
		if pi.Metadata[MetaPaymentKey] != ref.Key {
			continue // the search matched something else: only the key's own intents count
		}
		if newest == nil || pi.Created > newest.Created || (pi.Created == newest.Created && pi.ID > newest.ID) {
			newest = pi
		}
	}
	if newest == nil {
		return payment.Intent{}, fmt.Errorf("stripe: search %q: %w", ref.Key, payment.ErrNotFound)
	}
	return g.retrieve(ctx, newest.ID) // the search's copy may be stale
}

// retrieve reads the intent with its latest charge (refunds, capture deadline).
func (g *Gateway) retrieve(ctx context.Context, id string) (payment.Intent, error) {
	p := &stripe.PaymentIntentRetrieveParams{}
	p.AddExpand("latest_charge")
	pi, err := g.sc.V1PaymentIntents.Retrieve(ctx, id, p)
	if err != nil {
		return payment.Intent{}, g.callError("retrieve", err, false)
	}
	return toIntent(pi)
}

// fresh answers a call's intent, read again when the answer was an idempotent replay (Stripe then
// repeats the first answer, which may be stale): the contract answers a repeat with the intent as
// it stands now.
func (g *Gateway) fresh(ctx context.Context, pi *stripe.PaymentIntent) (payment.Intent, error) {
	if pi.LastResponse != nil && pi.LastResponse.Header.Get("Idempotent-Replayed") == "true" {
		return g.retrieve(ctx, pi.ID)
	}
	return toIntent(pi)
}

// settled reads an intent whose operation Stripe refused for its state: already where the call
// leads (done before, under a key Stripe forgot or another actor's) answers it; anything else is
// ErrInvalidState.
func (g *Gateway) settled(ctx context.Context, op, id string, err error, done ...payment.Status) (payment.Intent, error) {
	if !isUnexpectedState(err) {
		return payment.Intent{}, g.callError(op, err, true)
	}
	cur, rerr := g.retrieve(ctx, id)
	if rerr != nil {
		return payment.Intent{}, rerr
	}
	if slices.Contains(done, cur.Status) {
		return cur, nil
	}
	return payment.Intent{}, fmt.Errorf("stripe: %s %s: intent is %s: %w", op, id, cur.Status, payment.ErrInvalidState)
}

func isUnexpectedState(err error) bool {
	var se *stripe.Error
	return errors.As(err, &se) && se.Code == stripe.ErrorCodePaymentIntentUnexpectedState
}

// callError maps a failed call to the gateway's errors. A write that got no answer (the network
// or the deadline failed it) may have been done: ErrTimeout, so the caller asks before deciding.
func (g *Gateway) callError(op string, err error, write bool) error {
	var se *stripe.Error
	if errors.As(err, &se) {
		switch {
		case se.Type == stripe.ErrorTypeIdempotency && se.HTTPStatusCode == http.StatusConflict:
			// The same key is being served right now (a concurrent repeat): nothing decided yet.
			return fmt.Errorf("stripe: %s: %w: %s", op, payment.ErrUnavailable, se.Msg)
		case se.Type == stripe.ErrorTypeIdempotency:
			return fmt.Errorf("stripe: %s: %w: %s", op, payment.ErrKeyReused, se.Msg)
		case se.HTTPStatusCode == http.StatusNotFound || se.Code == stripe.ErrorCodeResourceMissing:
			return fmt.Errorf("stripe: %s: %w", op, payment.ErrNotFound)
		case se.Code == stripe.ErrorCodePaymentIntentUnexpectedState:
			return fmt.Errorf("stripe: %s: %w: %s", op, payment.ErrInvalidState, se.Msg)
		case se.HTTPStatusCode >= 500 || se.HTTPStatusCode == http.StatusTooManyRequests ||
			se.HTTPStatusCode == http.StatusUnauthorized || se.HTTPStatusCode == http.StatusForbidden:
			return fmt.Errorf("stripe: %s: %w: %d %s", op, payment.ErrUnavailable, se.HTTPStatusCode, se.Msg)
		case se.HTTPStatusCode >= 400:
			return fmt.Errorf("stripe: %s: %w: %s %s", op, payment.ErrInvalidRequest, se.Code, se.Msg)
		}
	}
	var ne net.Error
	if write && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.As(err, &ne)) {
		return fmt.Errorf("stripe: %s: %w: %w", op, payment.ErrTimeout, err)
	}
	return fmt.Errorf("stripe: %s: %w: %w", op, payment.ErrUnavailable, err)
}

func declineCode(se *stripe.Error) string {
	if se.DeclineCode != "" {
		return string(se.DeclineCode)
	}
	if se.Code != "" {
		return string(se.Code)
	}
	return "card_declined"
}

// toIntent reads a PaymentIntent as the gateway's Intent, its amounts back in the currency's
// ISO 4217 minor unit.
func toIntent(pi *stripe.PaymentIntent) (payment.Intent, error) {
	currency := strings.ToUpper(string(pi.Currency))
	in := payment.Intent{ID: pi.ID, IdempotencyKey: pi.Metadata[MetaPaymentKey], Currency: currency}
	in.OrderID, _ = strconv.ParseInt(pi.Metadata[MetaOrderID], 10, 64)
	var err error
	if in.AmountMinor, err = FromStripeAmount(pi.Amount, currency); err != nil {
		return in, err
	}
	var refunded int64
	ch := pi.LatestCharge
	if ch != nil {
		refunded = ch.AmountRefunded
		if d := ch.PaymentMethodDetails; d != nil && d.Card != nil && d.Card.CaptureBefore > 0 {
			in.CaptureBefore = time.Unix(d.Card.CaptureBefore, 0).UTC()
		}
	}
	switch pi.Status {
	case stripe.PaymentIntentStatusRequiresPaymentMethod:
		in.Status = payment.StatusCreated
		if pi.LastPaymentError != nil {
			in.Status, in.DeclineCode = payment.StatusDeclined, declineCode(pi.LastPaymentError)
		}
	case stripe.PaymentIntentStatusRequiresConfirmation:
		in.Status = payment.StatusCreated
	case stripe.PaymentIntentStatusRequiresAction, stripe.PaymentIntentStatusProcessing:
		in.Status = payment.StatusRequiresAction
		if na := pi.NextAction; na != nil && na.RedirectToURL != nil {
			in.RedirectURL = na.RedirectToURL.URL
		}
	case stripe.PaymentIntentStatusRequiresCapture:
		in.Status = payment.StatusAuthorized
		if in.CaptureBefore.IsZero() && pi.Created > 0 {
			in.CaptureBefore = time.Unix(pi.Created, 0).UTC().Add(stripeRules.AuthorizationWindow)
		}
	case stripe.PaymentIntentStatusSucceeded:
		in.Status = payment.StatusCaptured
		if in.CapturedMinor, err = FromStripeAmount(pi.AmountReceived, currency); err != nil {
			return in, err
		}
		if in.RefundedMinor, err = FromStripeAmount(refunded, currency); err != nil {
			return in, err
		}
		if in.RefundedMinor >= in.CapturedMinor && in.CapturedMinor > 0 {
			in.Status = payment.StatusRefunded
		}
	case stripe.PaymentIntentStatusCanceled:
		in.Status = payment.StatusVoided
		if pi.CancellationReason == stripe.PaymentIntentCancellationReasonAutomatic ||
			pi.CancellationReason == stripe.PaymentIntentCancellationReasonExpired {
			in.DeclineCode = payment.DeclineAuthorizationExpired
		}
	default:
		return in, fmt.Errorf("stripe: intent %s in status %q: %w", pi.ID, pi.Status, payment.ErrInvalidState)
	}
	return in, nil
}

// stripeDigits are the currencies whose amounts Stripe takes in another unit than the ISO 4217
// minor unit: ISK and UGX are zero-decimal, yet Stripe takes them as if two-decimal (and
// divisible by 100).
var stripeDigits = map[string]int{"ISK": 2, "UGX": 2}

// ToStripeAmount converts minor units of currency (ISO 4217, internal/money) into the amount
// Stripe takes. Stripe refuses a three-decimal currency's amount that does not end in 0 (its
// payment partners settle in hundredths), so such an amount is refused here first.
func ToStripeAmount(minor int64, currency string) (int64, error) {
	iso, ok := money.Digits(currency)
	if !ok || minor <= 0 {
		return 0, fmt.Errorf("stripe: %w: a positive amount in an ISO 4217 currency", payment.ErrInvalidRequest)
	}
	if iso == 3 && minor%10 != 0 {
		return 0, fmt.Errorf("stripe: %w: Stripe takes %s amounts in multiples of 10 minor units (%s)", payment.ErrInvalidRequest,
			currency, money.FormatIn(minor, currency))
	}
	if d, ok := stripeDigits[currency]; ok {
		return minor * pow10(d-iso), nil
	}
	return minor, nil
}

// FromStripeAmount is ToStripeAmount's inverse.
func FromStripeAmount(amount int64, currency string) (int64, error) {
	iso, ok := money.Digits(currency)
	if !ok {
		return 0, fmt.Errorf("stripe: %w: currency %q", payment.ErrInvalidRequest, currency)
	}
	if d, ok := stripeDigits[currency]; ok {
		return amount / pow10(d-iso), nil
	}
	return amount, nil
}

func pow10(n int) int64 {
	p := int64(1)
	for range n {
		p *= 10
	}
	return p
}
