// Package benchdata seeds the reserve benchmark's data: the Go benchmark and the pgbench side of
// `make bench` must work on the same rows, so both seed through here.
package benchdata

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

const (
	// FirstSKU is the id of the first benchmark SKU; the others follow it.
	FirstSKU = 1000
	// Stock never runs out, so every reservation must succeed.
	Stock = 100_000_000
	// History confirmed reservations of past orders give the table the statistics of one in use.
	// Analysed empty, stock_reservations gets a cached sequential-scan plan for the engine's
	// existing-reservation check, which then costs more with every row the run adds.
	History = 100_000
)

// Execer runs a statement: a pool, a connection or a transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Seed writes three warehouses, seller 42, skus SKUs in warehouse 1 with Stock units each, the
// confirmed history, and analyses the tables.
func Seed(ctx context.Context, db Execer, skus int) error {
	for _, s := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO warehouses (id, code, name, city, lat, lon) VALUES
			(1, 'IST', 'Istanbul', 'Istanbul', 41.01, 28.97),
			(2, 'ANK', 'Ankara', 'Ankara', 39.93, 32.86),
			(3, 'IZM', 'Izmir', 'Izmir', 38.42, 27.14)`, nil},
		{`INSERT INTO sellers (id, name) VALUES (42, 'Seller 42')`, nil},
		{`INSERT INTO skus (id, seller_id, code, title, price_minor, currency, max_per_order)
			SELECT $1::bigint + g, 42, 'S-' || ($1::bigint + g), 'SKU ' || ($1::bigint + g), 10000, 'TRY', 10
			FROM generate_series(0, $2::int - 1) g`, []any{FirstSKU, skus}},
		{`INSERT INTO inventory (sku_id, warehouse_id, on_hand)
			SELECT $1::bigint + g, 1, $3::int FROM generate_series(0, $2::int - 1) g`, []any{FirstSKU, skus, Stock}},
		// Order ids far above any a run uses.
		{`INSERT INTO stock_reservations (order_id, sku_id, warehouse_id, quantity, status, expires_at, created_at)
			SELECT 1000000000000 + g, $1::bigint + g % $2::int, 1, 1, 'CONFIRMED', now() - interval '1 day', now() - interval '1 day'
			FROM generate_series(1, $3::int) g`, []any{FirstSKU, skus, History}},
		{"ANALYZE", nil},
	} {
		if _, err := db.Exec(ctx, s.sql, s.args...); err != nil {
			return fmt.Errorf("seed benchmark data: %w", err)
		}
	}
	return nil
}
