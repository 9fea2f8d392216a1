package inventory_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/marketplace/checkout/internal/dev/benchdata"
	"github.com/marketplace/checkout/internal/dev/benchkit"
	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/inventory"
)

// BenchmarkReserve measures Engine.Reserve as checkout drives it: a fixed number of clients,
// each reserving one unit of one SKU per order. hot puts every client on one inventory row (the
// row lock serialises them); spread picks one of 1000 rows per order. combining=off is every order
// its own reserve_order transaction, combining=on the default engine, which combines concurrent
// orders into shared transactions. `make bench` runs it beside pgbench on the same schema, which
// is the baseline the figures are judged against.
func BenchmarkReserve(b *testing.B) {
	shapes := []struct {
		name string
		skus int
	}{{"hot", 1}, {"spread", 1000}}
	modes := []struct {
		name     string
		inFlight int
	}{{"off", 0}, {"on", inventory.DefaultBatchesInFlight}}
	for _, shape := range shapes {
		b.Run(shape.name, func(b *testing.B) {
			// 200 clients need a pool of 202 connections: it fits the test cluster's 300.
			for _, clients := range []int{8, 50, 200} {
				b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
					for _, mode := range modes {
						b.Run("combining="+mode.name, func(b *testing.B) {
							benchReserve(b, shape.skus, clients, mode.inFlight)
						})
					}
				})
			}
		})
	}
}

// Every benchmark order ships to the same place and holds its stock for as long.
var (
	benchShipTo = inventory.Location{Lat: 41.01, Lon: 28.97}
	benchHold   = 15 * time.Minute
)

// benchReserve runs b.N reservations shared by exactly clients goroutines. The client count is
// the point of the case, so it does not come from GOMAXPROCS as b.RunParallel's would.
func benchReserve(b *testing.B, skus, clients, inFlight int) {
	pool := testenv.PoolOn(b, testenv.DatabaseURL(b), int32(clients+2))
	seedBench(b, pool, skus)
	sizes := &benchBatches{}
	eng := inventory.New(pool, sizes, inventory.WithCombining(inFlight))

	run := driveClients(b, pool, clients, func(ctx context.Context, order int64) error {
		sku := int64(benchdata.FirstSKU + rand.IntN(skus))
		_, err := eng.Reserve(ctx, inventory.ReserveRequest{OrderID: order,
			Lines: []inventory.Line{{SKUID: sku, Quantity: 1}}, ShipTo: benchShipTo, Hold: benchHold})
		if err != nil {
			return fmt.Errorf("reserve order %d sku %d: %w", order, sku, err)
		}
		return nil
	})
	checkBenchRows(b, pool, b.N)
	run.report(b, "reservations/s")
	sizes.report(b)
}

// benchBatches counts the combined batches the engine commits and the orders in them, so that a
// run says how large its batches were (what a batched baseline should be sized by).
type benchBatches struct {
	batches, orders atomic.Int64
}

func (*benchBatches) ReserveResult(string) {}

func (s *benchBatches) ReserveBatch(orders int) { s.batches.Add(1); s.orders.Add(int64(orders)) }

func (s *benchBatches) ConfirmBatch(orders int) { s.batches.Add(1); s.orders.Add(int64(orders)) }

// report adds the mean orders per combined batch (nothing when nothing was combined).
func (s *benchBatches) report(b *testing.B) {
	if n := s.batches.Load(); n > 0 {
		b.ReportMetric(float64(s.orders.Load())/float64(n), "orders/batch")
	}
}

// driven is what driveClients measured: each call's latency, as the caller sees it, the time
// they all took, and the CPU the benchmark's own process (the engine, pgx, the callers) spent
// meanwhile.
type driven struct {
	lat     []time.Duration
	elapsed time.Duration
	cpu     float64 // seconds
}

// driveClients runs op for orders 1..b.N from exactly clients goroutines, on the clock. Every
// connection of pool is opened before the clock starts, as pgbench's tps excludes connecting.
// The first error fails the benchmark.
func driveClients(b *testing.B, pool *pgxpool.Pool, clients int, op func(ctx context.Context, order int64) error) driven {
	ctx := context.Background()
	conns := make([]*pgxpool.Conn, 0, clients)
	for range clients {
		c, err := pool.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}

	var (
		next    atomic.Int64
		failed  atomic.Bool
		firstMu sync.Mutex
		first   error
		wg      sync.WaitGroup
	)
	lat := make([][]time.Duration, clients)

	b.ResetTimer()
	cpu0 := benchkit.SelfJiffies()
	start := time.Now()
	for c := range clients {
		wg.Go(func() {
			for !failed.Load() {
				order := next.Add(1)
				if order > int64(b.N) {
					return
				}
				t0 := time.Now()
				if err := op(ctx, order); err != nil {
					firstMu.Lock()
					if first == nil {
						first = err
					}
					firstMu.Unlock()
					failed.Store(true)
					return
				}
				lat[c] = append(lat[c], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := (benchkit.SelfJiffies() - cpu0) / benchkit.UserHZ
	b.StopTimer()
	if first != nil {
		b.Fatal(first)
	}
	all := slices.Concat(lat...)
	if len(all) != b.N {
		b.Fatalf("%d calls succeeded, want %d", len(all), b.N)
	}
	return driven{lat: all, elapsed: elapsed, cpu: cpu}
}

// report reports the rate of calls (in unit), their median and 99th percentile, and the
// process's CPU per call in microseconds (PostgreSQL's is not in it).
func (d driven) report(b *testing.B, unit string) {
	slices.Sort(d.lat)
	b.ReportMetric(float64(len(d.lat))/d.elapsed.Seconds(), unit)
	b.ReportMetric(benchkit.QuantileMs(d.lat, 0.50), "p50-ms")
	b.ReportMetric(benchkit.QuantileMs(d.lat, 0.99), "p99-ms")
	b.ReportMetric(d.cpu*1e6/float64(len(d.lat)), "client-cpu-us/op")
}

func seedBench(b *testing.B, pool *pgxpool.Pool, skus int) {
	b.Helper()
	if err := benchdata.Seed(context.Background(), pool, skus); err != nil {
		b.Fatal(err)
	}
}

// checkBenchRows proves the figures count real reservations: one row and one reserved unit each.
func checkBenchRows(b *testing.B, pool *pgxpool.Pool, want int) {
	b.Helper()
	var rows, reserved int64
	err := pool.QueryRow(context.Background(),
		`SELECT (SELECT count(*) FROM stock_reservations WHERE status = 'ACTIVE'),
			(SELECT coalesce(sum(reserved), 0) FROM inventory)`).
		Scan(&rows, &reserved)
	if err != nil {
		b.Fatal(err)
	}
	if rows != int64(want) || reserved != int64(want) {
		b.Fatalf("after %d reservations: %d reservation rows, %d units reserved", want, rows, reserved)
	}
}
