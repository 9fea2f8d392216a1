package e2e_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/marketplace/checkout/payment/stripepay"
)

// TestStripe_OrderThroughTheAdapterAgainstStripeMock_WebhooksSignedByStripe runs the stack on the
// Stripe adapter, against stripe-mock: the order's authorization goes out as Stripe's requests
// and its answer is read back. stripe-mock answers every confirm from its fixture — an intent
// that needs a new payment method after a failed payment — so the order is refused as declined,
// its stock back, its payment row Stripe's intent. The webhook endpoint takes Stripe's signature
// (stripe-go's check) and refuses any other.
func TestStripe_OrderThroughTheAdapterAgainstStripeMock_WebhooksSignedByStripe(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{stripeMock: true})
	sh := s.shopper(9401)
	sh.fill(map[int64]int32{72: 1})
	before := s.scalar(`SELECT reserved FROM inventory WHERE sku_id = 72 AND warehouse_id = 1`)
	r := sh.order("stripe-"+randomHex(6), sh.preview(), "pm_card_visa")
	require.Equal(t, http.StatusPaymentRequired, r.status, r.raw)
	assert.Equal(t, "PAYMENT_DECLINED", r.str("code"))
	id := r.int("orderId")
	assert.Equal(t, "FAILED", s.waitFinal(sh.token, id, 30*time.Second).str("status"))
	assert.Equal(t, before, s.scalar(`SELECT reserved FROM inventory WHERE sku_id = 72 AND warehouse_id = 1`), "stock back")
	var status, intent string
	require.NoError(t, s.pool.QueryRow(s.ctx, `SELECT status, coalesce(intent_id, '') FROM payments WHERE order_id = $1`, id).
		Scan(&status, &intent))
	assert.Equal(t, "DECLINED", status)
	assert.Regexp(t, `^pi_`, intent, "Stripe's intent, recorded before it was confirmed")

	body, err := json.Marshal(map[string]any{"id": "evt_" + randomHex(6), "object": "event", "type": "payment_intent.succeeded",
		"created": time.Now().Unix(), "data": map[string]any{"object": map[string]any{"id": "pi_unknown", "object": "payment_intent",
			"amount": 100, "currency": "try", "status": "succeeded", "metadata": map[string]string{}}}})
	require.NoError(t, err)
	post := func(header string) reply {
		req, err := http.NewRequestWithContext(s.ctx, http.MethodPost, s.base+"/api/v1/payments/webhook", bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(stripepay.SignatureHeader, header)
		return s.do(req)
	}
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: s.cfg.PaymentWebhookSecret,
		Timestamp: time.Now()})
	ok := post(signed.Header)
	assert.Equal(t, http.StatusOK, ok.status, ok.raw)
	assert.Equal(t, fmt.Sprint(false), fmt.Sprint(ok.body["duplicate"]))
	again := post(signed.Header)
	assert.Equal(t, true, again.body["duplicate"], "an event is acted on once: %s", again.raw)
	forged := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: "whsec_someone_else",
		Timestamp: time.Now()})
	assert.Equal(t, http.StatusUnauthorized, post(forged.Header).status)
}
