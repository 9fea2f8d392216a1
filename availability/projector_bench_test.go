package availability_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/marketplace/checkout/availability"
	"github.com/marketplace/checkout/events"
	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/outbox"
)

// lags collects every event's end-to-end lag, as the metrics' histogram sees them.
type lags struct {
	mu  sync.Mutex
	all []time.Duration
}

func (l *lags) AvailabilityApplied(int, int) {}
func (l *lags) AvailabilityLag(d time.Duration) {
	l.mu.Lock()
	l.all = append(l.all, d)
	l.mu.Unlock()
}

func (l *lags) quantile(q float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.all) == 0 {
		return 0
	}
	s := slices.Clone(l.all)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// BenchmarkProjectorBurst measures how far the availability projection falls behind a burst, end
// to end: 50 clients reserve one unit of a random one of 1000 SKUs as fast as they can (every
// reservation is one stock.changed event written in its transaction), while the outbox relay
// publishes to the test's nats-server and the projector consumes, as in the worker. Reported: each
// event's lag from its change to the projection's commit (p50, p99, max), the most events waiting
// (in the outbox or on the stream), and how long after the burst everything was applied; then the
// projection is checked against the inventory.
//
//	TEST_PG_URL=postgres://... go test ./availability -run '^$' -bench BenchmarkProjectorBurst -benchtime 20000x
func BenchmarkProjectorBurst(b *testing.B) {
	const clients, skus = 50, 1000
	ctx := context.Background()
	pool := testenv.PoolOn(b, testenv.DatabaseURL(b), clients+5)
	for _, s := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO warehouses (id, code, name, city, lat, lon) VALUES (1, 'IST', 'Istanbul', 'Istanbul', 41.01, 28.97)`, nil},
		{`INSERT INTO sellers (id, name) VALUES (42, 'Seller 42')`, nil},
		{`INSERT INTO skus (id, seller_id, code, title, price_minor, currency, max_per_order)
		  SELECT 1000 + g, 42, 'S-' || g, 'SKU ' || g, 10000, 'TRY', 10 FROM generate_series(0, $1::int - 1) g`, []any{skus}},
		{`INSERT INTO inventory (sku_id, warehouse_id, on_hand) SELECT 1000 + g, 1, 100000000 FROM generate_series(0, $1::int - 1) g`, []any{skus}},
		{`ANALYZE`, nil},
	} {
		if _, err := pool.Exec(ctx, s.sql, s.args...); err != nil {
			b.Fatal(err)
		}
	}
	broker, err := events.Connect(events.Options{URL: testenv.NATSURL(b), Prefix: testenv.EventsPrefix(b), Replicas: 1,
		MaxAge: time.Hour, MaxBytes: 1 << 30, Name: "bench", Log: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer broker.Close()
	relay := &outbox.Relay{Pool: pool, Broker: broker, Log: quiet, Prepare: broker.EnsureStream}
	seen := &lags{}
	projector := availability.NewProjector(pool, broker, seen, quiet)
	runCtx, stop := context.WithCancel(ctx)
	var loops sync.WaitGroup
	loops.Go(func() { _ = relay.Run(runCtx) })
	loops.Go(func() { _ = projector.Run(runCtx) })
	waiting := func(ctx context.Context) (int64, error) {
		out, _, err := relay.Backlog(ctx)
		if err != nil {
			return 0, err
		}
		onStream, _, err := projector.Backlog(ctx)
		return out + onStream, err
	}
	for { // the starting stock, applied
		if n, err := waiting(ctx); err == nil && n == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	seen.all = nil
	eng := inventory.New(pool, nil)

	var maxPending atomic.Int64
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sampleCtx.Err() == nil {
			if n, err := waiting(sampleCtx); err == nil && n > maxPending.Load() {
				maxPending.Store(n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()

	var next atomic.Int64
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range clients {
		wg.Go(func() {
			for firstErr.Load() == nil {
				order := next.Add(1)
				if order > int64(b.N) {
					return
				}
				_, err := eng.Reserve(ctx, inventory.ReserveRequest{OrderID: order,
					Lines:  []inventory.Line{{SKUID: int64(1000 + rand.IntN(skus)), Quantity: 1}},
					ShipTo: inventory.Location{Lat: 41, Lon: 29}, Hold: time.Hour})
				if err != nil {
					err = fmt.Errorf("order %d: %w", order, err)
					firstErr.Store(&err)
				}
			}
		})
	}
	wg.Wait()
	burst := time.Since(start)
	for {
		n, err := waiting(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if n == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	catchUp := time.Since(start) - burst
	b.StopTimer()
	stopSampling()
	<-sampled
	stop()
	loops.Wait()
	if err := firstErr.Load(); err != nil {
		b.Fatal(*err)
	}
	var mismatches int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM (
			SELECT sku_id, sum(on_hand - reserved)::int AS available FROM inventory GROUP BY sku_id
		) t FULL JOIN sku_availability a USING (sku_id) WHERE t.available IS DISTINCT FROM a.available`).Scan(&mismatches); err != nil {
		b.Fatal(err)
	}
	if mismatches != 0 {
		b.Fatalf("%d SKUs differ from the inventory after the projector caught up", mismatches)
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(float64(b.N)/burst.Seconds(), "reservations/s")
	b.ReportMetric(ms(seen.quantile(0.5)), "lag-p50-ms")
	b.ReportMetric(ms(seen.quantile(0.99)), "lag-p99-ms")
	b.ReportMetric(ms(seen.quantile(1)), "lag-max-ms")
	b.ReportMetric(float64(maxPending.Load()), "max-waiting")
	b.ReportMetric(float64(catchUp)/float64(time.Millisecond), "catch-up-ms")
}
