package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/payment"
	"github.com/marketplace/checkout/workflows"
)

func TestOrder_3DSApproved_ConfirmedWithStockAndMoney(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	sh := s.shopper(7001)
	sh.fill(map[int64]int32{71: 2, 88: 3})
	pv := sh.preview()

	key := "k-" + randomHex(8)
	r := sh.order(key, pv, "tok_3ds")
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	assert.Equal(t, "PENDING_PAYMENT", r.str("status"))
	assert.Equal(t, "REQUIRES_ACTION", r.str("payment", "status"))
	assert.NotEmpty(t, r.str("holdExpiresAt"))
	id := r.int("orderId")

	page := s.answer3DS(r.str("payment", "redirectUrl"), "approve")
	require.Equal(t, http.StatusOK, page.status, page.raw)
	final := s.waitFinal(sh.token, id, 30*time.Second)
	assert.Equal(t, "CONFIRMED", final.str("status"), final.raw)
	assert.Equal(t, "CAPTURED", final.str("payment", "status"))
	assert.Equal(t, final.str("total"), final.str("payment", "captured"), "captured exactly the total")
	assert.Equal(t, int64(2), s.scalar(`SELECT count(*) FROM stock_reservations WHERE order_id = $1 AND status = 'CONFIRMED'`, id))
	assert.Zero(t, s.scalar(`SELECT COALESCE(sum(reserved), 0) FROM inventory`))
	assert.Equal(t, int64(80-2), s.scalar(`SELECT sum(on_hand) FROM inventory WHERE sku_id = 71`))
	s.recordHistory("confirmed-3ds", sh.workflowOf(key))
	s.recordHistory("confirmed-3ds-hold", workflows.HoldWorkflowID(id))
}

func TestOrder_3DSDeclinedAndImmediateDecline_FailedStockBack(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	sh := s.shopper(7002)
	sh.fill(map[int64]int32{72: 1})
	pv := sh.preview()

	key := "k-" + randomHex(8)
	r := sh.order(key, pv, "tok_3ds")
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	require.Equal(t, http.StatusOK, s.answer3DS(r.str("payment", "redirectUrl"), "decline").status)
	final := s.waitFinal(sh.token, r.int("orderId"), 30*time.Second)
	assert.Equal(t, "FAILED", final.str("status"))
	assert.Equal(t, "PAYMENT_DECLINED", final.str("failureCode"))
	s.recordHistory("declined-3ds", sh.workflowOf(key))

	dkey := "k-" + randomHex(8)
	d := sh.order(dkey, pv, "tok_decline")
	require.Equal(t, http.StatusPaymentRequired, d.status, d.raw)
	assert.Equal(t, "PAYMENT_DECLINED", d.str("code"))
	assert.Zero(t, s.scalar(`SELECT COALESCE(sum(reserved), 0) FROM inventory`), "the stock is already back when the 402 arrives")
	assert.Equal(t, int64(30), s.scalar(`SELECT sum(on_hand) FROM inventory WHERE sku_id = 72`))
	s.recordHistory("declined-at-once", sh.workflowOf(dkey))
}

func TestOrder_HoldExpires_FailedStockBackAndLatePaymentVoided(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{hold: 2 * time.Second})
	sh := s.shopper(7003)
	sh.fill(map[int64]int32{73: 1})
	key := "k-" + randomHex(8)
	r := sh.order(key, sh.preview(), "tok_3ds")
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	id := r.int("orderId")

	final := s.waitFinal(sh.token, id, 60*time.Second)
	assert.Equal(t, "FAILED", final.str("status"))
	assert.Equal(t, "HOLD_EXPIRED", final.str("failureCode"))
	assert.Zero(t, s.scalar(`SELECT COALESCE(sum(reserved), 0) FROM inventory`))
	assert.Equal(t, "VOIDED", final.str("payment", "status"))

	late := s.answer3DS(r.str("payment", "redirectUrl"), "approve")
	assert.Equal(t, http.StatusConflict, late.status, "the provider refuses a late approval of a voided payment")
	time.Sleep(300 * time.Millisecond)
	again := s.waitFinal(sh.token, id, time.Second)
	assert.Equal(t, "FAILED", again.str("status"))
	assert.Zero(t, s.scalar(`SELECT captured_minor FROM payments WHERE order_id = $1`, id), "no money kept without goods")
	s.recordHistory("hold-expired", sh.workflowOf(key))
	s.recordHistory("hold-expired-hold", workflows.HoldWorkflowID(id))
}

func TestOrder_Idempotency(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	sh := s.shopper(7004)
	sh.fill(map[int64]int32{74: 1})
	pv := sh.preview()

	missing := s.call(http.MethodPost, "/api/v1/orders", sh.token, nil,
		map[string]any{"priceVersion": pv, "addressId": sh.address, "paymentMethodToken": "tok_ok"})
	assert.Equal(t, http.StatusBadRequest, missing.status, missing.raw)

	key := "double-click-" + randomHex(6)
	var wg sync.WaitGroup
	replies := make([]reply, 10)
	for i := range replies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies[i] = sh.order(key, pv, "tok_3ds")
		}()
	}
	wg.Wait()
	for _, r := range replies {
		require.Equal(t, http.StatusCreated, r.status, r.raw)
		assert.Equal(t, replies[0].int("orderId"), r.int("orderId"), "one order")
		assert.Equal(t, replies[0].str("payment", "redirectUrl"), r.str("payment", "redirectUrl"))
	}
	id := replies[0].int("orderId")
	assert.Equal(t, int64(1), s.scalar(`SELECT count(*) FROM orders WHERE user_id = $1`, sh.id))
	assert.Equal(t, int64(1), s.scalar(`SELECT count(*) FROM stock_reservations WHERE order_id = $1`, id), "one reservation set")
	assert.Equal(t, int64(1), s.scalar(`SELECT count(*) FROM paysim.intents WHERE order_id = $1`, id), "one authorization")

	other := sh.order(key, pv, "tok_ok")
	assert.Equal(t, http.StatusUnprocessableEntity, other.status, other.raw)
	assert.Equal(t, "IDEMPOTENCY_KEY_REUSED", other.str("code"))

	require.Equal(t, http.StatusOK, s.answer3DS(replies[0].str("payment", "redirectUrl"), "approve").status)
	s.waitFinal(sh.token, id, 30*time.Second)
	after := sh.order(key, pv, "tok_3ds")
	assert.Equal(t, http.StatusCreated, after.status, "the same answer after the order completed")
	assert.Equal(t, replies[0].raw, after.raw)
	assert.Equal(t, "true", after.header.Get("Idempotent-Replayed"))
	assert.Equal(t, int64(1), s.scalar(`SELECT count(*) FROM orders WHERE user_id = $1`, sh.id))

	// A key whose answer was never recorded (the first answer was "try again", or recording it
	// failed), its workflow closed: another body is refused, and the key stays its order's.
	_, err := s.pool.Exec(s.ctx, `DELETE FROM idempotency_records WHERE user_id = $1 AND idempotency_key = $2`, sh.id, key)
	require.NoError(t, err)
	other = sh.order(key, pv, "tok_ok")
	assert.Equal(t, http.StatusUnprocessableEntity, other.status, other.raw)
	again := sh.order(key, pv, "tok_3ds")
	assert.Equal(t, http.StatusCreated, again.status, "the key's own request still gets its order: %s", again.raw)
	assert.Equal(t, id, again.int("orderId"))
	assert.Equal(t, int64(1), s.scalar(`SELECT count(*) FROM orders WHERE user_id = $1`, sh.id))
}

func TestOrder_PriceChangedAndOutOfStock_NothingReservedNothingCharged(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	sh := s.shopper(7005)
	sh.fill(map[int64]int32{81: 1, 75: 2})
	pv := sh.preview()
	seller := s.seller(42)
	up := s.call(http.MethodPut, "/seller-api/v1/skus", seller, nil, []map[string]any{{"sku": "S-75", "title": "Powerbank",
		"price": "799.00", "currency": "TRY", "maxPerOrder": 5}})
	require.Equal(t, http.StatusOK, up.status, up.raw)

	pkey := "k-" + randomHex(8)
	r := sh.order(pkey, pv, "tok_ok")
	require.Equal(t, http.StatusConflict, r.status, r.raw)
	assert.Equal(t, "PRICE_CHANGED", r.str("code"))
	s.recordHistory("price-changed", sh.workflowOf(pkey))
	newPV := r.str("priceVersion")
	assert.NotEqual(t, pv, newPV)
	assert.Zero(t, s.scalar(`SELECT count(*) FROM orders`))

	// Someone else takes the last retro radio first.
	other := s.shopper(7006)
	other.fill(map[int64]int32{81: 1})
	first := other.order("k-"+randomHex(8), other.preview(), "tok_3ds")
	require.Equal(t, http.StatusCreated, first.status, first.raw)

	okey := "k-" + randomHex(8)
	oos := sh.order(okey, newPV, "tok_ok")
	require.Equal(t, http.StatusConflict, oos.status, oos.raw)
	assert.Equal(t, "OUT_OF_STOCK", oos.str("code"))
	assert.Equal(t, []any{map[string]any{"skuId": float64(81), "requested": float64(1), "available": float64(0)}}, oos.body["items"])
	assert.Zero(t, s.scalar(`SELECT count(*) FROM paysim.intents WHERE order_id = $1`, oos.int("orderId")), "nothing charged")
	assert.Equal(t, int64(1), s.scalar(`SELECT COALESCE(sum(reserved), 0) FROM inventory`), "only the first buyer's unit is held")
	s.recordHistory("out-of-stock", sh.workflowOf(okey))
}

func TestOrder_CancelBeforeAndAfterConfirmation(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	sh := s.shopper(7007)
	sh.fill(map[int64]int32{76: 1})
	pv := sh.preview()
	key := "k-" + randomHex(8)
	r := sh.order(key, pv, "tok_3ds")
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	id := r.int("orderId")

	stranger := s.shopper(7008)
	assert.Equal(t, http.StatusNotFound, s.call(http.MethodGet, fmt.Sprintf("/api/v1/orders/%d", id), stranger.token, nil, nil).status)
	assert.Equal(t, http.StatusNotFound, s.call(http.MethodPost, fmt.Sprintf("/api/v1/orders/%d/cancel", id), stranger.token, nil, nil).status)
	assert.Equal(t, http.StatusOK, s.call(http.MethodGet, fmt.Sprintf("/api/v1/orders/%d", id), s.support(), nil, nil).status)

	c := s.call(http.MethodPost, fmt.Sprintf("/api/v1/orders/%d/cancel", id), sh.token, nil, nil)
	require.Equal(t, http.StatusOK, c.status, c.raw)
	assert.Equal(t, "CANCELLED", c.str("status"))
	assert.Zero(t, s.scalar(`SELECT COALESCE(sum(reserved), 0) FROM inventory`))
	assert.Equal(t, "VOIDED", s.waitFinal(sh.token, id, 10*time.Second).str("payment", "status"))
	again := s.call(http.MethodPost, fmt.Sprintf("/api/v1/orders/%d/cancel", id), sh.token, nil, nil)
	assert.Equal(t, http.StatusOK, again.status, "a repeat of the shopper's cancel gets the same answer: %s", again.raw)
	assert.Equal(t, "CANCELLED", again.str("status"))
	s.recordHistory("cancelled", sh.workflowOf(key))

	okKey := "k-" + randomHex(8)
	ok := sh.order(okKey, pv, "tok_ok")
	require.Equal(t, http.StatusCreated, ok.status, ok.raw)
	s.waitFinal(sh.token, ok.int("orderId"), 30*time.Second)
	s.recordHistory("confirmed-at-once", sh.workflowOf(okKey))
	late := s.call(http.MethodPost, fmt.Sprintf("/api/v1/orders/%d/cancel", ok.int("orderId")), sh.token, nil, nil)
	assert.Equal(t, http.StatusConflict, late.status, late.raw)
	assert.Equal(t, "ORDER_NOT_CANCELLABLE", late.str("code"))

	list := s.call(http.MethodGet, "/api/v1/orders?limit=1", sh.token, nil, nil)
	require.Equal(t, http.StatusOK, list.status)
	orders := list.body["orders"].([]any)
	require.Len(t, orders, 1)
	assert.Equal(t, float64(ok.int("orderId")), orders[0].(map[string]any)["orderId"], "newest first")
	next := list.str("nextCursor")
	require.NotEmpty(t, next)
	page2 := s.call(http.MethodGet, "/api/v1/orders?limit=1&cursor="+next, sh.token, nil, nil)
	assert.Equal(t, float64(id), page2.body["orders"].([]any)[0].(map[string]any)["orderId"])
}

// webhook posts a payment event signed with secret, as the provider posts it.
func (s *stack) webhook(body []byte, secret string) reply {
	s.t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.base+"/api/v1/payments/webhook", bytesReader(body))
	require.NoError(s.t, err)
	req.Header.Set(payment.SignatureHeader, payment.Sign([]byte(secret), body, time.Now()))
	return s.do(req)
}

// awaiting3DS places a one-unit order of sku paid with tok_3ds: the order waits for the shopper's
// 3-D Secure answer. It returns the shopper, the order's answer, its id and its intent.
func (s *stack) awaiting3DS(user, sku int64) (*shopper, reply, int64, string) {
	s.t.Helper()
	sh := s.shopper(user)
	sh.fill(map[int64]int32{sku: 1})
	r := sh.order("k-"+randomHex(8), sh.preview(), "tok_3ds")
	require.Equal(s.t, http.StatusCreated, r.status, r.raw)
	return sh, r, r.int("orderId"), intentRe.FindStringSubmatch(r.str("payment", "redirectUrl"))[1]
}

func TestWebhook_BadSignatureRefusedAndReplayHasNoSecondEffect(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	sh, r, id, intent := s.awaiting3DS(7009, 78)

	body := []byte(fmt.Sprintf(`{"id":"evt_forged","type":"payment_intent.authorized","created":"%s","intent":{"id":"%s","status":"AUTHORIZED","idempotencyKey":"order-%d"}}`,
		time.Now().UTC().Format(time.RFC3339), intent, id))
	bad := s.webhook(body, "not-the-secret-at-all")
	assert.Equal(t, http.StatusUnauthorized, bad.status)
	assert.Equal(t, "INVALID_SIGNATURE", bad.str("code"))
	time.Sleep(200 * time.Millisecond)
	assert.Equal(t, "PENDING_PAYMENT", s.call(http.MethodGet, fmt.Sprintf("/api/v1/orders/%d", id), sh.token, nil, nil).str("status"),
		"a forged webhook changes nothing")

	require.Equal(t, http.StatusOK, s.answer3DS(r.str("payment", "redirectUrl"), "approve").status)
	final := s.waitFinal(sh.token, id, 30*time.Second)
	require.Equal(t, "CONFIRMED", final.str("status"))
	var evtID string
	var evtBody []byte
	require.NoError(t, s.pool.QueryRow(s.ctx, `SELECT id, payload FROM paysim.webhook_events WHERE intent_id = $1`, intent).Scan(&evtID, &evtBody))
	body = evtBody
	replayed := s.webhook(body, s.cfg.PaymentWebhookSecret)
	assert.Equal(t, http.StatusOK, replayed.status, replayed.raw)
	assert.Equal(t, true, replayed.body["duplicate"])
	assert.Equal(t, int64(1), s.scalar(`SELECT count(*) FROM payment_webhook_events WHERE intent_id = $1`, intent))
	assert.Equal(t, final.str("payment", "captured"), s.waitFinal(sh.token, id, time.Second).str("payment", "captured"), "captured once")
}

// TestWebhook_SignedButNotBackedByTheProvider_NotActedOn: a correctly signed event (a leaked
// secret, or a confused provider) is not taken on its word. One naming an intent the checkout never
// created is acknowledged and goes nowhere; one naming the order's intent with a status the
// provider does not hold is checked with the provider by the order, which acts on the provider's
// status only.
func TestWebhook_SignedButNotBackedByTheProvider_NotActedOn(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	sh, r, id, intent := s.awaiting3DS(7021, 78)
	signed := func(evt, intentID, status string) reply {
		return s.webhook([]byte(fmt.Sprintf(`{"id":"%s","type":"payment_intent.%s","created":"%s","intent":{"id":"%s","status":"%s","idempotencyKey":"order-%d","orderId":%d,"amountMinor":1}}`,
			evt, strings.ToLower(status), time.Now().UTC().Format(time.RFC3339), intentID, status, id, id)), s.cfg.PaymentWebhookSecret)
	}
	updated := func() time.Time {
		var at time.Time
		require.NoError(t, s.pool.QueryRow(s.ctx, `SELECT updated_at FROM payments WHERE order_id = $1`, id).Scan(&at))
		return at
	}

	assert.Zero(t, s.scalar(`SELECT count(*) FROM payment_method_tokens WHERE user_id = 7021`),
		"the provider answered definitely (3-D Secure needed): the card token is forgotten")

	made := signed("evt_made_up", "pi_made_up", "AUTHORIZED")
	require.Equal(t, http.StatusOK, made.status, made.raw)
	assert.Equal(t, false, made.body["duplicate"])

	for _, claim := range []string{"DECLINED", "AUTHORIZED"} {
		before := updated()
		got := signed("evt_claims_"+claim, intent, claim)
		require.Equal(t, http.StatusOK, got.status, got.raw)
		require.Eventually(t, func() bool { return updated().After(before) }, 20*time.Second, 50*time.Millisecond,
			"the order asked the provider about the event claiming %s", claim)
		o := s.call(http.MethodGet, fmt.Sprintf("/api/v1/orders/%d", id), sh.token, nil, nil)
		assert.Equal(t, "PENDING_PAYMENT", o.str("status"), "an event claiming %s changed nothing", claim)
		assert.Equal(t, "REQUIRES_ACTION", o.str("payment", "status"), "the provider's status is the one kept")
	}

	require.Equal(t, http.StatusOK, s.answer3DS(r.str("payment", "redirectUrl"), "approve").status)
	assert.Equal(t, "CONFIRMED", s.waitFinal(sh.token, id, 30*time.Second).str("status"),
		"the shopper's real approval still confirms the order")
}

// TestWebhook_LateAuthorizationOfAClosedOrder_Reversed: an order gave up (here refused out of
// stock, so its compensation found nothing at the provider), and the provider authorizes its key
// afterwards — a late answer to a call the order no longer waits for. The signed webhook finds the
// order's workflow closed; the payment is recorded and reversed, and no money stays held.
func TestWebhook_LateAuthorizationOfAClosedOrder_Reversed(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	sku := s.proofSKU("LATE", 0)
	sh := s.shopper(7020)
	sh.fill(map[int64]int32{sku: 1})
	r := sh.order("k-"+randomHex(8), sh.preview(), "tok_3ds")
	require.Equal(t, http.StatusConflict, r.status, r.raw)
	id := r.int("orderId")
	require.NotZero(t, id)
	require.Equal(t, "FAILED", s.waitFinal(sh.token, id, 10*time.Second).str("status"))

	intent, err := s.sim.Authorize(s.ctx, payment.AuthorizeRequest{Ref: payment.Ref{Key: fmt.Sprintf("order-%d", id), OrderID: id}, AmountMinor: 10000, Currency: "TRY", PaymentMethodToken: "tok_3ds"})
	require.NoError(t, err)
	_, err = s.sim.Approve(s.ctx, intent.ID) // the provider sends its signed webhook
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		i, err := s.sim.Lookup(s.ctx, payment.Ref{Key: fmt.Sprintf("order-%d", id), OrderID: id})
		return err == nil && i.Status == payment.StatusVoided
	}, 60*time.Second, 100*time.Millisecond, "the late authorization is voided")
	require.Eventually(t, func() bool {
		return s.call(http.MethodGet, fmt.Sprintf("/api/v1/orders/%d", id), sh.token, nil, nil).str("payment", "status") == "VOIDED"
	}, 10*time.Second, 100*time.Millisecond)
	assert.Equal(t, "FAILED", s.waitFinal(sh.token, id, time.Second).str("status"), "the order stays failed")
	s.recordHistory("late-webhook-reversal", workflows.LatePaymentWorkflowID(id))
}

// lookupDown is a provider that cannot be asked about a payment until a time (unix nanoseconds).
type lookupDown struct {
	payment.Gateway
	until *atomic.Int64
}

func (g lookupDown) Lookup(ctx context.Context, key payment.Ref) (payment.Intent, error) {
	if time.Now().UnixNano() < g.until.Load() {
		return payment.Intent{}, payment.ErrUnavailable
	}
	return g.Gateway.Lookup(ctx, key)
}

// TestOrder_PaymentOutcomeUnknown_SettledWhileTheOrderWaits: the authorization times out and the
// provider cannot be asked for a while; the shopper gets 201 with the payment UNKNOWN, the order
// waits with its hold, and the server's retries settle the outcome once the provider answers.
func TestOrder_PaymentOutcomeUnknown_SettledWhileTheOrderWaits(t *testing.T) {
	t.Parallel()
	var until atomic.Int64
	s := startStack(t, stackOptions{hold: 2 * time.Minute, gateway: func(g payment.Gateway) payment.Gateway {
		return lookupDown{Gateway: g, until: &until}
	}})
	sh := s.shopper(7030)
	sh.fill(map[int64]int32{75: 1})
	key := "k-" + randomHex(8)
	pv := sh.preview()
	until.Store(time.Now().Add(3 * time.Second).UnixNano())
	r := sh.order(key, pv, "tok_timeout")
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	assert.Equal(t, "UNKNOWN", r.str("payment", "status"), "not guessed")
	id := r.int("orderId")
	final := s.waitFinal(sh.token, id, 90*time.Second)
	assert.Equal(t, "CONFIRMED", final.str("status"), final.raw)
	assert.Equal(t, "CAPTURED", final.str("payment", "status"))
	s.recordHistory("payment-unknown", sh.workflowOf(key))
	s.recordHistory("payment-unknown-hold", workflows.HoldWorkflowID(id))
}
