package migrations_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/internal/dev/benchkit"
	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/migrations"
	"github.com/marketplace/checkout/outbox/emit"
	"github.com/marketplace/checkout/pricing"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// sqlFunctionsUntil is the last migration under which campaigns_in_force and order_event_payload
// were SQL functions.
const sqlFunctionsUntil = "00034"

// filesUpTo is this folder's migrations up to and including the one numbered last.
type filesUpTo struct {
	fs.FS
	last string
}

func (f filesUpTo) ReadDir(name string) ([]fs.DirEntry, error) {
	all, err := fs.ReadDir(f.FS, name)
	var kept []fs.DirEntry
	for _, e := range all {
		if strings.HasSuffix(e.Name(), ".sql") && e.Name()[:len(f.last)] <= f.last {
			kept = append(kept, e)
		}
	}
	return kept, err
}

// schemas are two databases with the same rows: one migrated until the functions were SQL
// functions, one migrated as this build is.
type schemas struct {
	before, now *pgxpool.Pool
	orderIDs    []int64
}

func newSchemas(tb testing.TB) schemas {
	tb.Helper()
	ctx := context.Background()
	beforeURL := testenv.EmptyDatabaseURL(tb)
	_, err := migrations.Apply(ctx, beforeURL, filesUpTo{FS: os.DirFS("."), last: sqlFunctionsUntil}, goose.DefaultTablename)
	require.NoError(tb, err)
	s := schemas{before: testenv.PoolOn(tb, beforeURL, 2), now: testenv.PoolOn(tb, testenv.DatabaseURL(tb), 2)}
	for p, want := range map[*pgxpool.Pool]string{s.before: "sql sql", s.now: "plpgsql plpgsql"} {
		var langs string
		require.NoError(tb, p.QueryRow(ctx, `SELECT string_agg(l.lanname, ' ' ORDER BY f.proname) FROM pg_proc f
			JOIN pg_language l ON l.oid = f.prolang WHERE f.proname IN ('campaigns_in_force', 'order_event_payload')`).Scan(&langs))
		require.Equal(tb, want, langs, "the languages of campaigns_in_force and order_event_payload")
		ids := seed(tb, p)
		if s.orderIDs == nil {
			s.orderIDs = ids
		}
		require.Equal(tb, s.orderIDs, ids, "both databases hold the same orders")
	}
	return s
}

// seed writes a catalog of 100 SKUs of two sellers with campaigns of every reach (one SKU's, a
// seller's, one ended, one not yet begun) and 20 orders of three lines.
func seed(tb testing.TB, p *pgxpool.Pool) []int64 {
	tb.Helper()
	ctx := context.Background()
	_, err := p.Exec(ctx, `
		INSERT INTO sellers (id, name) VALUES (42, 'forty-two'), (43, 'forty-three');
		INSERT INTO skus (id, seller_id, code, title, price_minor, currency, max_per_order)
		SELECT g, 42 + g % 2, 'sku-' || g, 'SKU ' || g, 1000 + g, 'EUR', 10 FROM generate_series(1, 100) g;
		INSERT INTO campaigns (name, seller_id, sku_ids, kind, value, currency, starts_at, ends_at, priority, stackable, created_by)
		SELECT 'sku ' || g, 42 + g % 2, ARRAY[g]::bigint[], 'PERCENT', 500, NULL, now() - interval '1 day',
		       now() + interval '1 day', g % 3, g % 2 = 0, 'seed' FROM generate_series(1, 100, 7) g;
		INSERT INTO campaigns (name, seller_id, sku_ids, kind, value, currency, starts_at, ends_at, priority, stackable, created_by)
		VALUES ('seller 43', 43, NULL, 'FIXED', 50, 'EUR', now() - interval '1 day', now() + interval '1 day', 5, true, 'seed'),
		       ('ended', 42, ARRAY[2]::bigint[], 'PERCENT', 900, NULL, now() - interval '2 days', now() - interval '1 day', 9, false, 'seed'),
		       ('later', 43, NULL, 'PERCENT', 900, NULL, now() + interval '1 day', now() + interval '2 days', 9, false, 'seed');
		INSERT INTO addresses (user_id, city, line1, lat, lon) VALUES (7, 'Istanbul', 'line', 41.0, 29.0);`)
	require.NoError(tb, err)
	rows, err := p.Query(ctx, `
		WITH o AS (
			INSERT INTO orders (user_id, idempotency_key, request_hash, workflow_id, address_id, price_version, total_minor, currency, created_at)
			SELECT 7, 'key-' || g, 'hash', 'order-' || g, (SELECT min(id) FROM addresses), 'v1', 3000, 'EUR', '2026-01-02T03:04:05Z'
			FROM generate_series(1, 20) g RETURNING id)
		SELECT id FROM o ORDER BY id`)
	require.NoError(tb, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(tb, err)
	_, err = p.Exec(ctx, `
		INSERT INTO order_items (order_id, sku_id, seller_id, title, quantity, unit_price_minor, currency, list_price_minor)
		SELECT o.id, s.id, s.seller_id, s.title, 1 + s.id % 3, s.price_minor, s.currency, s.price_minor
		FROM orders o JOIN skus s ON s.id IN ((o.id % 100) + 1, (o.id * 7 % 100) + 1, (o.id * 13 % 100) + 1)`)
	require.NoError(tb, err)
	return ids
}

// cartOf is a three-line cart, a different one for each i.
func cartOf(i int) []pricing.Line {
	return []pricing.Line{{SKUID: int64(i%100 + 1), Quantity: 1}, {SKUID: int64(i*7%100 + 1), Quantity: 2},
		{SKUID: int64(i*13%100 + 1), Quantity: 1}}
}

// The functions answer in PL/pgSQL exactly as they did in SQL: every SKU's campaigns in force
// (of the SKU, of its seller, none ended or not yet begun), every order's event payload, and the
// quotes and order events the product builds on them.
func TestSchemaFunctions_AnswerAsTheSQLFunctionsDid(t *testing.T) {
	s := newSchemas(t)
	ctx := context.Background()
	read := func(p *pgxpool.Pool, sql string, args ...any) []string {
		rows, err := p.Query(ctx, sql, args...)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return out
	}
	campaigns := `SELECT s.id || ' ' || campaigns_in_force(s.id, s.seller_id)::text FROM skus s ORDER BY s.id`
	payloads := `SELECT COALESCE(order_event_payload(id)::text, 'none') FROM unnest($1::bigint[] || ARRAY[-1]::bigint[]) id`
	before := read(s.before, campaigns)
	assert.Equal(t, before, read(s.now, campaigns))
	require.Len(t, before, 100)
	// SKU 1 (seller 43): its own campaign and its seller's; SKU 2 (seller 42): only one that ended.
	assert.Regexp(t, `^1 \[\{.*"kind": "FIXED".*\}, \{.*"kind": "PERCENT".*\}\]$`, before[0])
	assert.Equal(t, "2 []", before[1])
	assert.Equal(t, read(s.before, payloads, s.orderIDs), read(s.now, payloads, s.orderIDs))
	assert.Equal(t, "none", read(s.now, payloads, []int64{})[0], "no order, no payload")
	for i := range 20 {
		want, err := pricing.Compute(ctx, s.before, cartOf(i))
		require.NoError(t, err)
		got, err := pricing.Compute(ctx, s.now, cartOf(i))
		require.NoError(t, err)
		assert.Equal(t, want, got)
	}
	events := `SELECT payload::text FROM outbox_events WHERE event_type = 'order.bench' ORDER BY id`
	for _, p := range []*pgxpool.Pool{s.before, s.now} {
		for _, id := range s.orderIDs {
			require.NoError(t, emit.OrderEvent(ctx, p, id, "order.bench", []byte(`{"code":"X"}`)))
		}
	}
	assert.Equal(t, read(s.before, events), read(s.now, events))
}

// BenchmarkSchemaFunctions measures the statements that call campaigns_in_force and
// order_event_payload as the product runs them (pricing.Compute of a three-line cart: every cart
// preview and price check; emit.OrderEvent of an order of three lines: every order event), on a
// database migrated until the functions were SQL functions (00034) and on one migrated as this
// build is, each on one connection of the product's pool settings, rounds in turns so that a
// machine busy with other work weighs on both alike. Beside the wall time per statement it reports
// PostgreSQL's CPU per statement, its backend's from /proc (pg-cpu-µs/op): the database must be
// local, as the tests' own is.
//
//	go test ./migrations -run '^$' -bench BenchmarkSchemaFunctions -benchtime 3s
func BenchmarkSchemaFunctions(b *testing.B) {
	s := newSchemas(b)
	ctx := context.Background()
	statements := []struct {
		name string
		run  func(conn db.DBTX, i int) error
	}{
		{"preview", func(conn db.DBTX, i int) error {
			_, err := pricing.Compute(ctx, conn, cartOf(i))
			return err
		}},
		{"order-event", func(conn db.DBTX, i int) error {
			return emit.OrderEvent(ctx, conn, s.orderIDs[i%len(s.orderIDs)], "order.bench", []byte(`{"code":"X"}`))
		}},
	}
	for round := 1; round <= 3; round++ {
		for _, st := range statements {
			for _, schema := range []struct {
				name string
				pool *pgxpool.Pool
			}{{"sql-functions-" + sqlFunctionsUntil, s.before}, {"this-build", s.now}} {
				b.Run(fmt.Sprintf("round=%d/%s/%s", round, st.name, schema.name), func(b *testing.B) {
					conn, err := schema.pool.Acquire(ctx)
					require.NoError(b, err)
					defer conn.Release()
					var pid int
					require.NoError(b, conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
					// The first calls of a connection compile and plan; they are not what is measured.
					for i := range 20 {
						require.NoError(b, st.run(conn, i))
					}
					from, err := benchkit.ProcTimes(pid)
					require.NoError(b, err)
					b.ResetTimer()
					for i := range b.N {
						if err := st.run(conn, i); err != nil {
							b.Fatal(err)
						}
					}
					b.StopTimer()
					to, err := benchkit.ProcTimes(pid)
					require.NoError(b, err)
					cpu := (to.UTime + to.STime - from.UTime - from.STime) / benchkit.UserHZ
					b.ReportMetric(cpu*1e6/float64(b.N), "pg-cpu-µs/op")
				})
			}
		}
	}
}
