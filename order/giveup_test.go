package order_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/dev/demo"
	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/order"
	"github.com/marketplace/checkout/pricing"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// shop is a demo database with orders of shopper 7, one unit of a SKU each, reserved.
type shop struct {
	t      *testing.T
	ctx    context.Context
	pool   *pgxpool.Pool
	orders order.Store
	stock  *inventory.Engine
}

func newShop(t *testing.T) *shop {
	pool := testenv.Pool(t)
	ctx := context.Background()
	require.NoError(t, demo.Load(ctx, pool))
	return &shop{t: t, ctx: ctx, pool: pool, orders: order.Store{Pool: pool},
		stock: inventory.New(pool, nil, inventory.WithCombining(0))}
}

// reserved places an order of one unit of sku with its stock reserved, as the saga's first steps
// leave it.
func (s *shop) reserved(key string, sku int64) int64 {
	s.t.Helper()
	c, err := s.orders.Create(s.ctx, order.New{UserID: 7, IdempotencyKey: key, RequestHash: "h", WorkflowID: "wf-" + key,
		RunID: "run", AddressID: 1, Provider: "paysim", Quote: pricing.Quote{TotalMinor: 100, Currency: "TRY", PriceVersion: "pv",
			Items: []pricing.Item{{SKUID: sku, SellerID: 42, Title: "t", Quantity: 1, UnitPriceMinor: 100, Currency: "TRY"}}}})
	require.NoError(s.t, err)
	_, err = s.stock.Reserve(s.ctx, inventory.ReserveRequest{OrderID: c.ID, Lines: []inventory.Line{{SKUID: sku, Quantity: 1}},
		ShipTo: inventory.Location{Lat: 41, Lon: 29}, Hold: time.Hour})
	require.NoError(s.t, err)
	return c.ID
}

// confirmed places an order whose stock is confirmed (its workflow went on to capture).
func (s *shop) confirmed(key string, sku int64) int64 {
	s.t.Helper()
	id := s.reserved(key, sku)
	_, err := s.stock.Confirm(s.ctx, id)
	require.NoError(s.t, err)
	return id
}

// units are a SKU's units on the shelves and reserved, over its warehouses.
func (s *shop) units(sku int64) (onHand, reserved int) {
	s.t.Helper()
	require.NoError(s.t, s.pool.QueryRow(s.ctx, `SELECT sum(on_hand), sum(reserved) FROM inventory WHERE sku_id = $1`, sku).
		Scan(&onHand, &reserved))
	return onHand, reserved
}

func (s *shop) status(id int64) (status, code string) {
	s.t.Helper()
	var c *string
	require.NoError(s.t, s.pool.QueryRow(s.ctx, `SELECT status, failure_code FROM orders WHERE id = $1`, id).Scan(&status, &c))
	if c != nil {
		code = *c
	}
	return status, code
}

// TestGiveUp_OpenOrders_EndedOnceWithTheirStockBack: an open order given up ends FAILED with its
// code, its reserved stock released and its confirmed stock (a workflow stopped between confirm and
// capture) back on the shelf; giving it up again changes nothing.
func TestGiveUp_OpenOrders_EndedOnceWithTheirStockBack(t *testing.T) {
	t.Parallel()
	s := newShop(t)
	onHand71, reserved71 := s.units(71)
	onHand72, reserved72 := s.units(72)
	held := s.reserved("held", 71)
	taken := s.confirmed("taken", 72)
	if on, _ := s.units(72); on != onHand72-1 {
		t.Fatalf("the confirm took %d units off the shelf", onHand72-on)
	}

	g, err := s.orders.GiveUp(s.ctx, held, order.StatusFailed, problem.Orphaned, map[string]any{"by": "test"})
	require.NoError(t, err)
	assert.Equal(t, order.GaveBack{Ended: true, Released: 1}, g)
	g, err = s.orders.GiveUp(s.ctx, taken, order.StatusFailed, problem.Orphaned, nil)
	require.NoError(t, err)
	assert.Equal(t, order.GaveBack{Ended: true, Restocked: 1}, g)

	for _, id := range []int64{held, taken} {
		st, code := s.status(id)
		assert.Equal(t, "FAILED", st)
		assert.Equal(t, "ORPHANED", code)
	}
	on, res := s.units(71)
	assert.Equal(t, [2]int{onHand71, reserved71}, [2]int{on, res}, "the reservation released")
	on, res = s.units(72)
	assert.Equal(t, [2]int{onHand72, reserved72}, [2]int{on, res}, "the confirmed unit back on the shelf")

	again, err := s.orders.GiveUp(s.ctx, held, order.StatusCancelled, problem.CancelledBySupport, nil)
	require.NoError(t, err)
	assert.Zero(t, again, "an order ends once")
	st, code := s.status(held)
	assert.Equal(t, [2]string{"FAILED", "ORPHANED"}, [2]string{st, code})
	var events int
	require.NoError(t, s.pool.QueryRow(s.ctx, `SELECT count(*) FROM outbox_events WHERE event_type = $1`, order.EventFailed).Scan(&events))
	assert.Equal(t, 2, events, "one event per order ended")
}

// TestGiveUp_ConfirmedOrder_KeepsItsStock: a confirmed order is never given up, and GiveBack leaves
// its stock alone; a failed order whose stock is still held gets it back from GiveBack.
func TestGiveUp_ConfirmedOrder_KeepsItsStock(t *testing.T) {
	t.Parallel()
	s := newShop(t)
	onHand, reserved := s.units(73)
	sold := s.confirmed("sold", 73)
	ended, err := s.orders.Transition(s.ctx, sold, order.StatusConfirmed, "", nil)
	require.NoError(t, err)
	require.True(t, ended)

	g, err := s.orders.GiveUp(s.ctx, sold, order.StatusFailed, problem.Orphaned, nil)
	require.NoError(t, err)
	assert.Zero(t, g)
	g, err = s.orders.GiveBack(s.ctx, sold)
	require.NoError(t, err)
	assert.Zero(t, g)
	on, res := s.units(73)
	assert.Equal(t, [2]int{onHand - 1, reserved}, [2]int{on, res}, "the sold unit stays sold")
	st, _ := s.status(sold)
	assert.Equal(t, "CONFIRMED", st)

	_, err = s.orders.GiveUp(s.ctx, sold, order.StatusConfirmed, "", nil)
	assert.ErrorIs(t, err, order.ErrNotFinal, "giving up ends an order FAILED or CANCELLED only")

	// Failed by its workflow with its reservation still held (its compensation never ran).
	left := s.reserved("left", 73)
	ended, err = s.orders.Transition(s.ctx, left, order.StatusFailed, problem.HoldExpired, nil)
	require.NoError(t, err)
	require.True(t, ended)
	g, err = s.orders.GiveBack(s.ctx, left)
	require.NoError(t, err)
	assert.Equal(t, order.GaveBack{Released: 1}, g)
	on, res = s.units(73)
	assert.Equal(t, [2]int{onHand - 1, reserved}, [2]int{on, res})
}
