package api_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/cart"
	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/pricing"
)

// warnings maps "skuId/code" to the warning of a preview answer.
func warnings(t *testing.T, body map[string]any) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	list, ok := body["warnings"].([]any)
	require.True(t, ok, "answer has warnings: %v", body)
	for _, w := range list {
		m := w.(map[string]any)
		out[fmtKey(m["skuId"].(float64), m["code"].(string))] = m
	}
	return out
}

func fmtKey(sku float64, code string) string { return fmt.Sprintf("%s/%d", code, int64(sku)) }

// cartQuote is what the order endpoint computes for the user's cart: pricing.Compute of its lines.
func cartQuote(t *testing.T, h *harness, userID int64) pricing.Quote {
	t.Helper()
	ctx := context.Background()
	snap, err := cart.Load(ctx, h.pool, cart.MemberID(userID))
	require.NoError(t, err)
	q, err := pricing.Compute(ctx, h.pool, snap.Doc.Lines())
	require.NoError(t, err)
	return q
}

func TestPreview_PriceRaised_WarnsAgainstPriceAtAddAndMovesPriceVersion(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	shopper := h.shopper(7)
	for sku, qty := range map[int64]int{71: 2, 78: 1} {
		path, body := putItem(sku, 42, qty)
		require.Equal(t, http.StatusOK, h.send(http.MethodPut, path, shopper, body).status)
	}

	before := h.do(http.MethodPost, "/api/v1/checkout/preview", shopper, "")
	require.Equal(t, http.StatusOK, before.status, before.raw)
	assert.Equal(t, "2899.70", before.body["total"], "2 × 1249.90 + 399.90")
	assert.Equal(t, "TRY", before.body["currency"])
	assert.Empty(t, before.body["warnings"])
	assert.Equal(t, cartQuote(t, h, 7).PriceVersion, before.body["priceVersion"], "the version the order endpoint computes")

	raise := h.do(http.MethodPut, "/seller-api/v1/skus", h.seller(42),
		`[{"sku":"S-71","title":"Kablosuz kulaklık","price":"1299.90","currency":"TRY","maxPerOrder":5}]`)
	require.Equal(t, http.StatusOK, raise.status, raise.raw)

	after := h.do(http.MethodPost, "/api/v1/checkout/preview", shopper, "")
	require.Equal(t, http.StatusOK, after.status, after.raw)
	assert.Equal(t, "2999.70", after.body["total"], "recomputed from the catalog, not from priceAtAdd")
	w := warnings(t, after.body)["PRICE_CHANGED/71"]
	require.NotNil(t, w, after.raw)
	assert.Equal(t, "1249.90", w["old"])
	assert.Equal(t, "1299.90", w["new"])
	assert.NotEqual(t, before.body["priceVersion"], after.body["priceVersion"])
	assert.Equal(t, cartQuote(t, h, 7).PriceVersion, after.body["priceVersion"])
	item := lines(t, after.body)[71]
	require.NotNil(t, item, "the preview has the line of SKU 71: %s", after.raw)
	assert.Equal(t, "1299.90", item["unitPrice"])
	assert.Equal(t, "2599.80", item["lineTotal"])
	assert.Equal(t, "1249.90", item["priceAtAdd"])
}

func TestPreview_StockWarnings_FromTheInventory(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	shopper := h.shopper(8)
	for sku, qty := range map[int64]int{81: 1, 89: 3, 90: 1, 88: 2} {
		path, body := putItem(sku, sellerOf(sku), qty)
		require.Equal(t, http.StatusOK, h.send(http.MethodPut, path, shopper, body).status)
	}
	// No relay runs in this test: the projection knows nothing of these changes, the inventory does.
	out := h.do(http.MethodPut, "/seller-api/v1/stocks", h.seller(43),
		`[{"sku":"S-90","warehouseId":3,"quantity":0,"sourceUpdatedAt":"2026-01-01T00:00:00Z"}]`)
	require.Equal(t, http.StatusOK, out.status, out.raw)

	a := h.do(http.MethodPost, "/api/v1/checkout/preview", shopper, "")
	require.Equal(t, http.StatusOK, a.status, a.raw)
	w := warnings(t, a.body)
	assert.Len(t, w, 2, a.raw)
	require.Contains(t, w, "LOW_STOCK/81")
	assert.EqualValues(t, 1, w["LOW_STOCK/81"]["available"])
	require.Contains(t, w, "OUT_OF_STOCK/90")
	assert.EqualValues(t, 0, w["OUT_OF_STOCK/90"]["available"])
	assert.NotContains(t, w, "LOW_STOCK/89", "5 units of 89 are above the threshold of 3")
}

func TestPreview_EmptyCartAndAccess(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	cases := []struct {
		name, token string
		status      int
		code        problem.Code
	}{
		{"no cart at all", h.shopper(605), 422, problem.CartEmpty},
		{"guest", "", 401, problem.Unauthorized},
		{"seller", h.seller(42), 403, problem.Forbidden},
	}
	for _, c := range cases {
		a := h.do(http.MethodPost, "/api/v1/checkout/preview", c.token, "")
		assert.Equal(t, c.status, a.status, "%s: %s", c.name, a.raw)
		assert.EqualValues(t, c.code, a.body["code"], c.name)
	}
	emptied := h.shopper(606)
	require.Equal(t, http.StatusOK, h.send(http.MethodPut, "/api/v1/cart/items/71", emptied, `{"sellerId":42,"quantity":1}`).status)
	require.Equal(t, http.StatusOK, h.send(http.MethodDelete, "/api/v1/cart/items/71", emptied, "").status)
	a := h.do(http.MethodPost, "/api/v1/checkout/preview", emptied, "")
	assert.Equal(t, http.StatusUnprocessableEntity, a.status, a.raw)
	assert.EqualValues(t, problem.CartEmpty, a.body["code"])
}

// TestPreview_SKUsNoLongerSold_RefusedAsTheOrderIs: a cart holding SKUs the catalog no longer has
// is refused 422 CART_INVALID naming them, the answer POST /orders gives the same cart.
func TestPreview_SKUsNoLongerSold_RefusedAsTheOrderIs(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	_, err := h.pool.Exec(context.Background(), `INSERT INTO carts (id, user_id, doc) VALUES ('u:607', 607,
		'{"items":[{"skuId":71,"sellerId":42,"quantity":1},{"skuId":99998,"sellerId":42,"quantity":1},{"skuId":99999,"sellerId":42,"quantity":2}]}')`)
	require.NoError(t, err)
	a := h.do(http.MethodPost, "/api/v1/checkout/preview", h.shopper(607), "")
	assert.Equal(t, http.StatusUnprocessableEntity, a.status, a.raw)
	assert.EqualValues(t, problem.CartInvalid, a.body["code"])
	assert.Equal(t, []any{99998.0, 99999.0}, a.body["skuIds"], "the SKUs no longer sold, and only they")
}

// TestPreview_CouponsThatCannotApply_OneAnswer: a code no coupon has, and coupons that exist but
// cannot apply to this shopper's cart now (not started, ended, used up, used by this shopper, for
// other items, a basket too small), are answered alike: one reason, one message, the total and
// priceVersion of the cart without a coupon. Nothing tells a code that exists from one that does
// not.
func TestPreview_CouponsThatCannotApply_OneAnswer(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ops := h.token(auth.Principal{UserID: 900, Role: auth.RoleOps})
	for _, c := range []string{
		`{"code":"LATER","kind":"FIXED","value":"10.00","currency":"TRY","maxRedemptions":5,"startsAt":"2099-01-01T00:00:00Z","endsAt":"2099-02-01T00:00:00Z"}`,
		`{"code":"ENDED","kind":"FIXED","value":"10.00","currency":"TRY","maxRedemptions":5,"endsAt":"2099-01-01T00:00:00Z"}`,
		`{"code":"GONE","kind":"FIXED","value":"10.00","currency":"TRY","maxRedemptions":1,"endsAt":"2099-01-01T00:00:00Z"}`,
		`{"code":"ONCE","kind":"FIXED","value":"10.00","currency":"TRY","maxRedemptions":5,"endsAt":"2099-01-01T00:00:00Z"}`,
		`{"code":"MUGS-ONLY","kind":"FIXED","value":"10.00","currency":"TRY","maxRedemptions":5,"sellerId":43,"endsAt":"2099-01-01T00:00:00Z"}`,
		`{"code":"BIG-BASKET","kind":"FIXED","value":"10.00","currency":"TRY","maxRedemptions":5,"minBasket":"100000.00","endsAt":"2099-01-01T00:00:00Z"}`,
		`{"code":"WORKS","kind":"FIXED","value":"10.00","currency":"TRY","maxRedemptions":5,"endsAt":"2099-01-01T00:00:00Z"}`,
	} {
		r := h.do(http.MethodPost, "/api/v1/ops/coupons", ops, c)
		require.Equal(t, http.StatusCreated, r.status, r.raw)
	}
	h.scalar(`WITH e AS (UPDATE coupons SET starts_at = now() - interval '2 days', ends_at = now() - interval '1 day'
		WHERE code = 'ENDED' RETURNING 1), g AS (UPDATE coupons SET redeemed = 1 WHERE code = 'GONE' RETURNING 1)
		SELECT (SELECT count(*) FROM e) + (SELECT count(*) FROM g)`)
	shopper := h.shopper(7)
	path, body := putItem(71, 42, 1)
	require.Equal(t, http.StatusOK, h.send(http.MethodPut, path, shopper, body).status)
	h.scalar(`WITH o AS (INSERT INTO orders (user_id, idempotency_key, request_hash, workflow_id, status, address_id,
			price_version, total_minor, currency)
		SELECT 7, 'coupon-once', 'h', 'order-u7-coupon-once', 'CONFIRMED', a.id, 'pv', 100, 'TRY'
		FROM addresses a WHERE a.user_id = 7 LIMIT 1 RETURNING id)
		INSERT INTO coupon_redemptions (order_id, coupon_id, user_id, discount_minor, status)
		SELECT o.id, c.id, 7, 1000, 'CONFIRMED' FROM o, coupons c WHERE c.code = 'ONCE' RETURNING 1`)

	plain := h.do(http.MethodPost, "/api/v1/checkout/preview", shopper, "")
	require.Equal(t, http.StatusOK, plain.status, plain.raw)
	works := h.do(http.MethodPost, "/api/v1/checkout/preview", shopper, `{"couponCode":"WORKS"}`)
	require.Equal(t, true, works.body["coupon"].(map[string]any)["applies"], "a coupon that applies: %s", works.raw)

	for _, code := range []string{"NO-SUCH-CODE", "LATER", "ENDED", "GONE", "ONCE", "MUGS-ONLY", "BIG-BASKET"} {
		r := h.do(http.MethodPost, "/api/v1/checkout/preview", shopper, `{"couponCode":"`+code+`"}`)
		require.Equal(t, http.StatusOK, r.status, r.raw)
		assert.Equal(t, map[string]any{"code": code, "applies": false, "reason": string(problem.CouponNotApplicable),
			"message": "this coupon cannot be used for this cart now"}, r.body["coupon"], code)
		assert.Equal(t, plain.body["total"], r.body["total"], code)
		assert.Equal(t, plain.body["priceVersion"], r.body["priceVersion"], code)
	}
}

// TestPreview_Stock_NoCountAboveTheThreshold: the preview shows stock as the cart does, a hint per
// line, with the sellable count only at or below LOW_STOCK_THRESHOLD: a line asking for more than
// is sellable, above the threshold, is warned LOW_STOCK without the count.
func TestPreview_Stock_NoCountAboveTheThreshold(t *testing.T) {
	t.Parallel()
	h := newHarnessWithEnv(t, map[string]string{"LOW_STOCK_THRESHOLD": "1"})
	shopper := h.shopper(8)
	for sku, qty := range map[int64]int{71: 1, 81: 1, 84: 4} {
		path, body := putItem(sku, sellerOf(sku), qty)
		require.Equal(t, http.StatusOK, h.send(http.MethodPut, path, shopper, body).status)
	}
	out := h.do(http.MethodPut, "/seller-api/v1/stocks", h.seller(43),
		`[{"sku":"S-84","warehouseId":3,"quantity":2,"sourceUpdatedAt":"2026-01-01T00:00:00Z"}]`)
	require.Equal(t, http.StatusOK, out.status, out.raw)

	a := h.do(http.MethodPost, "/api/v1/checkout/preview", shopper, "")
	require.Equal(t, http.StatusOK, a.status, a.raw)
	items := lines(t, a.body)
	assert.Equal(t, "IN_STOCK", items[71]["stock"], a.raw)
	assert.NotContains(t, items[71], "available", "80 units: no count")
	assert.Equal(t, "LOW_STOCK", items[81]["stock"])
	assert.EqualValues(t, 1, items[81]["available"], "at the threshold: the count, as the cart shows it")
	assert.NotContains(t, items[84], "available", "2 units, above the threshold: no count")
	w := warnings(t, a.body)
	require.Contains(t, w, "LOW_STOCK/84", "fewer than the 4 asked for: %s", a.raw)
	assert.NotContains(t, w["LOW_STOCK/84"], "available")
	assert.EqualValues(t, 4, w["LOW_STOCK/84"]["requested"])
	assert.EqualValues(t, 1, w["LOW_STOCK/81"]["available"])
	assert.NotContains(t, a.raw, `"available":80`)
	assert.NotContains(t, a.raw, `"available":2`)
}
