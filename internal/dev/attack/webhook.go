package attack

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/marketplace/checkout/payment"
)

const webhookPath = "/api/v1/payments/webhook"

// event is a payment event for the intent, as the provider writes one.
func (r *Run) event(intent string, status payment.Status) []byte {
	ev := payment.WebhookEvent{ID: fmt.Sprintf("evt_atk_%s_%08x", r.id, rand.Uint32()), Type: "payment_intent.updated",
		Created: time.Now().UTC(), Intent: payment.Intent{ID: intent, Status: status, AmountMinor: 1000, Currency: "TRY"}}
	raw, _ := json.Marshal(ev)
	return raw
}

// webhook posts body with the signature given (none when empty) and headers.
func (r *Run) webhook(ctx context.Context, body []byte, signature string, headers ...string) (answer, error) {
	if signature != "" {
		headers = append(headers, payment.SignatureHeader, signature)
	}
	return r.call(ctx, http.MethodPost, webhookPath, "", body, headers...)
}

func (r *Run) signed(body []byte, at time.Time) string {
	return payment.Sign([]byte(r.T.WebhookSecret), body, at)
}

var webhookAttacks = []Attack{
	{Name: "webhook-unsigned", Kind: KindWebhook, What: "a payment event without a signature is refused (401, or 429 past the limit)",
		Run: func(ctx context.Context, r *Run) Outcome {
			a, err := r.webhook(ctx, r.event("pi_atk_unsigned", payment.StatusAuthorized), "")
			return anyRefusal(a, err, signatureRefused...)
		}},
	{Name: "webhook-wrong-secret", Kind: KindWebhook, What: "a payment event signed with another secret is refused",
		Run: func(ctx context.Context, r *Run) Outcome {
			body := r.event("pi_atk_wrong", payment.StatusAuthorized)
			a, err := r.webhook(ctx, body, payment.Sign([]byte("not-the-provider-secret-0123456789abcdef"), body, time.Now()))
			return anyRefusal(a, err, signatureRefused...)
		}},
	{Name: "webhook-tampered-body", Kind: KindWebhook, What: "a valid signature of one event sent with another body is refused",
		Run: func(ctx context.Context, r *Run) Outcome {
			sig := r.signed(r.event("pi_atk_a", payment.StatusDeclined), time.Now())
			a, err := r.webhook(ctx, r.event("pi_atk_a", payment.StatusAuthorized), sig)
			return anyRefusal(a, err, signatureRefused...)
		}},
	{Name: "webhook-stale-signature", Kind: KindWebhook, What: "an event signed an hour ago (a replay of an old delivery) is refused",
		Run: func(ctx context.Context, r *Run) Outcome {
			body := r.event("pi_atk_stale", payment.StatusAuthorized)
			a, err := r.webhook(ctx, body, r.signed(body, time.Now().Add(-time.Hour)))
			return anyRefusal(a, err, signatureRefused...)
		}},
	{Name: "webhook-replay", Kind: KindWebhook, What: "the same signed event delivered twice is acted on once (the second says duplicate)",
		Run: func(ctx context.Context, r *Run) Outcome {
			body := r.event("pi_atk_replay", payment.StatusAuthorized)
			sig := r.signed(body, time.Now())
			first, err := r.webhook(ctx, body, sig)
			if err != nil || first.status != http.StatusOK {
				return fail("first delivery: %v %s", err, first)
			}
			again, err := r.webhook(ctx, body, sig)
			if err != nil || again.status != http.StatusOK || again.at("duplicate") != true {
				return fail("want 200 duplicate:true for the replay: %v %s", err, again)
			}
			return pass("200, then 200 duplicate")
		}},
	{Name: "webhook-unknown-intent", Kind: KindWebhook, What: "a signed event for an intent the checkout never created is acknowledged and changes nothing",
		Run: withOrder(func(ctx context.Context, r *Run, f *fixtures) Outcome {
			body := r.event("pi_atk_nobody_"+r.id, payment.StatusCaptured)
			a, err := r.webhook(ctx, body, r.signed(body, time.Now()))
			if err != nil || a.status != http.StatusOK || a.at("received") != true {
				return fail("want 200 received: %v %s", err, a)
			}
			return r.stillPending(ctx, f, pass("200 acknowledged; nothing moved"))
		})},
	{Name: "webhook-status-not-trusted", Kind: KindWebhook, Long: true,
		What: "a signed event claiming an order's intent is paid, which the provider does not back, leaves the order waiting",
		Run: withOrder(func(ctx context.Context, r *Run, f *fixtures) Outcome {
			body := r.event(f.intent, payment.StatusAuthorized)
			a, err := r.webhook(ctx, body, r.signed(body, time.Now()))
			if err != nil || a.status != http.StatusOK {
				return fail("delivery: %v %s", err, a)
			}
			// The order asks the provider, which still waits for 3-D Secure: nothing may move.
			deadline := time.Now().Add(4 * time.Second)
			for time.Now().Before(deadline) {
				status, err := r.orderStatus(ctx, f.a, f.order)
				if err != nil {
					return failed("reading the order", err)
				}
				if status != "PENDING_PAYMENT" {
					return fail("the order became %s on an event the provider does not back", status)
				}
				time.Sleep(500 * time.Millisecond)
			}
			return pass("200; the order still waits for its payment")
		})},
	{Name: "webhook-lockout", Kind: KindWebhook,
		What: "after an address's bad signatures pass their limit, a valid event from that address is still read (no lockout)",
		Run: func(ctx context.Context, r *Run) Outcome {
			limited := false
			for i := 0; i < 300 && !limited; i++ {
				body := r.event("pi_atk_lockout", payment.StatusAuthorized)
				a, err := r.webhook(ctx, body, payment.Sign([]byte("not-the-provider-secret-0123456789abcdef"), body, time.Now()))
				if err != nil {
					return failed("bad signature", err)
				}
				if out := anyRefusal(a, nil, signatureRefused...); out.Verdict != Pass {
					return out
				}
				limited = a.status == http.StatusTooManyRequests
			}
			if !limited {
				return fail("300 bad signatures from one address were never limited")
			}
			body := r.event("pi_atk_lockout_good_"+r.id, payment.StatusAuthorized)
			a, err := r.webhook(ctx, body, r.signed(body, time.Now()))
			if err != nil || a.status != http.StatusOK {
				return fail("a valid event after the limit: want 200, got %v %s", err, a)
			}
			return pass("bad signatures 429 past the limit; a valid event 200")
		}},
}
