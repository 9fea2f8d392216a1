package paysim_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/migrations"
	"github.com/marketplace/checkout/payment"
	"github.com/marketplace/checkout/payment/paysim"
)

// simulatorTables lists every table whose name or schema is the simulator's, but for the record
// of its migrations (paysim.VersionTable, beside the product's goose_db_version).
const simulatorTables = `SELECT coalesce(string_agg(n.nspname || '.' || c.relname, ' ' ORDER BY n.nspname, c.relname), '')
	FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
	WHERE c.relkind IN ('r', 'p', 'v', 'm') AND (n.nspname = 'paysim' OR c.relname LIKE 'paysim%')
	  AND c.relname <> '` + paysim.VersionTable + `'`

// productDatabase is an empty database with the product's migrations applied.
func productDatabase(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	url := testenv.EmptyDatabaseURL(t)
	_, err := migrations.Up(context.Background(), url)
	require.NoError(t, err)
	return url, testenv.PoolOn(t, url, 8)
}

func text(t *testing.T, pool *pgxpool.Pool, sql string) string {
	t.Helper()
	var s string
	require.NoError(t, pool.QueryRow(context.Background(), sql).Scan(&s))
	return s
}

// simulatorMigrations are the simulator's migration files, in the order they apply.
func simulatorMigrations(t *testing.T) []string {
	paths, err := filepath.Glob("migrations/*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	names := make([]string, len(paths))
	for i, p := range paths {
		names[i] = filepath.Base(p)
	}
	return names
}

// TestMigrate_FreshDatabase_TablesComeFromTheSimulatorsMigrationsOnly: the product's migrations
// create none of the simulator's tables; the simulator's own create them in schema paysim, once.
func TestMigrate_FreshDatabase_TablesComeFromTheSimulatorsMigrationsOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := productDatabase(t)
	assert.Empty(t, text(t, pool, simulatorTables), "the product's migrations alone")

	applied, err := paysim.Migrate(ctx, url)
	require.NoError(t, err)
	assert.Equal(t, simulatorMigrations(t), applied)
	assert.Equal(t, "paysim.faults paysim.idempotency_keys paysim.intents paysim.refunds paysim.webhook_events", text(t, pool, simulatorTables))
	applied, err = paysim.Migrate(ctx, url)
	require.NoError(t, err)
	assert.Empty(t, applied, "a second start applies nothing")

	sim := paysim.New(pool, paysim.Options{})
	t.Cleanup(sim.Close)
	in, err := sim.Authorize(ctx, payment.AuthorizeRequest{Ref: payment.Ref{Key: "k1", OrderID: 1}, AmountMinor: 100,
		Currency: "TRY", PaymentMethodToken: paysim.TokenOK})
	require.NoError(t, err)
	assert.Equal(t, payment.StatusAuthorized, in.Status)
	f, err := sim.Faults(ctx)
	require.NoError(t, err)
	assert.Zero(t, f, "the fault switch's row, unset")
}

// TestMigrate_ConcurrentStarts_ApplyOnce: processes starting at once on one database wait for each
// other; the schema is made once and every one of them runs on it.
func TestMigrate_ConcurrentStarts_ApplyOnce(t *testing.T) {
	t.Parallel()
	url, _ := productDatabase(t)
	var wg sync.WaitGroup
	applied := make([][]string, 4)
	errs := make([]error, 4)
	for i := range 4 {
		wg.Go(func() { applied[i], errs[i] = paysim.Migrate(context.Background(), url) })
	}
	wg.Wait()
	var all []string
	for i := range 4 {
		require.NoError(t, errs[i])
		all = append(all, applied[i]...)
	}
	slices.Sort(all)
	assert.Equal(t, simulatorMigrations(t), all, "each migration applied once, by one of them")
}

// TestMigrate_OldPublicTables_MovedWithTheirRows: a database of the releases before, whose
// simulator kept its tables in the product's schema (public.paysim_*), keeps every row, moved into
// schema paysim; nothing is left in public, and the moved schema is the one a fresh database gets,
// names of constraints and indexes included.
func TestMigrate_OldPublicTables_MovedWithTheirRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := productDatabase(t)
	old, err := os.ReadFile("testdata/public_tables_before.sql")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, string(old))
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `
		INSERT INTO paysim_intents (id, idempotency_key, order_id, amount_minor, currency, token, status, captured_minor, refunded_minor)
		VALUES ('pi_running', 'order-7-pay', 7, 124990, 'TRY', 'tok_ok', 'CAPTURED', 124990, 1000);
		INSERT INTO paysim_refunds (refund_key, intent_id, amount_minor) VALUES ('order-7-cancel-1', 'pi_running', 1000);
		INSERT INTO paysim_webhook_events (id, intent_id, type, payload) VALUES ('evt_1', 'pi_running', 'payment_intent.authorized', '{}');
		UPDATE paysim_faults SET latency_ms = 5`)
	require.NoError(t, err)

	applied, err := paysim.Migrate(ctx, url)
	require.NoError(t, err)
	assert.Equal(t, simulatorMigrations(t), applied)
	assert.Equal(t, "paysim.faults paysim.idempotency_keys paysim.intents paysim.refunds paysim.webhook_events", text(t, pool, simulatorTables),
		"moved, none left in public")

	sim := paysim.New(pool, paysim.Options{})
	t.Cleanup(sim.Close)
	in, err := sim.Lookup(ctx, payment.Ref{Key: "order-7-pay", OrderID: 7})
	require.NoError(t, err)
	assert.Equal(t, payment.Intent{ID: "pi_running", IdempotencyKey: "order-7-pay", OrderID: 7, Status: payment.StatusCaptured,
		AmountMinor: 124990, CapturedMinor: 124990, RefundedMinor: 1000, Currency: "TRY"}, in)
	again, err := sim.RefundPart(ctx, payment.Ref{Key: "order-7-pay", OrderID: 7}, payment.PartialRefund{IdempotencyKey: "order-7-cancel-1", AmountMinor: 1000})
	require.NoError(t, err)
	assert.Equal(t, int64(1000), again.RefundedMinor, "the refund made before the move answers its repeat")
	f, err := sim.Faults(ctx)
	require.NoError(t, err)
	assert.Equal(t, paysim.Faults{Latency: 5 * time.Millisecond}, f)
	assert.Equal(t, "evt_1", text(t, pool, `SELECT string_agg(id, ' ') FROM paysim.webhook_events`))

	freshURL, fresh := productDatabase(t)
	_, err = paysim.Migrate(ctx, freshURL)
	require.NoError(t, err)
	assert.Equal(t, text(t, fresh, schemaOf), text(t, pool, schemaOf))
}

// schemaOf describes schema paysim: columns, constraints and indexes, with their names.
const schemaOf = `SELECT string_agg(d, E'\n' ORDER BY d) FROM (
	SELECT format('column %s.%s %s %s %s', c.table_name, c.column_name, c.data_type, c.is_nullable, c.column_default) AS d
	FROM information_schema.columns c WHERE c.table_schema = 'paysim'
	UNION ALL
	SELECT format('constraint %s %s %s', conrelid::regclass, conname, pg_get_constraintdef(oid))
	FROM pg_constraint WHERE connamespace = 'paysim'::regnamespace
	UNION ALL
	SELECT format('index %s', indexdef) FROM pg_indexes WHERE schemaname = 'paysim') s`
