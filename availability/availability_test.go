package availability_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/availability"
	"github.com/marketplace/checkout/events"
	"github.com/marketplace/checkout/internal/dev/demo"
	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/internal/metrics"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/outbox"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var quiet = slog.New(slog.NewJSONHandler(io.Discard, nil))

// fixture is a database with the demo data, a stream of the test's own on the test broker, and
// the outbox relay publishing to it.
type fixture struct {
	pool   *pgxpool.Pool
	broker *events.Broker
}

func setup(t *testing.T) fixture {
	t.Helper()
	pool := testenv.Pool(t)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, demo.Load(ctx, pool))
	b, err := events.Connect(events.Options{URL: testenv.NATSURL(t), Prefix: testenv.EventsPrefix(t), Replicas: 1,
		MaxAge: time.Hour, MaxBytes: 256 << 20, Name: t.Name(), Log: quiet})
	require.NoError(t, err)
	relay := &outbox.Relay{Pool: pool, Broker: b, Log: quiet, Interval: 10 * time.Millisecond, Prepare: b.EnsureStream}
	done := make(chan struct{})
	go func() { _ = relay.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; b.Close() })
	return fixture{pool: pool, broker: b}
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

// caughtUp waits until every stock event is published and applied.
func caughtUp(t *testing.T, f fixture, p *availability.Projector) {
	t.Helper()
	require.Eventually(t, func() bool {
		if scalar(t, f.pool, `SELECT count(*) FROM outbox_events WHERE published_at IS NULL`) > 0 {
			return false
		}
		pending, _, err := p.Backlog(context.Background())
		return err == nil && pending == 0
	}, time.Minute, 20*time.Millisecond, "the projection never caught up")
}

func run(t *testing.T, p *availability.Projector) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
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

func TestProjector_BurstAndRestart_ProjectionEqualsTheInventory(t *testing.T) {
	t.Parallel()
	f := setup(t)
	eng := inventory.New(f.pool, nil)
	stamp := time.Now().Add(-time.Hour).UTC()

	first := availability.NewProjector(f.pool, f.broker, nil, quiet)
	stopFirst := run(t, first)
	burst(t, eng, 1, 15, stamp)
	stopFirst() // the projector stops (a deploy, a crash) while changes keep coming

	burst(t, eng, 100_000, 10, stamp.Add(time.Minute))
	// Two workers come back at once; the broker hands each batch to one of them.
	a, b := availability.NewProjector(f.pool, f.broker, nil, quiet), availability.NewProjector(f.pool, f.broker, nil, quiet)
	a.BatchSize, b.BatchSize = 7, 7 // many small batches, so the two really interleave
	stopA, stopB := run(t, a), run(t, b)
	burst(t, eng, 200_000, 5, stamp.Add(2*time.Minute))
	caughtUp(t, f, a)
	stopA()
	stopB()

	assert.Zero(t, scalar(t, f.pool, projectionMismatches), "projection equals the inventory for every SKU")
	assert.Greater(t, scalar(t, f.pool, `SELECT count(*) FROM outbox_events WHERE event_type = 'stock.changed'`), int64(20*30),
		"the burst wrote stock events")
	assert.Zero(t, scalar(t, f.pool, `
		SELECT count(*) FROM sku_warehouse_availability w
		JOIN (SELECT (payload->>'skuId')::bigint AS sku_id, (payload->>'warehouseId')::int AS warehouse_id, max(id) AS last
		        FROM outbox_events WHERE event_type = 'stock.changed' GROUP BY 1, 2) e USING (sku_id, warehouse_id)
		WHERE w.last_event_id <> e.last`), "each row holds its newest event")
}

// An event delivered again, or a copy that arrives after newer ones (a relay's second publish
// beyond the broker's duplicate window), changes nothing.
func TestProjector_RedeliveredOrLateEvent_ChangesNothing(t *testing.T) {
	t.Parallel()
	f := setup(t)
	p := availability.NewProjector(f.pool, f.broker, nil, quiet)
	stop := run(t, p)
	defer stop()
	ctx := context.Background()
	_, err := f.pool.Exec(ctx, `UPDATE inventory SET on_hand = on_hand + 5 WHERE sku_id = 72 AND warehouse_id = 1`)
	require.NoError(t, err)
	_, err = f.pool.Exec(ctx, `UPDATE inventory SET on_hand = on_hand + 1 WHERE sku_id = 72 AND warehouse_id = 1`)
	require.NoError(t, err)
	caughtUp(t, f, p)
	before := scalar(t, f.pool, `SELECT available FROM sku_availability WHERE sku_id = 72`)

	var old events.Row
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT id, aggregate_type, aggregate_id, event_type, payload, created_at
		FROM outbox_events WHERE event_type = 'stock.changed' AND payload->>'skuId' = '72' ORDER BY id LIMIT 1`).
		Scan(&old.ID, &old.AggregateType, &old.AggregateID, &old.Type, &old.Payload, &old.CreatedAt))
	env, err := events.Build(old)
	require.NoError(t, err)
	body, err := json.Marshal(env)
	require.NoError(t, err)
	msg := nats.NewMsg(events.Subject(f.broker.Options().Prefix, events.StockChanged))
	msg.Data = body // no de-duplication id: the stream stores it again
	_, err = f.broker.JetStream().PublishMsg(ctx, msg)
	require.NoError(t, err)
	caughtUp(t, f, p)
	assert.Equal(t, before, scalar(t, f.pool, `SELECT available FROM sku_availability WHERE sku_id = 72`))
	assert.Zero(t, scalar(t, f.pool, projectionMismatches))
}

// TestProjector_Paused_AppliesNothingThenCatchesUp: while paused (the cart's stock hints switched
// off) the projector leaves the events on the stream; unpaused, it applies them.
func TestProjector_Paused_AppliesNothingThenCatchesUp(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	p := availability.NewProjector(f.pool, f.broker, nil, quiet)
	p.FetchWait = 100 * time.Millisecond
	stopFirst := run(t, p)
	caughtUp(t, f, p) // the demo data's stock
	stopFirst()
	before := scalar(t, f.pool, `SELECT available FROM sku_availability WHERE sku_id = 71`)
	_, err := f.pool.Exec(ctx, `UPDATE inventory SET on_hand = on_hand + 1 WHERE sku_id = 71`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return scalar(t, f.pool, `SELECT count(*) FROM outbox_events WHERE published_at IS NULL`) == 0
	}, time.Minute, 20*time.Millisecond)

	paused := true
	p.Paused = func(context.Context) bool { return paused }
	n, err := p.Step(ctx)
	require.NoError(t, err)
	assert.Zero(t, n)
	assert.Equal(t, before, scalar(t, f.pool, `SELECT available FROM sku_availability WHERE sku_id = 71`))

	paused = false
	stop := run(t, p)
	defer stop()
	caughtUp(t, f, p)
	assert.Equal(t, before+3, scalar(t, f.pool, `SELECT available FROM sku_availability WHERE sku_id = 71`), "71 has three rows")
}

func TestTrigger_AnnouncesOnlyChangesOfSellableStock_WithTheirCause(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		sql   string
		cause string // "": no event
	}{
		{"reserve", `UPDATE inventory SET reserved = reserved + 1 WHERE sku_id = 71 AND warehouse_id = 1`, "reserved"},
		{"release", `UPDATE inventory SET reserved = 1 WHERE sku_id = 71 AND warehouse_id = 1;
			 DELETE FROM outbox_events;
			 UPDATE inventory SET reserved = 0 WHERE sku_id = 71 AND warehouse_id = 1`, "released"},
		{"stock report", `UPDATE inventory SET on_hand = 7, source_updated_at = now() WHERE sku_id = 71 AND warehouse_id = 1`, "seller_count"},
		{"restock", `UPDATE inventory SET on_hand = on_hand + 2 WHERE sku_id = 71 AND warehouse_id = 1`, "restocked"},
		{"confirm (on_hand and reserved fall together)",
			`UPDATE inventory SET reserved = 1 WHERE sku_id = 71 AND warehouse_id = 1;
			 DELETE FROM outbox_events;
			 UPDATE inventory SET on_hand = on_hand - 1, reserved = reserved - 1, version = version + 1 WHERE sku_id = 71 AND warehouse_id = 1`, ""},
		{"stamp only", `UPDATE inventory SET source_updated_at = now(), version = version + 1 WHERE sku_id = 71`, ""},
		{"new row", `INSERT INTO inventory (sku_id, warehouse_id, on_hand) VALUES (72, 3, 4)`, "seller_count"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			pool := testenv.Pool(t)
			require.NoError(t, demo.Load(context.Background(), pool))
			_, err := pool.Exec(context.Background(), `DELETE FROM outbox_events`)
			require.NoError(t, err)
			_, err = pool.Exec(context.Background(), c.sql)
			require.NoError(t, err)
			rows, err := pool.Query(context.Background(), `SELECT payload->>'cause' FROM outbox_events WHERE event_type = 'stock.changed'`)
			require.NoError(t, err)
			var causes []string
			for rows.Next() {
				var cause string
				require.NoError(t, rows.Scan(&cause))
				causes = append(causes, cause)
			}
			if c.cause == "" {
				assert.Empty(t, causes)
			} else {
				assert.Equal(t, []string{c.cause}, causes)
			}
		})
	}
}

func TestBacklog_ReportsPendingEventsAndTheirAge_AsGauges(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	m := metrics.New()
	p := availability.NewProjector(f.pool, f.broker, m, quiet)
	m.RegisterAvailabilityGauges(p)
	stopFirst := run(t, p)
	caughtUp(t, f, p) // the demo data's stock
	stopFirst()
	_, err := f.pool.Exec(ctx, `UPDATE inventory SET on_hand = on_hand + 1 WHERE sku_id IN (71, 72)`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return scalar(t, f.pool, `SELECT count(*) FROM outbox_events WHERE published_at IS NULL`) == 0
	}, time.Minute, 20*time.Millisecond)
	time.Sleep(1100 * time.Millisecond)

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
				if h := mt.GetHistogram(); h != nil {
					out[f.GetName()] = float64(h.GetSampleCount())
				}
			}
		}
		return out
	}
	before := gauges()
	assert.EqualValues(t, 5, before["checkout_availability_pending_changes"], "71 has three rows, 72 two")
	assert.GreaterOrEqual(t, before["checkout_availability_lag_seconds"], 1.0)
	assert.Zero(t, before["checkout_availability_scrape_error"])

	stop := run(t, p)
	caughtUp(t, f, p)
	stop()
	after := gauges()
	assert.Zero(t, after["checkout_availability_pending_changes"])
	assert.Zero(t, after["checkout_availability_lag_seconds"])
	assert.GreaterOrEqual(t, after["checkout_availability_events_applied_total"]-before["checkout_availability_events_applied_total"], 5.0)
	assert.GreaterOrEqual(t, after["checkout_availability_event_lag_seconds"]-before["checkout_availability_event_lag_seconds"], 5.0,
		"each event's lag observed")
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
