package e2e_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// coupon makes a coupon through the ops API.
func (s *stack) coupon(body map[string]any) {
	s.t.Helper()
	body["endsAt"] = time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	r := s.call(http.MethodPost, "/api/v1/ops/coupons", s.ops(), nil, body)
	require.Equal(s.t, http.StatusCreated, r.status, r.raw)
}

// previewWith previews the cart with a coupon code and returns the answer.
func (sh *shopper) previewWith(code string) reply {
	r := sh.s.call(http.MethodPost, "/api/v1/checkout/preview", sh.token, nil, map[string]any{"couponCode": code})
	require.Equal(sh.s.t, http.StatusOK, r.status, r.raw)
	return r
}

func (sh *shopper) orderWith(key, priceVersion, token, code string) reply {
	return sh.s.call(http.MethodPost, "/api/v1/orders", sh.token, []string{"Idempotency-Key", key},
		map[string]any{"priceVersion": priceVersion, "addressId": sh.address, "paymentMethodToken": token, "couponCode": code})
}

// TestCoupon_OneRedemption50ShoppersAtOnce_ExactlyOneGetsIt: fifty shoppers, each shown the
// coupon as applying, order at once with a coupon of one redemption: exactly one order is placed
// with the discount; every other is refused (409 COUPON_NOT_APPLICABLE, the one answer for a coupon
// that cannot apply) and keeps nothing reserved.
func TestCoupon_OneRedemption50ShoppersAtOnce_ExactlyOneGetsIt(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	s.coupon(map[string]any{"code": "ONLY-ONE", "kind": "FIXED", "value": "100.00", "currency": "TRY", "maxRedemptions": 1})
	const n = 50
	type attempt struct {
		sh      *shopper
		pv, key string
		res     reply
	}
	attempts := make([]*attempt, n)
	for i := range attempts {
		sh := s.shopper(int64(7100 + i))
		sh.fill(map[int64]int32{88: 1})
		p := sh.previewWith("only-one")
		require.Equal(t, true, p.body["coupon"].(map[string]any)["applies"], p.raw)
		assert.Equal(t, "349.90", p.str("total"), "449.90 less 100.00")
		attempts[i] = &attempt{sh: sh, pv: p.str("priceVersion"), key: "k-" + randomHex(8)}
	}
	var wg sync.WaitGroup
	for _, a := range attempts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.res = a.sh.orderWith(a.key, a.pv, "tok_ok", "only-one")
		}()
	}
	wg.Wait()
	codes := map[string]int{}
	var winner *attempt
	for _, a := range attempts {
		switch a.res.status {
		case http.StatusCreated:
			codes["201"]++
			winner = a
		case http.StatusConflict:
			codes[a.res.str("code")]++
		default:
			t.Errorf("shopper %d: %d %s", a.sh.id, a.res.status, a.res.raw)
		}
	}
	assert.Equal(t, map[string]int{"201": 1, "COUPON_NOT_APPLICABLE": n - 1}, codes)
	require.NotNil(t, winner)
	final := s.waitFinal(winner.sh.token, winner.res.int("orderId"), 30*time.Second)
	assert.Equal(t, "CONFIRMED", final.str("status"), final.raw)
	assert.Equal(t, "349.90", final.str("payment", "captured"))
	assert.Zero(t, s.scalar(`SELECT COALESCE(sum(reserved), 0) FROM inventory`), "the refused orders hold nothing")
	assert.Equal(t, int64(1), s.scalar(`SELECT redeemed FROM coupons WHERE code = 'ONLY-ONE'`))
	assert.Equal(t, int64(1), s.scalar(`SELECT count(*) FROM coupon_redemptions WHERE status = 'CONFIRMED'`))
	s.auditClean()
	s.recordHistory("coupon-confirmed", winner.sh.workflowOf(winner.key))
	for _, a := range attempts {
		if a != winner {
			s.recordHistory("coupon-used-up", a.sh.workflowOf(a.key))
			break
		}
	}
}

// TestCoupon_DeclinedAndExpiredOrdersGiveItBack: a declined payment and an expired hold give the
// redemption back, and the coupon then serves the next shopper; a shopper's own limit holds when
// they send several orders with it at once.
func TestCoupon_DeclinedAndExpiredOrdersGiveItBack(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{hold: 3 * time.Second})
	s.coupon(map[string]any{"code": "BACK", "kind": "PERCENT", "value": "10", "maxDiscount": "30.00",
		"currency": "TRY", "maxRedemptions": 1})
	redeemed := func() int64 { return s.scalar(`SELECT redeemed FROM coupons WHERE code = 'BACK'`) }

	declined := s.shopper(7201)
	declined.fill(map[int64]int32{88: 1})
	p := declined.previewWith("BACK")
	assert.Equal(t, "30.00", p.str("coupon", "discount"), "ten percent of 449.90, capped at 30.00")
	r := declined.orderWith("k-"+randomHex(8), p.str("priceVersion"), "tok_decline", "BACK")
	require.Equal(t, http.StatusPaymentRequired, r.status, r.raw)
	assert.Zero(t, redeemed(), "the declined order gave it back")

	expired := s.shopper(7202)
	expired.fill(map[int64]int32{88: 1})
	r = expired.orderWith("k-"+randomHex(8), expired.previewWith("BACK").str("priceVersion"), "tok_3ds", "BACK")
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	assert.Equal(t, int64(1), redeemed(), "held while the order waits for its payment")
	other := s.shopper(7203)
	other.fill(map[int64]int32{88: 1})
	meanwhile := other.previewWith("BACK")
	assert.Equal(t, "COUPON_NOT_APPLICABLE", meanwhile.str("coupon", "reason"), meanwhile.raw)
	assert.Equal(t, "449.90", meanwhile.str("total"), "the preview prices without a coupon that does not apply")
	final := s.waitFinal(expired.token, r.int("orderId"), 60*time.Second)
	require.Equal(t, "HOLD_EXPIRED", final.str("failureCode"))
	assert.Zero(t, redeemed(), "the expired order gave it back")

	next := other.previewWith("BACK")
	require.Equal(t, true, next.body["coupon"].(map[string]any)["applies"], next.raw)
	o := other.orderWith("k-"+randomHex(8), next.str("priceVersion"), "tok_ok", "BACK")
	require.Equal(t, http.StatusCreated, o.status, o.raw)
	assert.Equal(t, "CONFIRMED", s.waitFinal(other.token, o.int("orderId"), 30*time.Second).str("status"))

	// One shopper, a coupon of one use per shopper, three orders at once.
	s.coupon(map[string]any{"code": "ONCE-EACH", "kind": "FIXED", "value": "5.00", "currency": "TRY",
		"maxRedemptions": 100, "maxPerShopper": 1})
	eager := s.shopper(7204)
	eager.fill(map[int64]int32{88: 1})
	pv := eager.previewWith("ONCE-EACH").str("priceVersion")
	var wg sync.WaitGroup
	answers := make([]reply, 3)
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = eager.orderWith(fmt.Sprintf("k-%d-%s", i, randomHex(6)), pv, "tok_3ds", "ONCE-EACH")
		}()
	}
	wg.Wait()
	placed := 0
	for _, a := range answers {
		if a.status == http.StatusCreated {
			placed++
			continue
		}
		assert.Equal(t, http.StatusConflict, a.status, a.raw)
		assert.Equal(t, "COUPON_NOT_APPLICABLE", a.str("code"), a.raw)
	}
	assert.Equal(t, 1, placed)
	assert.Equal(t, int64(1), s.scalar(`SELECT count(*) FROM coupon_redemptions r JOIN coupons c ON c.id = r.coupon_id
		WHERE c.code = 'ONCE-EACH' AND r.user_id = 7204 AND r.status <> 'RELEASED'`))
	s.auditClean()
}

// TestCoupon_LinesCancelledAfterPayment_RefundsAddUpToTheCapture: an order paid with a coupon has
// its units cancelled one request at a time; each refund is the units' price less their share of
// the coupon, the refunds add up, to the unit, to what was captured, and the coupon stays spent.
func TestCoupon_LinesCancelledAfterPayment_RefundsAddUpToTheCapture(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	s.coupon(map[string]any{"code": "THIRD", "kind": "FIXED", "value": "100.01", "currency": "TRY", "maxRedemptions": 5})
	sh := s.shopper(7301)
	sh.fill(map[int64]int32{88: 3})
	p := sh.previewWith("THIRD")
	require.Equal(t, "1249.69", p.str("total"), "3 × 449.90 less 100.01")
	o := sh.orderWith("k-"+randomHex(8), p.str("priceVersion"), "tok_ok", "THIRD")
	require.Equal(t, http.StatusCreated, o.status, o.raw)
	id := o.int("orderId")
	require.Equal(t, "CONFIRMED", s.waitFinal(sh.token, id, 30*time.Second).str("status"))

	// 1349.70 of items carry 100.01 of discount: kept 899.80 carries floor(100.01 × 899.80 / 1349.70) = 66.67.
	first := s.cancelLine(id, 88, "lc-"+randomHex(6), 1, "damaged")
	require.Equal(t, http.StatusOK, first.status, first.raw)
	assert.Equal(t, "416.56", first.str("cancellation", "refund"), "1249.69 − (899.80 − 66.67)")
	second := s.cancelLine(id, 88, "lc-"+randomHex(6), 2, "lost")
	require.Equal(t, http.StatusOK, second.status, second.raw)
	assert.Equal(t, "833.13", second.str("cancellation", "refund"), "what the kept units were charged")
	assert.Equal(t, s.scalar(`SELECT captured_minor FROM paysim.intents WHERE order_id = $1`, id),
		s.scalar(`SELECT refunded_minor FROM paysim.intents WHERE order_id = $1`, id), "everything captured, refunded")
	assert.Equal(t, "CONFIRMED", s.scalarText(`SELECT status FROM coupon_redemptions WHERE order_id = $1`, id),
		"the coupon stays spent")
	s.auditClean()
}
