package stripepay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/payment"
	"github.com/marketplace/checkout/payment/stripepay"
)

// These are contract tests against stripe-mock, Stripe's own mock of its API: it checks every
// request against Stripe's API description (an unknown or malformed parameter is refused) and
// answers from its fixtures. It keeps no state, so these tests prove that the adapter's requests
// are Stripe's and that it reads Stripe's answers; the flows (lost answers, lag, expiry, keys)
// are proven against the simulator, which holds the same rules (payment/paysim, activities).

func TestMain(m *testing.M) { testenv.Main(m) }

// sent is one request the adapter made.
type sent struct {
	method, path, key string
	form              url.Values
}

// recorder passes requests to stripe-mock and keeps them.
type recorder struct {
	mu   sync.Mutex
	reqs []sent
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	form, _ := url.ParseQuery(string(body))
	if req.Method == http.MethodGet {
		form = req.URL.Query()
	}
	r.mu.Lock()
	r.reqs = append(r.reqs, sent{method: req.Method, path: req.URL.Path, key: req.Header.Get("Idempotency-Key"), form: form})
	r.mu.Unlock()
	return http.DefaultTransport.RoundTrip(req)
}

func (r *recorder) all() []sent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sent(nil), r.reqs...)
}

func newGateway(t *testing.T) (*stripepay.Gateway, *recorder) {
	t.Helper()
	rec := &recorder{}
	g := stripepay.New(stripepay.Options{SecretKey: "sk_test_123", APIURL: testenv.StripeMock(t),
		ReturnURL: "https://shop.example/orders/return", HTTPClient: &http.Client{Transport: rec, Timeout: 10 * time.Second}})
	return g, rec
}

func TestAuthorize_ManualCaptureIntentMadeThenConfirmed_KeyPerOperation(t *testing.T) {
	t.Parallel()
	cases := []struct {
		currency string
		minor    int64
		amount   string // as Stripe is sent it
	}{{"TRY", 124990, "124990"}, {"JPY", 3000, "3000"}, {"KWD", 24690, "24690"}}
	for _, c := range cases {
		g, rec := newGateway(t)
		var named string
		in, err := g.Authorize(context.Background(), payment.AuthorizeRequest{Ref: payment.Ref{Key: "order-42", OrderID: 42},
			OrderVersion: "pv_9f", AmountMinor: c.minor, Currency: c.currency, PaymentMethodToken: "pm_card_visa",
			Created: func(_ context.Context, id string) error { named = id; return nil }})
		require.NoError(t, err, c.currency)
		reqs := rec.all()
		require.Len(t, reqs, 2, c.currency)

		create := reqs[0]
		assert.Equal(t, "POST /v1/payment_intents", create.method+" "+create.path)
		assert.Equal(t, "order-42-authorize", create.key)
		assert.Equal(t, c.amount, create.form.Get("amount"), c.currency)
		assert.Equal(t, lower(c.currency), create.form.Get("currency"))
		assert.Equal(t, "manual", create.form.Get("capture_method"))
		assert.Equal(t, "42", create.form.Get("metadata[order_id]"))
		assert.Equal(t, "pv_9f", create.form.Get("metadata[order_version]"))
		assert.Equal(t, "order-42", create.form.Get("metadata[payment_key]"))
		assert.Equal(t, "authorize", create.form.Get("metadata[operation]"))
		assert.Empty(t, create.form.Get("confirm"), "made first, confirmed after")

		confirm := reqs[1]
		require.NotEmpty(t, named, "the id was handed over before the confirm")
		assert.Equal(t, "POST /v1/payment_intents/"+named+"/confirm", confirm.method+" "+confirm.path)
		assert.Equal(t, "order-42-confirm", confirm.key)
		assert.Equal(t, "pm_card_visa", confirm.form.Get("payment_method"))
		assert.Equal(t, "https://shop.example/orders/return", confirm.form.Get("return_url"))
		assert.NotEmpty(t, in.ID)
		assert.NotEmpty(t, in.Status, "the answer is read")
	}
}

func TestAuthorize_AmountsStripeWouldRefuse_RefusedBeforeAnyRequest(t *testing.T) {
	t.Parallel()
	g, rec := newGateway(t)
	for _, c := range []struct {
		currency string
		minor    int64
	}{{"KWD", 24695}, {"XYZ", 100}, {"TRY", 0}} {
		_, err := g.Authorize(context.Background(), payment.AuthorizeRequest{Ref: payment.Ref{Key: "order-1", OrderID: 1},
			AmountMinor: c.minor, Currency: c.currency, PaymentMethodToken: "pm_card_visa"})
		assert.ErrorIs(t, err, payment.ErrInvalidRequest, "%d %s", c.minor, c.currency)
	}
	assert.Empty(t, rec.all())
}

func TestMoneyMovingCalls_AreStripesRequests_UnderTheirOwnKeys(t *testing.T) {
	t.Parallel()
	g, rec := newGateway(t)
	ctx := context.Background()
	ref := payment.Ref{Key: "order-7", OrderID: 7, IntentID: "pi_123"}
	// stripe-mock answers from its fixtures whatever the intent's state: each call's request is
	// checked, and its answer read.
	_, err := g.Capture(ctx, ref)
	assert.NoError(t, err)
	_, err = g.Void(ctx, ref)
	assert.NoError(t, err)
	_, err = g.Refund(ctx, ref)
	assert.NoError(t, err)
	_, _ = g.RefundPart(ctx, ref, payment.PartialRefund{IdempotencyKey: "order-7-line-cancel-3", AmountMinor: 500})

	byPath := map[string]sent{}
	for _, r := range rec.all() {
		byPath[r.method+" "+r.path] = r
	}
	capture := byPath["POST /v1/payment_intents/pi_123/capture"]
	assert.Equal(t, "order-7-capture", capture.key)
	assert.Equal(t, "order-7-void", byPath["POST /v1/payment_intents/pi_123/cancel"].key)
	refunds := 0
	for _, r := range rec.all() {
		if r.method+" "+r.path == "POST /v1/refunds" {
			refunds++
			assert.Equal(t, "pi_123", r.form.Get("payment_intent"))
			assert.Equal(t, r.key, r.form.Get("metadata[refund_key]"), "the key is in the refund's metadata too")
		}
	}
	assert.GreaterOrEqual(t, refunds, 1)
	list := byPath["GET /v1/refunds"]
	assert.Equal(t, "pi_123", list.form.Get("payment_intent"), "a partial refund looks for its key among the intent's refunds first")
	for _, r := range rec.all() {
		if r.method == http.MethodPost {
			assert.NotEmpty(t, r.key, "%s %s carries an idempotency key", r.method, r.path)
		}
	}
}

func TestLookup_ByIDAndByMetadataSearch_ReadsStripesAnswer(t *testing.T) {
	t.Parallel()
	g, rec := newGateway(t)
	ctx := context.Background()
	byID, err := g.Lookup(ctx, payment.Ref{Key: "order-7", OrderID: 7, IntentID: "pi_123"})
	require.NoError(t, err)
	assert.Equal(t, "pi_123", byID.ID)
	assert.Equal(t, "USD", byID.Currency, "read back in the product's spelling")
	assert.Positive(t, byID.AmountMinor)
	assert.Equal(t, payment.StatusDeclined, byID.Status, "the fixture's requires_payment_method after a last_payment_error")

	_, err = g.Lookup(ctx, payment.Ref{Key: "order-7", OrderID: 7})
	// The fixture's intent carries no payment_key: the search's answer is not the order's.
	assert.ErrorIs(t, err, payment.ErrNotFound)
	var search sent
	for _, r := range rec.all() {
		if r.path == "/v1/payment_intents/search" {
			search = r
		}
	}
	assert.Equal(t, "metadata['payment_key']:'order-7'", search.form.Get("query"))
	assert.Equal(t, 24*time.Hour, g.Rules().KeyWindow)
	assert.Equal(t, time.Minute, g.Rules().SearchLag)
}

func TestWebhooks_StripeSignedEvent_VerifiedByStripeGo_ReadAsThePaymentEvent(t *testing.T) {
	t.Parallel()
	secret := "whsec_test_secret"
	body, err := json.Marshal(map[string]any{"id": "evt_1", "object": "event", "type": "payment_intent.amount_capturable_updated",
		"created": time.Now().Unix(), "api_version": "2025-08-27.basil", "data": map[string]any{"object": map[string]any{
			"id": "pi_9", "object": "payment_intent", "amount": 3000, "amount_received": 0, "currency": "jpy",
			"status": "requires_capture", "created": time.Now().Unix(),
			"metadata": map[string]string{"order_id": "42", "payment_key": "order-42"}}}})
	require.NoError(t, err)
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: time.Now()})
	w := stripepay.Webhooks{Secret: secret}
	h := http.Header{}
	h.Set(stripepay.SignatureHeader, signed.Header)
	ev, err := w.VerifyWebhook(body, h, time.Now())
	require.NoError(t, err)
	assert.Equal(t, "evt_1", ev.ID)
	assert.Equal(t, payment.EventAuthorized, ev.Type)
	assert.Equal(t, payment.Intent{ID: "pi_9", IdempotencyKey: "order-42", OrderID: 42, Status: payment.StatusAuthorized,
		AmountMinor: 3000, Currency: "JPY", CaptureBefore: ev.Intent.CaptureBefore}, ev.Intent)

	for name, hdr := range map[string]string{
		"another secret": webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: "whsec_other",
			Timestamp: time.Now()}).Header,
		"too old": webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret,
			Timestamp: time.Now().Add(-10 * time.Minute)}).Header,
		"none": "",
	} {
		h := http.Header{}
		h.Set(stripepay.SignatureHeader, hdr)
		_, err := w.VerifyWebhook(body, h, time.Now())
		assert.ErrorIs(t, err, payment.ErrInvalidSignature, name)
	}
}

func TestAmounts_ISOMinorUnitsToStripes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		currency      string
		minor, stripe int64
	}{{"TRY", 19990, 19990}, {"JPY", 1500, 1500}, {"KWD", 12340, 12340}, {"ISK", 1500, 150000}} {
		got, err := stripepay.ToStripeAmount(c.minor, c.currency)
		require.NoError(t, err, c.currency)
		assert.Equal(t, c.stripe, got, c.currency)
		back, err := stripepay.FromStripeAmount(got, c.currency)
		require.NoError(t, err)
		assert.Equal(t, c.minor, back, c.currency)
	}
	_, err := stripepay.ToStripeAmount(12345, "KWD")
	assert.ErrorIs(t, err, payment.ErrInvalidRequest)
}

func lower(s string) string { return string(bytes.ToLower([]byte(s))) }
