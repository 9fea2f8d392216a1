package e2e_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/auth"
)

func (s *stack) ops() string {
	tok, err := auth.Mint([]byte(s.cfg.JWTSecret), auth.Principal{UserID: 950, Role: auth.RoleOps}, time.Hour)
	require.NoError(s.t, err)
	return tok
}

// TestCampaign_PricesThePreview_EndingItBeforeTheOrderIsPriceChanged: a campaign started by ops
// prices the cart, the preview and the order; a campaign that ends between the preview and the
// order refuses the order with PRICE_CHANGED, never charging a price the shopper did not see; the
// order placed on the new preview captures the discounted total. A seller keeps campaigns on its
// own SKUs only.
func TestCampaign_PricesThePreview_EndingItBeforeTheOrderIsPriceChanged(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	ops := s.ops()
	end := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	c := s.call(http.MethodPost, "/api/v1/ops/campaigns", ops, nil, map[string]any{"name": "11.11 headphones",
		"skuIds": []int64{71}, "kind": "PERCENT", "value": "20", "endsAt": end})
	require.Equal(t, http.StatusCreated, c.status, c.raw)
	campaignID := c.int("id")

	sh := s.shopper(7061)
	sh.fill(map[int64]int32{71: 1, 88: 1})
	cartView := s.call(http.MethodGet, "/api/v1/cart", sh.token, nil, nil)
	require.Equal(t, http.StatusOK, cartView.status)
	assert.Contains(t, cartView.raw, `"price":"999.92"`, "the cart shows the campaign price: 1249.90 less 20%")

	p := s.call(http.MethodPost, "/api/v1/checkout/preview", sh.token, nil, map[string]any{})
	require.Equal(t, http.StatusOK, p.status, p.raw)
	assert.Equal(t, "1449.82", p.str("total"), "999.92 + 449.90")
	assert.Contains(t, p.raw, `"listPrice":"1249.90","discount":"249.98","campaigns":[`+fmt.Sprint(campaignID)+`]`)
	pv := p.str("priceVersion")

	ended := s.call(http.MethodPost, fmt.Sprintf("/api/v1/ops/campaigns/%d/end", campaignID), ops, nil, nil)
	require.Equal(t, http.StatusOK, ended.status, ended.raw)
	r := sh.order("k-"+randomHex(8), pv, "tok_ok")
	require.Equal(t, http.StatusConflict, r.status, r.raw)
	assert.Equal(t, "PRICE_CHANGED", r.str("code"))
	assert.Zero(t, s.scalar(`SELECT COALESCE(sum(reserved), 0) FROM inventory`), "nothing reserved")

	now := s.call(http.MethodPost, "/api/v1/checkout/preview", sh.token, nil, map[string]any{})
	require.Equal(t, http.StatusOK, now.status)
	assert.Equal(t, "1699.80", now.str("total"))
	assert.Contains(t, now.raw, `"code":"PRICE_CHANGED","old":"999.92","new":"1249.90"`, "priceAtAdd was the campaign price")

	// A seller's campaign on its own SKUs prices the next order, and the order keeps what it was priced with.
	own := s.call(http.MethodPost, "/seller-api/v1/campaigns", s.seller(43), nil, map[string]any{"name": "mugs",
		"kind": "FIXED", "value": "49.90", "currency": "TRY", "endsAt": end})
	require.Equal(t, http.StatusCreated, own.status, own.raw)
	others := s.call(http.MethodPost, "/seller-api/v1/campaigns", s.seller(43), nil, map[string]any{"name": "not mine",
		"skuIds": []int64{71}, "kind": "PERCENT", "value": "50", "endsAt": end})
	require.Equal(t, http.StatusBadRequest, others.status, others.raw)
	assert.Equal(t, "VALIDATION_FAILED", others.str("code"))
	mine := s.call(http.MethodGet, "/seller-api/v1/campaigns", s.seller(42), nil, nil)
	require.Equal(t, http.StatusOK, mine.status)
	assert.NotContains(t, mine.raw, `"mugs"`, "a seller sees its own campaigns only")

	p2 := s.call(http.MethodPost, "/api/v1/checkout/preview", sh.token, nil, map[string]any{})
	require.Equal(t, http.StatusOK, p2.status)
	assert.Equal(t, "1649.90", p2.str("total"), "1249.90 + 449.90 - 49.90")
	o := sh.order("k-"+randomHex(8), p2.str("priceVersion"), "tok_ok")
	require.Equal(t, http.StatusCreated, o.status, o.raw)
	final := s.waitFinal(sh.token, o.int("orderId"), 30*time.Second)
	assert.Equal(t, "CONFIRMED", final.str("status"), final.raw)
	assert.Equal(t, "1649.90", final.str("payment", "captured"))
	assert.Contains(t, final.raw, `"unitPrice":"400.00","lineTotal":"400.00","currency":"TRY","listPrice":"449.90","discount":"49.90"`)
}
