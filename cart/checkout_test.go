package cart_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/cart"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/pricing"
)

// TestPrice_RefusalsAreCoded: a cart that cannot be priced is refused with its code; a priced one
// is refused for an order by its first refusal — a line over its SKU's maxPerOrder, the coupon's
// reason, then prices other than the confirmed version — and not at all at its own version.
func TestPrice_RefusalsAreCoded(t *testing.T) {
	t.Parallel()
	pool, store := setup(t)
	ctx := context.Background()
	q := pool

	_, err := cart.Price(ctx, q, 951, "", nil)
	assert.Equal(t, problem.CartEmpty, problem.CodeOf(err), "no cart at all: %v", err)

	_, err = pool.Exec(ctx, `INSERT INTO carts (id, user_id, doc) VALUES ('u:952', 952,
		'{"items":[{"skuId":71,"sellerId":42,"quantity":1},{"skuId":99999,"sellerId":42,"quantity":1}]}')`)
	require.NoError(t, err)
	_, err = cart.Price(ctx, q, 952, "", nil)
	p, ok := problem.As(err)
	require.True(t, ok, "%v", err)
	assert.Equal(t, problem.CartInvalid, p.Code)
	assert.Equal(t, problem.SKUsDetails{SKUIDs: []int64{99999}}, p.Details)

	_, err = store.SetQuantity(ctx, cart.Member(953), 74, 42, 2, nil)
	require.NoError(t, err)
	c, err := cart.Price(ctx, q, 953, "", nil)
	require.NoError(t, err)
	assert.Nil(t, c.Refusal(c.Quote.PriceVersion), "at its own version the order is placed")
	changed := c.Refusal("pv_other")
	require.NotNil(t, changed)
	assert.Equal(t, problem.PriceChanged, changed.Code)
	assert.Equal(t, pricing.PriceChangedDetails{PriceVersion: c.Quote.PriceVersion}, changed.Details)

	withCoupon, err := cart.Price(ctx, q, 953, "NO-SUCH", nil)
	require.NoError(t, err)
	require.NotNil(t, withCoupon.Coupon)
	assert.Equal(t, c.Quote, withCoupon.Quote, "a coupon that does not apply leaves the prices")
	assert.Equal(t, problem.CouponNotFound, withCoupon.Refusal(withCoupon.Quote.PriceVersion).Code)

	_, err = pool.Exec(ctx, `UPDATE skus SET max_per_order = 1 WHERE id = 74`)
	require.NoError(t, err)
	over, err := cart.Price(ctx, q, 953, "NO-SUCH", nil)
	require.NoError(t, err)
	first := over.Refusal("pv_other")
	assert.Equal(t, problem.CartInvalid, first.Code, "the line over maxPerOrder comes first")
	assert.Equal(t, problem.SKUsDetails{SKUIDs: []int64{74}}, first.Details)
}
