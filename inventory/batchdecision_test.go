package inventory_test

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/inventory"
)

// decision is one row of what reserve_order or reserve_orders answered, without the ids and
// clocks that differ between two runs of the same decision.
type decision struct {
	order     int64
	kind      string
	sku       int64
	warehouse int32
	quantity  int32
	available int32
}

// batchOrder is one order of a generated batch.
type batchOrder struct {
	id     int64
	at     inventory.Location
	skus   []int64
	quants []int32
}

// decideRolledBack runs fn in a transaction that is rolled back, so that every way of deciding a
// batch starts from the same stock.
func (f *fixture) decideRolledBack(fn func(tx pgx.Tx) []decision) []decision {
	f.t.Helper()
	tx, err := f.pool.Begin(f.ctx)
	require.NoError(f.t, err)
	defer func() { require.NoError(f.t, tx.Rollback(f.ctx)) }()
	got := fn(tx)
	slices.SortFunc(got, func(a, b decision) int {
		if a.order != b.order {
			return int(a.order - b.order)
		}
		if a.sku != b.sku {
			return int(a.sku - b.sku)
		}
		return int(a.warehouse - b.warehouse)
	})
	return got
}

// TestReserveOrders_DecidesEveryBatchAsTheOrdersOneAfterAnother: reserve_orders decides a batch in
// one query when every line's nearest row holds enough for all the lines that want it, and order
// by order otherwise; either way the answer must be what reserve_order gives for the same orders
// one after another. Batches of random orders (one to three lines of distinct SKUs, one to four
// units, ship-tos in every city) on random stock are decided both ways from the same stock:
// plentiful stock (the one-query decision), scarce stock (rows short for their lines, lines split
// over warehouses, short orders) and stock in between.
func TestReserveOrders_DecidesEveryBatchAsTheOrdersOneAfterAnother(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	rng := rand.New(rand.NewPCG(7, 11))
	cities := []inventory.Location{istanbul, ankara, izmir, {Lat: 40.19, Lon: 29.06}, {Lat: 36.90, Lon: 30.70}}
	const trials, skusPerTrial = 60, 4
	var nearestOnly, other int
	for trial := range trials {
		// Stock: every SKU in some of the three warehouses; the trial's kind sets how much.
		first := int64(1000 + trial*skusPerTrial)
		for s := range int64(skusPerTrial) {
			stock := map[int32]int32{}
			for _, wh := range []int32{whIstanbul, whAnkara, whIzmir} {
				if rng.IntN(3) == 0 {
					continue
				}
				switch trial % 3 {
				case 0:
					stock[wh] = 1000
				case 1:
					stock[wh] = int32(rng.IntN(5))
				default:
					stock[wh] = int32(rng.IntN(30))
				}
			}
			f.sku(first+s, stock)
		}
		orders := make([]batchOrder, 1+rng.IntN(40))
		for i := range orders {
			o := batchOrder{id: int64(trial*1000 + i + 1), at: cities[rng.IntN(len(cities))]}
			for _, k := range rng.Perm(skusPerTrial)[:1+rng.IntN(3)] {
				o.skus = append(o.skus, first+int64(k))
				o.quants = append(o.quants, int32(1+rng.IntN(4)))
			}
			orders[i] = o
		}

		batch := f.decideRolledBack(func(tx pgx.Tx) []decision { return reserveOrdersIn(t, tx, orders) })
		alone := f.decideRolledBack(func(tx pgx.Tx) []decision {
			var all []decision
			for _, o := range orders {
				all = append(all, reserveOrderIn(t, tx, o)...)
			}
			return all
		})
		require.Equal(t, alone, batch, "trial %d: %d orders", trial, len(orders))
		if nearestOnlyBatch(t, f, orders) {
			nearestOnly++
		} else {
			other++
		}
	}
	require.Positive(t, nearestOnly, "some batches are decided in one query")
	require.Positive(t, other, "some batches are decided order by order")
}

func reserveOrdersIn(t *testing.T, tx pgx.Tx, orders []batchOrder) []decision {
	t.Helper()
	var ids, skus []int64
	var lats, lons, holds []float64
	var lineOrders, quants []int32
	for i, o := range orders {
		ids, lats, lons, holds = append(ids, o.id), append(lats, o.at.Lat), append(lons, o.at.Lon), append(holds, 900)
		for j := range o.skus {
			lineOrders, skus, quants = append(lineOrders, int32(i+1)), append(skus, o.skus[j]), append(quants, o.quants[j])
		}
	}
	return collectDecisions(t, tx, `SELECT order_id, kind, sku_id, coalesce(warehouse_id, 0), quantity, coalesce(available, 0)
		FROM reserve_orders($1, $2, $3, $4, $5, $6, $7)`, ids, lats, lons, holds, lineOrders, skus, quants)
}

func reserveOrderIn(t *testing.T, tx pgx.Tx, o batchOrder) []decision {
	t.Helper()
	return collectDecisions(t, tx, `SELECT $1::bigint, kind, sku_id, coalesce(warehouse_id, 0), quantity, coalesce(available, 0)
		FROM reserve_order($1, $2, $3, $4, $5, 900)`, o.id, o.skus, o.quants, o.at.Lat, o.at.Lon)
}

func collectDecisions(t *testing.T, tx pgx.Tx, sql string, args ...any) []decision {
	t.Helper()
	rows, err := tx.Query(t.Context(), sql, args...)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (decision, error) {
		var d decision
		err := row.Scan(&d.order, &d.kind, &d.sku, &d.warehouse, &d.quantity, &d.available)
		return d, err
	})
	require.NoError(t, err)
	return got
}

// nearestOnlyBatch says whether the batch is one that reserve_orders decides in one query: every
// line's nearest row of its SKU (by distance, then warehouse id) holds at least what all the lines
// whose nearest row it is want.
func nearestOnlyBatch(t *testing.T, f *fixture, orders []batchOrder) bool {
	t.Helper()
	type row struct {
		sku int64
		wh  int32
	}
	want := map[row]int32{}
	for _, o := range orders {
		for j, sku := range o.skus {
			var wh int32
			err := f.pool.QueryRow(f.ctx, `SELECT i.warehouse_id FROM inventory i JOIN warehouses w ON w.id = i.warehouse_id
				WHERE i.sku_id = $1 ORDER BY distance_km($2, $3, w.lat, w.lon), i.warehouse_id LIMIT 1`,
				sku, o.at.Lat, o.at.Lon).Scan(&wh)
			if errors.Is(err, pgx.ErrNoRows) {
				return false
			}
			require.NoError(t, err)
			want[row{sku, wh}] += o.quants[j]
		}
	}
	for r, n := range want {
		if onHand, _ := f.row(r.sku, r.wh); onHand < n {
			return false
		}
	}
	return true
}
