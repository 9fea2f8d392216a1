package pricing_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/dev/demo"
	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/pricing"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestDiscounted_PriorityAndStacking(t *testing.T) {
	pct := func(id, bp int64, prio int32, stack bool) pricing.Campaign {
		return pricing.Campaign{ID: id, Kind: pricing.CampaignPercent, Value: bp, Priority: prio, Stackable: stack}
	}
	fixed := func(id, minor int64, cur string, stack bool) pricing.Campaign {
		return pricing.Campaign{ID: id, Kind: pricing.CampaignFixed, Value: minor, Currency: cur, Stackable: stack}
	}
	for name, tc := range map[string]struct {
		campaigns []pricing.Campaign
		price     int64
		applied   []int64
	}{
		"none":                               {nil, 10000, nil},
		"ten percent":                        {[]pricing.Campaign{pct(1, 1000, 0, false)}, 9000, []int64{1}},
		"a non-stacking first applies alone": {[]pricing.Campaign{pct(1, 1000, 5, false), pct(2, 2000, 1, true)}, 9000, []int64{1}},
		"a stacking first stops at a non-stacking one": {[]pricing.Campaign{pct(1, 1000, 5, true), pct(2, 2000, 3, false),
			pct(3, 1000, 1, true)}, 9000, []int64{1}},
		"stacking ones apply in turn, each on what is left": {[]pricing.Campaign{pct(1, 1000, 5, true), fixed(2, 500, "TRY", true)},
			8500, []int64{1, 2}},
		"a fixed discount in another currency is skipped": {[]pricing.Campaign{fixed(1, 500, "EUR", false), pct(2, 1000, 0, false)},
			9000, []int64{2}},
		"never below zero":  {[]pricing.Campaign{fixed(1, 50000, "TRY", false)}, 0, []int64{1}},
		"a hundred percent": {[]pricing.Campaign{pct(1, 10000, 0, false)}, 0, []int64{1}},
	} {
		t.Run(name, func(t *testing.T) {
			price, applied := pricing.Discounted(10000, "TRY", tc.campaigns)
			assert.Equal(t, tc.price, price)
			assert.Equal(t, tc.applied, applied)
		})
	}
}

// TestCompute_CampaignsInForce: a campaign prices a line while it runs — on its SKUs, or on every
// SKU of its seller — and names itself in the line and the priceVersion; one that has not started
// or has ended does not.
func TestCompute_CampaignsInForce(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	require.NoError(t, demo.Load(ctx, pool))
	q := pool
	lines := []pricing.Line{{SKUID: 71, Quantity: 2}, {SKUID: 88, Quantity: 1}}
	before, err := pricing.Compute(ctx, q, lines)
	require.NoError(t, err)
	require.Len(t, before.Items, 2)
	for _, it := range before.Items {
		assert.Empty(t, it.Campaigns)
		assert.Zero(t, it.ListPriceMinor)
	}

	now := time.Now()
	campaign := func(sellerID *int64, skus []int64, kind string, value int64, currency *string, from, to time.Time,
		prio int32, stack bool) int64 {
		var id int64
		require.NoError(t, pool.QueryRow(ctx, `INSERT INTO campaigns (name, seller_id, sku_ids, kind, value, currency,
			starts_at, ends_at, priority, stackable, created_by) VALUES ('t', $1, $2, $3, $4, $5, $6, $7, $8, $9, 'test')
			RETURNING id`, sellerID, skus, kind, value, currency, from, to, prio, stack).Scan(&id))
		return id
	}
	seller43 := int64(43)
	try := "TRY"
	tenOff71 := campaign(nil, []int64{71}, pricing.CampaignPercent, 1000, nil, now.Add(-time.Minute), now.Add(time.Hour), 1, false)
	campaign(nil, []int64{71}, pricing.CampaignPercent, 5000, nil, now.Add(time.Hour), now.Add(2*time.Hour), 9, false)
	campaign(nil, []int64{71}, pricing.CampaignPercent, 5000, nil, now.Add(-2*time.Hour), now.Add(-time.Hour), 9, false)
	fiveOff43 := campaign(&seller43, nil, pricing.CampaignFixed, 500, &try, now.Add(-time.Minute), now.Add(time.Hour), 0, false)

	after, err := pricing.Compute(ctx, q, lines)
	require.NoError(t, err)
	k, mug := after.Items[0], after.Items[1]
	assert.Equal(t, before.Items[0].UnitPriceMinor, k.ListPriceMinor)
	assert.Equal(t, before.Items[0].UnitPriceMinor*9/10, k.UnitPriceMinor, "ten percent off, only the campaign in force")
	assert.Equal(t, []int64{tenOff71}, k.Campaigns)
	assert.Equal(t, before.Items[1].UnitPriceMinor-500, mug.UnitPriceMinor, "the seller-wide fixed campaign")
	assert.Equal(t, []int64{fiveOff43}, mug.Campaigns)
	assert.Equal(t, 2*k.UnitPriceMinor+mug.UnitPriceMinor, after.TotalMinor)
	assert.NotEqual(t, before.PriceVersion, after.PriceVersion)

	// Ending the campaign brings the old prices, and the old priceVersion, back.
	_, err = pool.Exec(ctx, `UPDATE campaigns SET ends_at = now() - interval '1 second', starts_at = now() - interval '1 minute'`)
	require.NoError(t, err)
	ended, err := pricing.Compute(ctx, q, lines)
	require.NoError(t, err)
	assert.Equal(t, before.PriceVersion, ended.PriceVersion)
	assert.Equal(t, before.TotalMinor, ended.TotalMinor)
}

// TestWithCoupon_SaysWhyNot: each reason a coupon does not apply has its code, and the quote
// stays as it was; one that applies takes its discount off and changes the priceVersion.
func TestWithCoupon_SaysWhyNot(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	require.NoError(t, demo.Load(ctx, pool))
	q := pool
	_, err := pool.Exec(ctx, `INSERT INTO coupons (code, kind, value, max_discount_minor, currency, min_basket_minor,
		starts_at, ends_at, max_redemptions, max_per_shopper, seller_id, sku_ids, redeemed, created_by) VALUES
		('TEN', 'PERCENT', 1000, 5000, 'TRY', 0, now() - interval '1h', now() + interval '1h', 10, 1, NULL, NULL, 0, 't'),
		('LATER', 'FIXED', 100, NULL, 'TRY', 0, now() + interval '1h', now() + interval '2h', 10, 1, NULL, NULL, 0, 't'),
		('OLD', 'FIXED', 100, NULL, 'TRY', 0, now() - interval '2h', now() - interval '1h', 10, 1, NULL, NULL, 0, 't'),
		('GONE', 'FIXED', 100, NULL, 'TRY', 0, now() - interval '1h', now() + interval '1h', 1, 1, NULL, NULL, 1, 't'),
		('MUGS', 'FIXED', 100, NULL, 'TRY', 0, now() - interval '1h', now() + interval '1h', 10, 1, 43, NULL, 0, 't'),
		('BIG', 'FIXED', 100, NULL, 'TRY', 100000000, now() - interval '1h', now() + interval '1h', 10, 1, NULL, NULL, 0, 't'),
		('EURO', 'FIXED', 100, NULL, 'EUR', 0, now() - interval '1h', now() + interval '1h', 10, 1, NULL, NULL, 0, 't')`)
	require.NoError(t, err)
	quote, err := pricing.Compute(ctx, q, []pricing.Line{{SKUID: 71, Quantity: 1}})
	require.NoError(t, err)
	for code, want := range map[string]problem.Code{"nope": problem.CouponNotFound, "later": problem.CouponNotStarted,
		"OLD": problem.CouponExpired, "GONE": problem.CouponUsedUp, "MUGS": problem.CouponNotApplicable,
		"BIG": problem.CouponMinBasket, "EURO": problem.CouponNotApplicable} {
		got, refusal, err := pricing.WithCoupon(ctx, q, quote, code, 7)
		require.NoError(t, err)
		require.NotNil(t, refusal, code)
		assert.Equal(t, want, refusal.Code, code)
		assert.Equal(t, quote, got, "%s: the quote unchanged", code)
	}
	got, refusal, err := pricing.WithCoupon(ctx, q, quote, " ten ", 7)
	require.NoError(t, err)
	require.Nil(t, refusal)
	require.NotNil(t, got.Coupon)
	assert.Equal(t, int64(5000), got.Coupon.DiscountMinor, "ten percent of 1249.90 capped at 50.00")
	assert.Equal(t, quote.TotalMinor-5000, got.TotalMinor)
	assert.NotEqual(t, quote.PriceVersion, got.PriceVersion)
}
