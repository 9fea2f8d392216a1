package availability_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/availability"
	"github.com/marketplace/checkout/internal/dev/demo"
	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/internal/metrics"
	"github.com/marketplace/checkout/inventory"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// setup returns a pool on a fresh database with the demo data and, for the proofs, an audit table
// that keeps every change event id ever written (the relay deletes the events it applies).
func setup(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := testenv.Pool(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `
		CREATE TABLE test_change_audit (id BIGINT PRIMARY KEY, sku_id BIGINT NOT NULL);
		CREATE FUNCTION test_audit_change() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO test_change_audit VALUES (NEW.id, NEW.sku_id); RETURN NULL; END $$;
		CREATE TRIGGER test_audit AFTER INSERT ON inventory_changes
			FOR EACH ROW EXECUTE FUNCTION test_audit_change();`)
	require.NoError(t, err)
	require.NoError(t, demo.Load(ctx, pool))
	return pool
}

func scalar(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// projectionMismatches counts SKUs whose projected availability differs from the inventory's sum.
const projectionMismatches = `
	SELECT count(*) FROM (
		SELECT sku_id, sum(on_hand - reserved)::int AS available FROM inventory GROUP BY sku_id
	) t FULL JOIN sku_availability a USING (sku_id)
	WHERE t.available IS DISTINCT FROM a.available`

// drained returns a pool on a fresh database with the demo data, and a relay that has applied
// every change event so far.
func drained(t *testing.T) (*pgxpool.Pool, *availability.Relay) {
	t.Helper()
	pool := setup(t)
	relay := availability.NewRelay(pool, nil, nil)
	_, err := relay.Drain(context.Background())
	require.NoError(t, err)
	return pool, relay
}

// waitDrained polls until no change event is left; it fails the test only if that never happens.
func waitDrained(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	require.Eventually(t, func() bool {
		return scalar(t, pool, `SELECT count(*) FROM inventory_changes`) == 0
	}, 60*time.Second, 20*time.Millisecond, "the relay never caught up")
}

func runRelay(t *testing.T, r *availability.Relay) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	return func() {
		cancel()
		require.NoError(t, <-done)
	}
}

// burst changes the stock of SKUs 71–90 from many goroutines at once: seller stock reports and
// reservations (with some released again), as a campaign would.
func burst(t *testing.T, eng *inventory.Engine, firstOrder int64, rounds int, stamp time.Time) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 20*rounds)
	for w := range 20 {
		wg.Go(func() {
			sku := int64(71 + w)
			seller := demo.SKUs[w].SellerID
			for i := range rounds {
				order := firstOrder + int64(w*rounds+i)
				_, err := eng.ApplySellerStock(ctx, seller, inventory.StockUpdate{SKUID: sku, WarehouseID: 1,
					Quantity: int32(50 + rand.IntN(50)), SourceUpdatedAt: stamp.Add(time.Duration(i+1) * time.Millisecond)})
				if err != nil {
					errs <- fmt.Errorf("stock sku %d: %w", sku, err)
					return
				}
				_, err = eng.Reserve(ctx, inventory.ReserveRequest{OrderID: order,
					Lines: []inventory.Line{{SKUID: sku, Quantity: 1}}, ShipTo: inventory.Location{Lat: 41, Lon: 29}, Hold: time.Hour})
				if err != nil {
					errs <- fmt.Errorf("reserve sku %d: %w", sku, err)
					return
				}
				if i%3 == 0 {
					if _, err := eng.Release(ctx, order); err != nil {
						errs <- fmt.Errorf("release order %d: %w", order, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

func TestRelay_BurstAndRestart_ProjectionCatchesUpAndAppliesEveryEventOnce(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	eng := inventory.New(pool, nil)
	stamp := time.Now().Add(-time.Hour).UTC()

	first := availability.NewRelay(pool, nil, nil)
	stopFirst := runRelay(t, first)
	burst(t, eng, 1, 15, stamp)
	stopFirst() // the relay stops (a deploy, a crash) while changes keep coming

	burst(t, eng, 100_000, 10, stamp.Add(time.Minute))
	require.Positive(t, scalar(t, pool, `SELECT count(*) FROM inventory_changes`), "changes waited for a relay")

	// Two replicas come back at once; the cursor row lets one of them work at a time.
	a, b := availability.NewRelay(pool, nil, nil), availability.NewRelay(pool, nil, nil)
	a.BatchSize, b.BatchSize = 7, 7 // many small batches, so the two really interleave
	stopA, stopB := runRelay(t, a), runRelay(t, b)
	burst(t, eng, 200_000, 5, stamp.Add(2*time.Minute))
	waitDrained(t, pool)
	stopA()
	stopB()

	assert.Zero(t, scalar(t, pool, projectionMismatches), "projection equals the inventory for every SKU")
	written := scalar(t, pool, `SELECT count(*) FROM test_change_audit`)
	assert.Greater(t, written, int64(20*30), "the burst wrote change events")
	assert.Equal(t, written, scalar(t, pool, `SELECT events_applied FROM availability_relay`),
		"every event applied exactly once: the applied counter equals the distinct events written")
	assert.Equal(t, scalar(t, pool, `SELECT max(id) FROM test_change_audit`),
		scalar(t, pool, `SELECT last_event_id FROM availability_relay`), "the cursor reached the last event")
	assert.Zero(t, scalar(t, pool, `
		SELECT count(*) FROM sku_availability a
		JOIN (SELECT sku_id, max(id) AS last FROM test_change_audit GROUP BY sku_id) e USING (sku_id)
		WHERE a.last_event_id <> e.last`), "each SKU row names its newest event")
}

func TestRelay_Step_AnotherRelayHoldsTheCursor_Skips(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	ctx := context.Background()
	_, err := availability.NewRelay(pool, nil, nil).Drain(ctx)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE inventory SET on_hand = on_hand + 1 WHERE sku_id = 71`)
	require.NoError(t, err)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1 FROM availability_relay WHERE id = 1 FOR UPDATE`)
	require.NoError(t, err)
	res, err := availability.NewRelay(pool, nil, nil).Step(ctx)
	require.NoError(t, err)
	assert.True(t, res.Busy)
	assert.Zero(t, res.Applied)
	require.NoError(t, tx.Rollback(ctx))

	res, err = availability.NewRelay(pool, nil, nil).Step(ctx)
	require.NoError(t, err)
	assert.False(t, res.Busy)
	assert.Equal(t, 3, res.Applied, "71 has rows in three warehouses")
	assert.EqualValues(t, 83, scalar(t, pool, `SELECT available FROM sku_availability WHERE sku_id = 71`))
}

// TestRelay_Paused_AppliesNothingThenCatchesUp: while paused (the cart's stock hints switched
// off) the relay leaves the change events waiting; unpaused, it applies them.
func TestRelay_Paused_AppliesNothingThenCatchesUp(t *testing.T) {
	t.Parallel()
	pool, relay := drained(t)
	ctx := context.Background()
	before := scalar(t, pool, `SELECT available FROM sku_availability WHERE sku_id = 71`)
	_, err := pool.Exec(ctx, `UPDATE inventory SET on_hand = on_hand + 1 WHERE sku_id = 71`)
	require.NoError(t, err)

	paused := true
	relay.Paused = func(context.Context) bool { return paused }
	applied, err := relay.Drain(ctx)
	require.NoError(t, err)
	assert.Zero(t, applied)
	assert.Equal(t, before, scalar(t, pool, `SELECT available FROM sku_availability WHERE sku_id = 71`))
	assert.EqualValues(t, 3, scalar(t, pool, `SELECT count(*) FROM inventory_changes`), "the events wait")

	paused = false
	applied, err = relay.Drain(ctx)
	require.NoError(t, err)
	assert.Equal(t, 3, applied)
	assert.Equal(t, before+3, scalar(t, pool, `SELECT available FROM sku_availability WHERE sku_id = 71`))
}

func TestRelay_LateCommittingLowerID_IsStillApplied(t *testing.T) {
	t.Parallel()
	pool, relay := drained(t)
	ctx := context.Background()

	// A transaction takes an event id and commits only after a later id was applied.
	slow, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = slow.Exec(ctx, `UPDATE inventory SET on_hand = on_hand + 5 WHERE sku_id = 72 AND warehouse_id = 1`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE inventory SET on_hand = on_hand + 1 WHERE sku_id = 73 AND warehouse_id = 1`)
	require.NoError(t, err)
	_, err = relay.Drain(ctx)
	require.NoError(t, err)
	require.NoError(t, slow.Commit(ctx))

	_, err = relay.Drain(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 35, scalar(t, pool, `SELECT available FROM sku_availability WHERE sku_id = 72`))
	assert.Zero(t, scalar(t, pool, projectionMismatches))
	assert.Zero(t, scalar(t, pool, `SELECT count(*) FROM inventory_changes`))
}

func TestTrigger_AnnouncesOnlyChangesOfSellableStock(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		sql    string
		events int64
	}{
		{"reserve", `UPDATE inventory SET reserved = reserved + 1 WHERE sku_id = 71 AND warehouse_id = 1`, 1},
		{"stock report", `UPDATE inventory SET on_hand = 7, source_updated_at = now() WHERE sku_id = 71 AND warehouse_id = 1`, 1},
		{"confirm (on_hand and reserved fall together)",
			`UPDATE inventory SET reserved = 1 WHERE sku_id = 71 AND warehouse_id = 1;
			 DELETE FROM inventory_changes;
			 UPDATE inventory SET on_hand = on_hand - 1, reserved = reserved - 1, version = version + 1 WHERE sku_id = 71 AND warehouse_id = 1`, 0},
		{"stamp only", `UPDATE inventory SET source_updated_at = now(), version = version + 1 WHERE sku_id = 71`, 0},
		{"new row", `INSERT INTO inventory (sku_id, warehouse_id, on_hand) VALUES (72, 3, 4)`, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			pool := setup(t)
			_, err := pool.Exec(context.Background(), `DELETE FROM inventory_changes`)
			require.NoError(t, err)
			_, err = pool.Exec(context.Background(), c.sql)
			require.NoError(t, err)
			assert.Equal(t, c.events, scalar(t, pool, `SELECT count(*) FROM inventory_changes`))
		})
	}
}

func TestBacklog_ReportsPendingChangesAndTheirAge_AsGauges(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	ctx := context.Background()
	m := metrics.New()
	relay := availability.NewRelay(pool, m, nil)
	m.RegisterAvailabilityGauges(relay)
	_, err := relay.Drain(ctx)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE inventory SET on_hand = on_hand + 1 WHERE sku_id IN (71, 72);
		UPDATE inventory_changes SET changed_at = now() - interval '30 seconds'`)
	require.NoError(t, err)

	gauges := func() map[string]float64 {
		out := map[string]float64{}
		families, err := m.Registry.Gather()
		require.NoError(t, err)
		for _, f := range families {
			for _, mt := range f.GetMetric() {
				if g := mt.GetGauge(); g != nil {
					out[f.GetName()] = g.GetValue()
				}
				if c := mt.GetCounter(); c != nil {
					out[f.GetName()] = c.GetValue()
				}
			}
		}
		return out
	}
	before := gauges()
	assert.EqualValues(t, 5, before["checkout_availability_pending_changes"], "71 has three rows, 72 two")
	assert.GreaterOrEqual(t, before["checkout_availability_lag_seconds"], 30.0)
	assert.Zero(t, before["checkout_availability_scrape_error"])

	_, err = relay.Drain(ctx)
	require.NoError(t, err)
	after := gauges()
	assert.Zero(t, after["checkout_availability_pending_changes"])
	assert.Zero(t, after["checkout_availability_lag_seconds"])
	assert.GreaterOrEqual(t, after["checkout_availability_events_applied_total"], 5.0)
}

func TestHint(t *testing.T) {
	t.Parallel()
	cases := []struct {
		available int32
		known     bool
		want      string
	}{
		{0, false, availability.Unknown},
		{-1, true, availability.OutOfStock},
		{0, true, availability.OutOfStock},
		{1, true, availability.LowStock},
		{3, true, availability.LowStock},
		{4, true, availability.InStock},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, availability.Hint(c.available, c.known, 3), "available %d known %v", c.available, c.known)
	}
}
