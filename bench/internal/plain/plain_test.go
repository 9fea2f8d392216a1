package plain

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/events"
	"github.com/marketplace/checkout/internal/dev/demo"
	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/pricing"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestPlainCheckout_OneOrderPerKey_SettleGivesItsStockBack: the plain endpoint's transaction makes
// one order per key with its stock reserved and no payment row, answers a repeat with the same
// order, refuses the key with another body, and Settle cancels the order and gives its stock
// back.
func TestPlainCheckout_OneOrderPerKey_SettleGivesItsStockBack(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	require.NoError(t, demo.Load(ctx, pool))
	_, err := pool.Exec(ctx, `INSERT INTO carts (id, user_id, doc) VALUES ('u:7', 7, '{"items":[{"skuId":71,"sellerId":42,"quantity":2}]}')`)
	require.NoError(t, err)
	quote, err := pricing.Compute(ctx, pool, []pricing.Line{{SKUID: 71, Quantity: 2}})
	require.NoError(t, err)
	reserved := func() (n int) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT sum(reserved) FROM inventory WHERE sku_id = 71`).Scan(&n))
		return n
	}
	before := reserved()
	p := &Server{pool: pool, hold: time.Minute}
	req := plainRequest{PriceVersion: quote.PriceVersion, AddressID: 1, PaymentMethodToken: "tok_ok"}

	first, err := p.checkout(ctx, 7, "k1", "h1", req)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, first.status, "%v", first.body)
	again, err := p.checkout(ctx, 7, "k1", "h1", req)
	require.NoError(t, err)
	assert.Equal(t, http.StatusCreated, again.status)
	assert.Equal(t, first.body["orderId"], again.body["orderId"], "the same key, the same order")
	reused, err := p.checkout(ctx, 7, "k1", "other", req)
	require.NoError(t, err)
	assert.Equal(t, http.StatusUnprocessableEntity, reused.status)
	assert.Equal(t, before+2, reserved(), "reserved once")
	var orders, payments int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), (SELECT count(*) FROM payments) FROM orders`).Scan(&orders, &payments))
	assert.Equal(t, 1, orders)
	assert.Zero(t, payments, "the plain checkout has no payment step")
	assert.Equal(t, []string{events.OrderCreated}, publishable(t, pool), "the order's one event, which a repeat does not write again")

	n, err := Settle(ctx, pool)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	var status string
	require.NoError(t, pool.QueryRow(ctx, `SELECT status FROM orders WHERE id = $1`, first.body["orderId"]).Scan(&status))
	assert.Equal(t, "CANCELLED", status)
	assert.Equal(t, before, reserved(), "its stock is back")
	assert.Equal(t, []string{events.OrderCreated, events.OrderCancelled}, publishable(t, pool))
}

// TestPlainCheckout_RefusesAsTheAPI: the plain endpoint refuses a cart as the saga's price check
// does, answered with the API's status for the code.
func TestPlainCheckout_RefusesAsTheAPI(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	require.NoError(t, demo.Load(ctx, pool))
	_, err := pool.Exec(ctx, `INSERT INTO carts (id, user_id, doc) VALUES ('u:7', 7, '{"items":[{"skuId":71,"sellerId":42,"quantity":2}]}'),
		('u:8', 8, '{"items":[{"skuId":99999,"sellerId":42,"quantity":1}]}')`)
	require.NoError(t, err)
	p := &Server{pool: pool, hold: time.Minute}

	changed, err := p.checkout(ctx, 7, "k1", "h1", plainRequest{PriceVersion: "pv_old", AddressID: 1, PaymentMethodToken: "tok_ok"})
	require.NoError(t, err)
	assert.Equal(t, http.StatusConflict, changed.status)
	assert.Equal(t, problem.PriceChanged, changed.body["code"])
	assert.NotEmpty(t, changed.body["priceVersion"])
	var address int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT min(id) FROM addresses WHERE user_id = 8`).Scan(&address))
	gone, err := p.checkout(ctx, 8, "k1", "h1", plainRequest{PriceVersion: "pv_old", AddressID: address, PaymentMethodToken: "tok_ok"})
	require.NoError(t, err)
	assert.Equal(t, http.StatusUnprocessableEntity, gone.status)
	assert.Equal(t, problem.CartInvalid, gone.body["code"])
	assert.Equal(t, []any{99999.0}, gone.body["skuIds"], "the details as the API answers them (JSON)")
}

// publishable is the types of the orders' events in the outbox; every event there, of an order or
// not, the relay's own envelope (events.Build) must take: one it cannot would hold every event
// behind it.
func publishable(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, _ := pool.Query(context.Background(), `SELECT id, aggregate_type, aggregate_id, event_type, payload, created_at
		FROM outbox_events ORDER BY id`)
	all, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (r events.Row, err error) {
		err = row.Scan(&r.ID, &r.AggregateType, &r.AggregateID, &r.Type, &r.Payload, &r.CreatedAt)
		return r, err
	})
	require.NoError(t, err)
	var types []string
	for _, r := range all {
		_, err := events.Build(r)
		require.NoError(t, err, "event %d (%s)", r.ID, r.Type)
		if r.AggregateType == "order" {
			types = append(types, r.Type)
		}
	}
	return types
}
