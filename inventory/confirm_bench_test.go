package inventory_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/marketplace/checkout/internal/dev/benchdata"
	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/inventory"
)

// BenchmarkConfirm measures Engine.Confirm as the saga drives it once orders are paid: a fixed
// number of clients, each confirming one order of one unit of the hot SKU at a time, every order
// reserved beforehand (off the clock). combining=off is every confirm its own transaction,
// combining=on the default engine, which combines concurrent confirms of the row into shared
// transactions. `make bench` runs it beside BenchmarkReserve.
func BenchmarkConfirm(b *testing.B) {
	modes := []struct {
		name     string
		inFlight int
	}{{"off", 0}, {"on", inventory.DefaultBatchesInFlight}}
	b.Run("hot", func(b *testing.B) {
		for _, clients := range []int{50, 200} {
			b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
				for _, mode := range modes {
					b.Run("combining="+mode.name, func(b *testing.B) {
						benchConfirm(b, clients, mode.inFlight)
					})
				}
			})
		}
	})
}

// benchConfirm confirms b.N orders, reserved beforehand, shared by exactly clients goroutines.
func benchConfirm(b *testing.B, clients, inFlight int) {
	pool := testenv.PoolOn(b, testenv.DatabaseURL(b), int32(clients+2))
	seedBench(b, pool, 1)
	seedActive(b, pool, b.N)
	sizes := &benchBatches{}
	eng := inventory.New(pool, sizes, inventory.WithConfirmCombining(inFlight))

	run := driveClients(b, pool, clients, func(ctx context.Context, order int64) error {
		res, err := eng.Confirm(ctx, order)
		if err != nil {
			return fmt.Errorf("confirm order %d: %w", order, err)
		}
		if res.Confirmed != 1 {
			return fmt.Errorf("confirm order %d: %+v", order, res)
		}
		return nil
	})
	checkBenchConfirmed(b, pool, b.N)
	run.report(b, "confirms/s")
	sizes.report(b)
}

// seedActive gives orders 1..n an ACTIVE reservation of one unit of the hot SKU each, as n
// reserves would have.
func seedActive(b *testing.B, pool *pgxpool.Pool, n int) {
	b.Helper()
	ctx := context.Background()
	for _, s := range []string{
		`INSERT INTO stock_reservations (order_id, sku_id, warehouse_id, quantity, expires_at)
			SELECT g, $1::bigint, 1, 1, now() + interval '1 hour' FROM generate_series(1, $2::int) g`,
		`UPDATE inventory SET reserved = reserved + $2::int WHERE sku_id = $1::bigint AND warehouse_id = 1`,
	} {
		if _, err := pool.Exec(ctx, s, benchdata.FirstSKU, n); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `ANALYZE stock_reservations`); err != nil {
		b.Fatal(err)
	}
}

// checkBenchConfirmed proves the figures count real confirms: every order's unit left the shelf
// and its reservation.
func checkBenchConfirmed(b *testing.B, pool *pgxpool.Pool, want int) {
	b.Helper()
	var active, onHand, reserved int64
	err := pool.QueryRow(context.Background(),
		`SELECT (SELECT count(*) FROM stock_reservations WHERE status = 'ACTIVE'), on_hand, reserved
		FROM inventory WHERE sku_id = $1 AND warehouse_id = 1`, benchdata.FirstSKU).Scan(&active, &onHand, &reserved)
	if err != nil {
		b.Fatal(err)
	}
	if active != 0 || reserved != 0 || onHand != int64(benchdata.Stock-want) {
		b.Fatalf("after %d confirms: %d ACTIVE reservations, on_hand %d (want %d), reserved %d",
			want, active, onHand, benchdata.Stock-want, reserved)
	}
}
