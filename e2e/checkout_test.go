package e2e_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/marketplace/checkout/cart"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCheckout_PreviewAndOrderRefuseAlike: the checkout preview and POST /orders price the cart
// through one function. A cart that cannot be priced (empty, SKUs no longer sold, two currencies)
// is refused by both with the same status, code, message and SKUs; what the order refuses a
// priceable cart for, the preview says beforehand: the coupon's reason is the order's code, and
// after a price moved the preview's new priceVersion is the one the order's PRICE_CHANGED names and
// the one it then takes. A refused order writes, reserves and charges nothing.
func TestCheckout_PreviewAndOrderRefuseAlike(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	preview := func(sh *shopper, coupon string) reply {
		body := map[string]any{}
		if coupon != "" {
			body["couponCode"] = coupon
		}
		return s.call(http.MethodPost, "/api/v1/checkout/preview", sh.token, nil, body)
	}
	nothingWritten := func(sh *shopper, name string) {
		assert.Zero(t, s.scalar(`SELECT count(*) FROM orders WHERE user_id = $1`, sh.id), "%s: no order written", name)
		assert.Zero(t, s.scalar(`SELECT COALESCE(sum(reserved), 0) FROM inventory`), "%s: nothing reserved", name)
	}

	// A cart that cannot be priced: the same answer from both.
	cartOf := func(sh *shopper, doc string) {
		_, err := s.pool.Exec(s.ctx, `INSERT INTO carts (id, user_id, doc) VALUES ($1, $2, $3)`, cart.MemberID(sh.id), sh.id, doc)
		require.NoError(t, err)
	}
	eur := s.call(http.MethodPut, "/seller-api/v1/skus", s.seller(42), nil, []map[string]any{{"sku": "S-EURO",
		"title": "Import kulaklık", "price": "99.00", "currency": "EUR", "maxPerOrder": 5}})
	require.Equal(t, http.StatusOK, eur.status, eur.raw)
	euroSKU := int64(eur.body["results"].([]any)[0].(map[string]any)["skuId"].(float64))
	for _, c := range []struct {
		name string
		user int64
		fill func(sh *shopper)
		want int
		code string
	}{
		{"empty cart", 7301, func(*shopper) {}, http.StatusUnprocessableEntity, "CART_EMPTY"},
		{"SKUs no longer sold", 7302, func(sh *shopper) {
			cartOf(sh, `{"items":[{"skuId":71,"sellerId":42,"quantity":1},{"skuId":99999,"sellerId":42,"quantity":1}]}`)
		}, http.StatusUnprocessableEntity, "CART_INVALID"},
		{"two currencies", 7303, func(sh *shopper) { sh.fill(map[int64]int32{71: 1, euroSKU: 1}) },
			http.StatusUnprocessableEntity, "MIXED_CURRENCY"},
	} {
		sh := s.shopper(c.user)
		c.fill(sh)
		p := preview(sh, "")
		o := sh.order("k-"+randomHex(8), "pv_0000000000000000", "tok_ok")
		assert.Equal(t, c.want, p.status, "%s: preview %s", c.name, p.raw)
		assert.Equal(t, c.code, p.str("code"), c.name)
		assert.Equal(t, p.status, o.status, "%s: order %s", c.name, o.raw)
		assert.Equal(t, p.str("code"), o.str("code"), c.name)
		assert.Equal(t, p.str("message"), o.str("message"), c.name)
		assert.Equal(t, p.body["skuIds"], o.body["skuIds"], c.name)
		nothingWritten(sh, c.name)
	}
	gone := preview(s.shopper(7302), "")
	assert.Equal(t, []any{99999.0}, gone.body["skuIds"], "the SKU no longer sold is named: %s", gone.raw)

	// Coupons that do not apply, and a code no coupon has: one answer for all, in the preview and
	// to the order, so that no answer tells a code that exists from one that does not.
	later := time.Now().Add(30 * time.Minute).UTC().Format(time.RFC3339)
	s.coupon(map[string]any{"code": "LATER", "kind": "FIXED", "value": "10.00", "currency": "TRY", "maxRedemptions": 5,
		"startsAt": later})
	s.coupon(map[string]any{"code": "BIG-BASKET", "kind": "FIXED", "value": "10.00", "currency": "TRY", "maxRedemptions": 5,
		"minBasket": "100000.00"})
	s.coupon(map[string]any{"code": "MUGS-ONLY", "kind": "FIXED", "value": "10.00", "currency": "TRY", "maxRedemptions": 5,
		"sellerId": 43})
	for i, c := range []struct{ coupon, reason string }{
		{"NO-SUCH", "COUPON_NOT_APPLICABLE"}, {"LATER", "COUPON_NOT_APPLICABLE"}, {"BIG-BASKET", "COUPON_NOT_APPLICABLE"},
		{"MUGS-ONLY", "COUPON_NOT_APPLICABLE"},
	} {
		sh := s.shopper(int64(7310 + i))
		sh.fill(map[int64]int32{74: 1})
		p := preview(sh, c.coupon)
		require.Equal(t, http.StatusOK, p.status, p.raw)
		assert.Equal(t, false, p.body["coupon"].(map[string]any)["applies"], p.raw)
		assert.Equal(t, c.reason, p.str("coupon", "reason"), c.coupon)
		o := sh.orderWith("k-"+randomHex(8), p.str("priceVersion"), "tok_ok", c.coupon)
		assert.Equal(t, http.StatusConflict, o.status, "%s: %s", c.coupon, o.raw)
		assert.Equal(t, c.reason, o.str("code"), c.coupon)
		assert.Equal(t, p.str("coupon", "message"), o.str("message"), c.coupon)
		assert.Equal(t, "this coupon cannot be used for this cart now", o.str("message"), c.coupon)
		nothingWritten(sh, c.coupon)
	}

	// A price moved since the shopper's preview: the order names the version the preview shows
	// now, and takes it.
	sh := s.shopper(7320)
	sh.fill(map[int64]int32{73: 1})
	before := sh.preview()
	up := s.call(http.MethodPut, "/seller-api/v1/skus", s.seller(42), nil, []map[string]any{{"sku": "S-73",
		"title": "Bluetooth hoparlör", "price": "949.90", "currency": "TRY", "maxPerOrder": 5}})
	require.Equal(t, http.StatusOK, up.status, up.raw)
	now := preview(sh, "")
	require.Equal(t, http.StatusOK, now.status, now.raw)
	assert.NotEqual(t, before, now.str("priceVersion"))
	assert.Contains(t, now.raw, `"code":"PRICE_CHANGED","old":"899.90","new":"949.90"`)
	changed := sh.order("k-"+randomHex(8), before, "tok_ok")
	require.Equal(t, http.StatusConflict, changed.status, changed.raw)
	assert.Equal(t, "PRICE_CHANGED", changed.str("code"))
	assert.Equal(t, now.str("priceVersion"), changed.str("priceVersion"), "the order names the preview's version")
	nothingWritten(sh, "price changed")
	placed := sh.order("k-"+randomHex(8), now.str("priceVersion"), "tok_ok")
	assert.Equal(t, http.StatusCreated, placed.status, "the preview's version is the order's: %s", placed.raw)
}
