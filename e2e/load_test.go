package e2e_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/audit"
	"github.com/marketplace/checkout/loadgen"
	"github.com/marketplace/checkout/payment/paysim"
)

// TestLoad_ShortCampaign_AuditorFindsNothing drives the whole product with the load generator until
// it has placed 200 orders (90 seconds at most, so that a machine shared with other work still
// places them) — orders from new shoppers, a hot SKU that runs out between the
// seller's deliveries, 3-D Secure approvals and declines, declined cards, cancels, provider
// timeouts, keys sent twice, and holds left to expire (HOLD_TTL 5s), a campaign price on the hot
// SKU and a coupon on a third of the orders — waits for the abandoned holds to expire, checks that
// the seller's deliveries put no sold unit back on sale, and runs the invariant auditor (its coupon
// invariants among them) over the database and Temporal.
func TestLoad_ShortCampaign_AuditorFindsNothing(t *testing.T) {
	t.Parallel()
	hold := 5 * time.Second
	s := startStack(t, stackOptions{hold: hold})
	rep, err := loadgen.Run(s.ctx, loadgen.Config{BaseURL: s.base, MetricsURL: s.metrics, JWTSecret: s.cfg.JWTSecret,
		Shoppers: 12, Duration: 90 * time.Second, Orders: 200,
		CatalogSize: 40, Stock: 200, HotSKUs: []string{"LG-HOT-1"}, HotShare: 0.3, HotStock: 20,
		CampaignHot: 20, CouponShare: 0.3, RepeatShare: 0.1, RestockLead: time.Second, HoldTTL: hold, WaitAbandoned: true, Settle: 10 * time.Second})
	require.NoError(t, err)
	var out strings.Builder
	require.NoError(t, rep.WriteText(&out))
	t.Log("\n" + out.String())
	require.GreaterOrEqual(t, rep.Orders, int64(100), "the run placed its orders")
	require.Positive(t, rep.HotOrders, "hot SKUs ordered")
	require.Empty(t, rep.Mismatches, "a repeated key answers the same")
	require.Positive(t, rep.CouponOrders, "orders placed with the coupon")
	// The coupon followed its orders: held or spent by the open and confirmed ones, given back by
	// the others; and the campaign priced the hot SKU's lines.
	var spent, hotCampaign int64
	require.NoError(t, s.pool.QueryRow(s.ctx, `SELECT count(*) FROM coupon_redemptions r JOIN coupons c ON c.id = r.coupon_id
		WHERE c.code = $1 AND r.status = 'CONFIRMED'`, rep.Coupon).Scan(&spent))
	assert.Positive(t, spent, "confirmed orders spent the coupon")
	require.NoError(t, s.pool.QueryRow(s.ctx, `SELECT count(*) FROM order_items i JOIN skus k ON k.id = i.sku_id
		WHERE k.code = 'LG-HOT-1' AND cardinality(i.campaign_ids) > 0`).Scan(&hotCampaign))
	assert.Positive(t, hotCampaign, "hot SKU lines priced by the campaign")
	// The seller's deliveries, counted without hearing of the sales, never put a sold unit back on
	// sale: on the shelf plus sold is what it delivered in all, its last count.
	var resold int
	require.NoError(t, s.pool.QueryRow(s.ctx, `SELECT count(*) FROM inventory i JOIN skus k ON k.id = i.sku_id
		LEFT JOIN (SELECT sku_id, warehouse_id, sum(quantity) AS qty FROM stock_reservations
		           WHERE status = 'CONFIRMED' GROUP BY sku_id, warehouse_id) c
		       ON c.sku_id = i.sku_id AND c.warehouse_id = i.warehouse_id
		WHERE k.code LIKE 'LG-%' AND i.on_hand + coalesce(c.qty, 0) <> i.reported_quantity`).Scan(&resold))
	assert.Zero(t, resold, "rows where the shelf and the sales exceed what the seller delivered")

	res, err := audit.Run(s.ctx, s.pool, audit.Options{HoldTTL: hold, Slack: 10 * time.Second,
		Visibility: s.temporal, TaskQueue: s.cfg.TaskQueue, Provider: paysim.NewRecords(s.pool)})
	require.NoError(t, err)
	out.Reset()
	require.NoError(t, res.WriteText(&out, 20))
	assert.Empty(t, res.Violations, out.String())
}

// TestLoad_BrowseOnly_VisitsWithoutOrders: with BrowseOnly every shopper makes the visit (address,
// cart, preview) and places no order, so that a benchmark can weigh an order apart from the visit.
func TestLoad_BrowseOnly_VisitsWithoutOrders(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	rep, err := loadgen.Run(s.ctx, loadgen.Config{BaseURL: s.base, MetricsURL: s.metrics, JWTSecret: s.cfg.JWTSecret,
		Shoppers: 2, Duration: time.Minute, Orders: 6, CatalogSize: 10, Stock: 100, BrowseOnly: true,
		UserBase: 7_100_000, Settle: 5 * time.Second})
	require.NoError(t, err)
	assert.Equal(t, int64(6), rep.Browsed, "visits made: %+v", rep.Stopped)
	assert.Zero(t, rep.Orders, "orders placed")
	var orders, carts int
	require.NoError(t, s.pool.QueryRow(s.ctx, `SELECT
		(SELECT count(*) FROM orders WHERE user_id >= 7100000 AND user_id < 7200000),
		(SELECT count(*) FROM carts WHERE user_id >= 7100000 AND user_id < 7200000)`).Scan(&orders, &carts))
	assert.Zero(t, orders, "orders in the database")
	assert.Equal(t, 6, carts, "each visit's cart")
}
