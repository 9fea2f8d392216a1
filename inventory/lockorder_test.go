package inventory_test

import (
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/inventory"
)

// The engine sorts an order's lines and never puts one SKU in two of its own batches at once, so
// through it the database never sees two orders lock the same rows in opposite orders. Other
// processes, and any other caller of the SQL functions, give no such promise: these tests call
// the functions directly, so that it is the functions' own lock order that is proven.

// lineOrders are the orders in which an order names its lines; each order takes one by its id.
var lineOrders = [][]int64{{301, 302, 303}, {303, 302, 301}, {302, 301}, {301, 302}, {303, 301}, {302, 303, 301}}

func sqlLines(order int64) []int64 { return lineOrders[order%int64(len(lineOrders))] }

func shipTo(order int64) inventory.Location {
	return []inventory.Location{istanbul, ankara, izmir}[order%3]
}

// reserveOrderSQL calls reserve_order as written, lines in the order given.
func (f *fixture) reserveOrderSQL(order int64) error {
	skus := sqlLines(order)
	qty := slices.Repeat([]int32{1}, len(skus))
	at := shipTo(order)
	_, err := f.pool.Exec(f.ctx, `SELECT * FROM reserve_order($1, $2, $3, $4, $5, 900)`, order, skus, qty, at.Lat, at.Lon)
	return err
}

// reserveOrdersSQL calls reserve_orders with the orders in the order given, each order's lines in
// its own order.
func (f *fixture) reserveOrdersSQL(orders []int64) error {
	var lats, lons, holds []float64
	var lineOrder, qty []int32
	var skus []int64
	for i, o := range orders {
		at := shipTo(o)
		lats, lons, holds = append(lats, at.Lat), append(lons, at.Lon), append(holds, 900)
		for _, sku := range sqlLines(o) {
			lineOrder, skus, qty = append(lineOrder, int32(i+1)), append(skus, sku), append(qty, 1)
		}
	}
	_, err := f.pool.Exec(f.ctx, `SELECT * FROM reserve_orders($1, $2, $3, $4, $5, $6, $7)`,
		orders, lats, lons, holds, lineOrder, skus, qty)
	return err
}

// TestReserveFunctions_UnsortedLinesFromManyConnections_NoDeadlock: sixteen connections call
// reserve_order and reserve_orders at once, with lines in every order, ship-tos in every city (so
// one SKU's rows of several warehouses are taken), and pairs of connections naming the same orders
// in a batch in opposite orders (the orders' advisory locks). A deadlock (or a lock wait that
// outlives the batch's lock timeout) is an error here.
func TestReserveFunctions_UnsortedLinesFromManyConnections_NoDeadlock(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, sku := range []int64{301, 302, 303} {
		f.sku(sku, map[int32]int32{whIstanbul: 5000, whAnkara: 5000, whIzmir: 5000})
	}
	const conns, rounds = 16, 40
	var mu sync.Mutex
	placed := map[int64]bool{}
	errs := map[string]int{}
	var wg sync.WaitGroup
	for c := range conns {
		wg.Go(func() {
			for i := range rounds {
				base := int64(c*1000 + i*10)
				var orders []int64
				var err error
				if i%2 == 0 {
					orders = []int64{base + 1}
					err = f.reserveOrderSQL(base + 1)
				} else {
					// Connections 2k and 2k+1 share an order in each batch, named in opposite orders.
					shared := int64(900_000 + (c/2)*1000 + i)
					orders = []int64{base + 1, shared, base + 2}
					if c%2 == 1 {
						slices.Reverse(orders)
					}
					err = f.reserveOrdersSQL(orders)
				}
				mu.Lock()
				if err != nil {
					code := err.Error()
					var pgErr *pgconn.PgError
					if errors.As(err, &pgErr) {
						code = pgErr.Code + " " + pgErr.Message
					}
					errs[code]++
				} else {
					for _, o := range orders {
						placed[o] = true
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()

	require.Empty(t, errs, "no deadlock (40P01), lock timeout (55P03) or other error")
	units := 0
	for o := range placed {
		units += len(sqlLines(o))
	}
	assert.Equal(t, units, f.count(`SELECT COALESCE(sum(reserved), 0)::int FROM inventory`),
		"every order reserved its lines once, a shared order by one batch only")
	assert.Equal(t, len(placed), f.count(`SELECT count(DISTINCT order_id) FROM stock_reservations`))
	assert.Zero(t, f.count(`SELECT count(*) FROM (SELECT order_id, sku_id FROM stock_reservations
		GROUP BY 1, 2 HAVING sum(quantity) <> 1) twice`), "no line reserved twice")
	f.assertConsistent()
	t.Logf("%d orders", len(placed))
}
