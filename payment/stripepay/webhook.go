package stripepay

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/marketplace/checkout/payment"
)

// SignatureHeader carries Stripe's webhook signature ("t=<unix>,v1=<hex>").
const SignatureHeader = "Stripe-Signature"

// Webhooks verifies the events of a Stripe webhook endpoint with stripe-go's own check (HMAC of
// the timestamp and the body under the endpoint's signing secret, within Tolerance) and reads the
// PaymentIntent they carry. The event's API version is not required to be stripe-go's: the order
// never acts on an event's word, only on the intent it then reads from Stripe by id with this
// library's version (the saga's VerifyEvent).
type Webhooks struct {
	// Secret is the endpoint's signing secret (whsec_…).
	Secret string
	// Tolerance bounds the age of a signature (a replay window); zero: stripe-go's default, five
	// minutes.
	Tolerance time.Duration
}

// VerifyWebhook reads a delivery: payment.ErrInvalidSignature when its signature is missing,
// wrong or too old; an event with no intent when it is no payment_intent.* event (which the
// endpoint should not be subscribed to).
func (w Webhooks) VerifyWebhook(body []byte, header http.Header, _ time.Time) (payment.WebhookEvent, error) {
	tol := w.Tolerance
	if tol <= 0 {
		tol = webhook.DefaultTolerance
	}
	ev, err := webhook.ConstructEventWithOptions(body, header.Get(SignatureHeader), w.Secret,
		webhook.ConstructEventOptions{Tolerance: tol, IgnoreAPIVersionMismatch: true})
	if err != nil {
		return payment.WebhookEvent{}, fmt.Errorf("%w: %w", payment.ErrInvalidSignature, err)
	}
	out := payment.WebhookEvent{ID: ev.ID, Type: string(ev.Type), Created: time.Unix(ev.Created, 0).UTC()}
	if !strings.HasPrefix(string(ev.Type), "payment_intent.") || ev.Data == nil {
		return out, nil
	}
	var pi stripe.PaymentIntent
	if err := json.Unmarshal(ev.Data.Raw, &pi); err != nil {
		return out, fmt.Errorf("stripe: event %s: %w", ev.ID, err)
	}
	if out.Intent, err = toIntent(&pi); err != nil {
		return out, err
	}
	switch ev.Type {
	case "payment_intent.amount_capturable_updated":
		out.Type = payment.EventAuthorized
	case "payment_intent.payment_failed":
		out.Type = payment.EventDeclined
	}
	return out, nil
}
