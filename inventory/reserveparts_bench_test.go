package inventory_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/marketplace/checkout/internal/dev/benchdata"
	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/inventory/internal/stockstore"
)

// BenchmarkReserveParts takes a spread reservation with combining off apart, one guarantee at a
// time, so that its distance from pgbench's transaction is measured part by part rather than
// guessed. Each part is what the one before it did and one thing more, from the same Go client
// and pool as BenchmarkReserve:
//
//   - statement: pgbench's own UPDATE … INSERT, one statement in autocommit;
//   - function: reserve_order's one-line path with its warehouse fixed and its guards cut out;
//   - nearest: the nearest warehouse that holds the line chosen, as that path does;
//   - reserve_order: the schema's function itself (its one-line path adds the order's advisory
//     lock and the lookup of reservations a retried order already holds);
//   - hold: the engine's own statement (ReserveOrder), which also records the hold's expiry on
//     the order (the order's row is absent here, so the UPDATE finds none);
//   - engine: Engine.Reserve with combining off, as BenchmarkReserve runs it.
//
// `make bench-reserve-parts` runs it beside pgbench on a durable cluster, in rounds.
func BenchmarkReserveParts(b *testing.B) {
	b.Run("spread", func(b *testing.B) {
		for _, clients := range []int{8, 50, 200} {
			b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
				for _, part := range reserveParts {
					b.Run("part="+part.name, func(b *testing.B) { benchReservePart(b, clients, part.sql, part.args) })
				}
			})
		}
	})
}

// reserveParts are the parts in order; sql is the statement an order runs with the parameters
// args gives, empty for the engine.
var reserveParts = []struct {
	name, sql string
	args      func(order, sku int64) []any
}{
	{"statement", `WITH r AS (UPDATE inventory SET reserved = reserved + 1, version = version + 1
		WHERE sku_id = $2 AND warehouse_id = 1 AND on_hand - reserved >= 1 RETURNING sku_id, warehouse_id)
		INSERT INTO stock_reservations (order_id, sku_id, warehouse_id, quantity, expires_at)
		SELECT $1, sku_id, warehouse_id, 1, now() + interval '15 minutes' FROM r`,
		func(order, sku int64) []any { return []any{order, sku} }},
	{"function", partCall("bench_reserve_bare"), reserveOrderArgs},
	{"nearest", partCall("bench_reserve_nearest"), reserveOrderArgs},
	{"reserve_order", partCall("reserve_order"), reserveOrderArgs},
	{"hold", stockstore.ReserveOrderSQL, reserveOrderArgs},
	{"engine", "", nil},
}

// partCall is a call of fn with reserve_order's parameters.
func partCall(fn string) string {
	return "SELECT kind FROM " + fn + "($1::bigint, $2::bigint[], $3::int[], $4::float8, $5::float8, $6::float8)"
}

// reserveOrderArgs are an order's parameters in reserve_order's order (the engine's statement
// takes the same): the order, its one line of one unit, where it ships to and its hold, as the
// engine's benchmark reserves it.
func reserveOrderArgs(order, sku int64) []any {
	return []any{order, []int64{sku}, []int32{1}, benchShipTo.Lat, benchShipTo.Lon, benchHold.Seconds()}
}

// The pieces of reserve_order's one-line path that the parts cut out: the guards, and the choice
// of the nearest warehouse together with the test of its result.
var (
	guardsExpr = regexp.MustCompile(`(?s)PERFORM pg_advisory_xact_lock\(1, [^;]*\);\s*` +
		`IF EXISTS \(SELECT 1 FROM stock_reservations r WHERE r\.order_id = p_order_id\) THEN.*?END IF;`)
	nearestExpr = regexp.MustCompile(`(?s)SELECT near\.warehouse_id INTO chosen.*?LIMIT 1;\s*IF FOUND THEN`)
)

// partFunctions are the parts' functions, made from reserve_order's own text so that they follow
// it: nearest is it without its guards, bare that with warehouse 1 taken instead of the nearest.
// A reserve_order whose text no longer has those pieces fails the benchmark rather than measure
// something else.
func partFunctions(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	var def string
	if err := pool.QueryRow(ctx, `SELECT pg_get_functiondef('reserve_order'::regproc)`).Scan(&def); err != nil {
		return nil, err
	}
	cut := func(s string, expr *regexp.Regexp, with string) (string, error) {
		if n := len(expr.FindAllStringIndex(s, -1)); n != 1 {
			return "", fmt.Errorf("reserve_order has %d places matching %s, the parts need one", n, expr)
		}
		return expr.ReplaceAllLiteralString(s, with), nil
	}
	named := func(s, name string) string {
		return strings.Replace(s, "FUNCTION public.reserve_order(", "FUNCTION public."+name+"(", 1)
	}
	nearest, err := cut(def, guardsExpr, "")
	if err != nil {
		return nil, err
	}
	bare, err := cut(nearest, nearestExpr, "chosen := 1;\n        IF true THEN")
	if err != nil {
		return nil, err
	}
	return []string{named(nearest, "bench_reserve_nearest"), named(bare, "bench_reserve_bare")}, nil
}

func benchReservePart(b *testing.B, clients int, sql string, args func(order, sku int64) []any) {
	const skus = 1000
	pool := testenv.PoolOn(b, testenv.DatabaseURL(b), int32(clients+2))
	seedBench(b, pool, skus)
	ctx := context.Background()
	fns, err := partFunctions(ctx, pool)
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range fns {
		if _, err := pool.Exec(ctx, f); err != nil {
			b.Fatal(err)
		}
	}
	op := func(ctx context.Context, order, sku int64) error {
		rows, err := pool.Query(ctx, sql, args(order, sku)...)
		if err != nil {
			return err
		}
		n := 0
		for rows.Next() {
			n++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if n > 1 {
			return fmt.Errorf("%d rows for one reservation", n)
		}
		return nil
	}
	if sql == "" {
		eng := inventory.New(pool, nil, inventory.WithCombining(0))
		op = func(ctx context.Context, order, sku int64) error {
			_, err := eng.Reserve(ctx, inventory.ReserveRequest{OrderID: order,
				Lines: []inventory.Line{{SKUID: sku, Quantity: 1}}, ShipTo: benchShipTo, Hold: benchHold})
			return err
		}
	}
	run := driveClients(b, pool, clients, func(ctx context.Context, order int64) error {
		sku := int64(benchdata.FirstSKU + rand.IntN(skus))
		if err := op(ctx, order, sku); err != nil {
			return fmt.Errorf("order %d sku %d: %w", order, sku, err)
		}
		return nil
	})
	checkBenchRows(b, pool, b.N)
	run.report(b, "reservations/s")
}
