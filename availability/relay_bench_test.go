package availability_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/marketplace/checkout/availability"
	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/inventory"
)

// BenchmarkRelayBurst measures how far the availability projection falls behind a burst: 50
// clients reserve one unit of a random one of 1000 SKUs as fast as they can (every reservation is
// one change event), while the relay runs as in the worker (default poll interval and batch size).
// A sampler reads the backlog every 10 ms; after the burst the benchmark waits for the relay to
// drain and checks the projection against the inventory.
//
//	TEST_PG_URL=postgres://... go test ./availability -run '^$' -bench BenchmarkRelayBurst -benchtime 20000x
func BenchmarkRelayBurst(b *testing.B) {
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
	relay := availability.NewRelay(pool, nil, nil)
	if _, err := relay.Drain(ctx); err != nil {
		b.Fatal(err)
	}
	eng := inventory.New(pool, nil)

	runCtx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(runCtx) }()

	var maxPending atomic.Int64
	var maxLag atomic.Int64
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sampleCtx.Err() == nil {
			if pending, oldest, err := relay.Backlog(sampleCtx); err == nil {
				if pending > maxPending.Load() {
					maxPending.Store(pending)
				}
				if int64(oldest) > maxLag.Load() {
					maxLag.Store(int64(oldest))
				}
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
		pending, _, err := relay.Backlog(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if pending == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	catchUp := time.Since(start) - burst
	b.StopTimer()
	stopSampling()
	<-sampled
	stopRelay()
	if err := <-relayDone; err != nil {
		b.Fatal(err)
	}
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
		b.Fatalf("%d SKUs differ from the inventory after the relay drained", mismatches)
	}
	b.ReportMetric(float64(b.N)/burst.Seconds(), "reservations/s")
	b.ReportMetric(float64(maxLag.Load())/float64(time.Millisecond), "max-lag-ms")
	b.ReportMetric(float64(maxPending.Load()), "max-pending")
	b.ReportMetric(float64(catchUp)/float64(time.Millisecond), "catch-up-ms")
}
