package inventory_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/audit"
	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/inventory"
)

// confirmBatches records the size of every combined confirm batch, and those that failed.
type confirmBatches struct {
	mu     sync.Mutex
	sizes  []int
	failed []string
	sent   chan int
}

func newConfirmBatches() *confirmBatches { return &confirmBatches{sent: make(chan int, 10_000)} }

func (*confirmBatches) ReserveResult(string) {}

func (b *confirmBatches) ConfirmBatch(orders int) {
	b.mu.Lock()
	b.sizes = append(b.sizes, orders)
	b.mu.Unlock()
	b.sent <- orders
}

func (b *confirmBatches) ConfirmBatchFailed(orders int, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failed = append(b.failed, fmt.Sprintf("%d order(s): %v", orders, err))
}

func (b *confirmBatches) all() (sizes []int, failed []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int(nil), b.sizes...), append([]string(nil), b.failed...)
}

var (
	_ inventory.ConfirmBatchObserver        = (*confirmBatches)(nil)
	_ inventory.ConfirmBatchFailureObserver = (*confirmBatches)(nil)
)

type confirmed struct {
	res inventory.ConfirmResult
	err error
}

// enqueueConfirm confirms the order from its own goroutine and returns once the confirm waits for
// a batch (the order's n-th waiting confirm), so that orders enter the next batch in the order
// they are enqueued.
func (f *fixture) enqueueConfirm(order int64, n int) <-chan confirmed {
	f.t.Helper()
	out := make(chan confirmed, 1)
	go func() {
		res, err := f.eng.Confirm(f.ctx, order)
		out <- confirmed{res, err}
	}()
	require.Eventually(f.t, func() bool { return inventory.ConfirmWaiting(f.eng, order) >= n },
		30*time.Second, time.Millisecond, "confirm of order %d never queued", order)
	return out
}

// holdConfirms keeps a confirm batch of sku's row in flight: it holds the row in a transaction of
// its own and confirms order first, whose batch (of one) then waits for the row. Confirms of the
// SKU enqueued next wait for the next batch. release lets the row go; wait returns order first's
// answer.
func (f *fixture) holdConfirms(obs *confirmBatches, sku, first int64) (release func(), wait func() confirmed) {
	f.t.Helper()
	tx := f.holdRows(fmt.Sprintf("sku_id = %d", sku))
	out := make(chan confirmed, 1)
	go func() {
		res, err := f.eng.Confirm(f.ctx, first)
		out <- confirmed{res, err}
	}()
	require.Equal(f.t, 1, <-obs.sent, "the first confirm is a batch of its own")
	f.waitForLockWaiters(1)
	var once sync.Once
	release = func() { once.Do(func() { require.NoError(f.t, tx.Commit(f.ctx)) }) }
	return release, func() confirmed { return <-out }
}

func line(sku int64, qty int32) inventory.Line { return inventory.Line{SKUID: sku, Quantity: qty} }

// reserveEach reserves each order's lines, shipped to Istanbul.
func (f *fixture) reserveEach(orders map[int64][]inventory.Line) {
	f.t.Helper()
	for order, lines := range orders {
		_, err := f.reserve(order, istanbul, lines...)
		require.NoError(f.t, err)
	}
}

// sales returns the SALE entries of the row's stock ledger, oldest first.
func (f *fixture) sales(sku int64, wh int32) []int32 {
	f.t.Helper()
	rows, err := f.pool.Query(f.ctx, `SELECT delta FROM inventory_ledger
		WHERE sku_id = $1 AND warehouse_id = $2 AND kind = 'SALE' ORDER BY id`, sku, wh)
	require.NoError(f.t, err)
	defer rows.Close()
	var out []int32
	for rows.Next() {
		var d int32
		require.NoError(f.t, rows.Scan(&d))
		out = append(out, d)
	}
	require.NoError(f.t, rows.Err())
	return out
}

// assertAudited runs the invariant auditor over the fixture's database (stock ledger against
// on_hand and the CONFIRMED reservations) and expects nothing.
func (f *fixture) assertAudited() {
	f.t.Helper()
	rep, err := audit.Run(f.ctx, f.pool, audit.Options{})
	require.NoError(f.t, err)
	assert.Empty(f.t, rep.Violations, "the invariant auditor finds nothing")
}

// confirmModes are the engine's two confirm paths: concurrent confirms combined into shared
// transactions (the default) and every confirm its own transaction (CONFIRM_COMBINING=false).
var confirmModes = []struct {
	name string
	opts []inventory.Option
}{
	{"combined", nil},
	{"direct", []inventory.Option{inventory.WithConfirmCombining(0)}},
}

// TestConfirm_HotSKU200Clients_EveryOrderConfirmedOnce: 500 paid orders of one row confirmed by
// 200 clients at once, while 100 more stay ACTIVE, then 50 confirmed again.
func TestConfirm_HotSKU200Clients_EveryOrderConfirmedOnce(t *testing.T) {
	t.Parallel()
	for _, mode := range confirmModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			obs := newConfirmBatches()
			f := newFixtureWith(t, obs, mode.opts...)
			const stock, orders, paid, clients = 5000, 600, 500, 200
			f.sku(77, map[int32]int32{whIstanbul: stock})
			qty := func(order int64) int32 { return int32(1 + order%3) }
			ok, refused, failed := f.reserveConcurrently(50, orders, func(order int64) []inventory.Line {
				return []inventory.Line{{SKUID: 77, Quantity: qty(order)}}
			})
			require.Equal(t, orders, ok, "refused %d, failed %d", refused, failed)

			var next, confirmedOrders atomic.Int64
			var wg sync.WaitGroup
			for range clients {
				wg.Go(func() {
					for {
						order := next.Add(1)
						if order > paid {
							return
						}
						res, err := f.eng.Confirm(f.ctx, order)
						if assert.NoError(t, err, "confirm %d", order) {
							assert.Equal(t, inventory.ConfirmResult{Confirmed: 1}, res, "order %d", order)
							confirmedOrders.Add(1)
						}
					}
				})
			}
			wg.Wait()
			require.EqualValues(t, paid, confirmedOrders.Load())
			for order := int64(1); order <= 50; order++ {
				res, err := f.eng.Confirm(f.ctx, order)
				require.NoError(t, err)
				assert.True(t, res.Already, "a repeat of order %d changes nothing", order)
			}

			var sold, held int32
			for order := int64(1); order <= orders; order++ {
				if order <= paid {
					sold += qty(order)
				} else {
					held += qty(order)
				}
			}
			onHand, reserved := f.row(77, whIstanbul)
			assert.Equal(t, stock-sold, onHand, "on_hand moved by exactly the confirmed units")
			assert.Equal(t, held, reserved, "the unpaid orders still hold theirs")
			assert.Equal(t, paid, f.count(`SELECT count(*) FROM stock_reservations WHERE status = 'CONFIRMED'`))
			assert.Equal(t, orders-paid, f.count(`SELECT count(*) FROM stock_reservations WHERE status = 'ACTIVE'`))
			var ledger int32
			for _, d := range f.sales(77, whIstanbul) {
				ledger -= d
			}
			assert.Equal(t, sold, ledger, "the ledger's sales add up to the confirmed units")
			f.assertConsistent()
			f.assertAudited()

			sizes, batchFailures := obs.all()
			assert.Empty(t, batchFailures, "no combined batch failed")
			if mode.name == "direct" {
				assert.Empty(t, sizes, "no confirm went through a combiner")
				return
			}
			sum, largest := 0, 0
			for _, n := range sizes {
				sum += n
				largest = max(largest, n)
			}
			assert.Equal(t, paid, sum, "every first confirm went through a batch (repeats go alone, without)")
			assert.Greater(t, largest, 1, "confirms of the hot row were combined")
			assert.Len(t, f.sales(77, whIstanbul), len(sizes), "one ledger entry per batch: the row moved once by each")
			t.Logf("%d batches, largest %d orders", len(sizes), largest)
		})
	}
}

// TestConfirm_CombinedBatch_EachOrderItsOwnAnswer: one batch holds orders to confirm and an order
// a seller shortfall partly released; the latter is refused and gives back the rest, the others
// are confirmed, and a repeat of one of them, queued meanwhile, goes next and is Already.
func TestConfirm_CombinedBatch_EachOrderItsOwnAnswer(t *testing.T) {
	t.Parallel()
	obs := newConfirmBatches()
	f := newFixtureWith(t, obs)
	f.sku(77, map[int32]int32{whIstanbul: 100})
	f.sku(78, map[int32]int32{whIstanbul: 10})
	f.reserveEach(map[int64][]inventory.Line{
		1: {line(77, 1)},
		2: {line(77, 2)},
		3: {line(77, 4), line(78, 2)},
		4: {line(77, 3)},
	})
	// A seller shortfall takes order 3's line of SKU 78.
	res, err := f.eng.ApplySellerStock(f.ctx, 42, inventory.StockUpdate{SKUID: 78, WarehouseID: whIstanbul,
		Quantity: 0, SourceUpdatedAt: time.Now()})
	require.NoError(t, err)
	require.Equal(t, inventory.StockAppliedWithShortfall, res.Status)

	release, wait := f.holdConfirms(obs, 77, 1)
	second := f.enqueueConfirm(2, 1)
	third := f.enqueueConfirm(3, 1)
	fourth := f.enqueueConfirm(4, 1)
	again := f.enqueueConfirm(2, 2)

	release()

	first := wait()
	require.NoError(t, first.err)
	assert.Equal(t, inventory.ConfirmResult{Confirmed: 1}, first.res)
	for _, c := range []<-chan confirmed{second, fourth} {
		r := <-c
		require.NoError(t, r.err)
		assert.Equal(t, inventory.ConfirmResult{Confirmed: 1}, r.res)
	}
	r := <-third
	var notActive *inventory.NotActiveError
	require.ErrorAs(t, r.err, &notActive)
	assert.Equal(t, inventory.NotActiveError{OrderID: 3, Released: 1}, *notActive)
	r = <-again
	require.NoError(t, r.err)
	assert.Equal(t, inventory.ConfirmResult{Already: true}, r.res, "the repeat changes nothing")

	sizes, failed := obs.all()
	assert.Equal(t, []int{1, 3, 1}, sizes, "orders 2, 3 and 4 went as one batch, the repeat after it")
	assert.Empty(t, failed)
	onHand, reserved := f.row(77, whIstanbul)
	assert.EqualValues(t, 100-1-2-3, onHand, "on_hand moved by exactly the confirmed units")
	assert.Zero(t, reserved, "order 3's line of 77 was given back, not stranded")
	assert.Equal(t, []int32{-1, -5}, f.sales(77, whIstanbul), "the batch moved the row once, by its total")
	assert.Zero(t, f.count(`SELECT count(*) FROM stock_reservations WHERE order_id = 3 AND status <> 'RELEASED'`))
	assert.Equal(t, 3, f.count(`SELECT count(*) FROM stock_reservations WHERE order_id IN (1, 2, 4) AND status = 'CONFIRMED'`))
	f.assertConsistent()
	f.assertAudited()
}

// TestConfirm_CombinedBatchFails_OrdersConfirmedEachAlone: a batch that fails as a whole changes
// nothing, and each of its orders is then confirmed alone.
func TestConfirm_CombinedBatchFails_OrdersConfirmedEachAlone(t *testing.T) {
	t.Parallel()
	obs := newConfirmBatches()
	f := newFixtureWith(t, obs)
	f.sku(77, map[int32]int32{whIstanbul: 10})
	for order := int64(1); order <= 3; order++ {
		_, err := f.reserve(order, istanbul, inventory.Line{SKUID: 77, Quantity: int32(order)})
		require.NoError(t, err)
	}
	// A broken batch statement: only the combined path uses it.
	f.exec(`ALTER FUNCTION confirm_orders(BIGINT[]) RENAME TO confirm_orders_off`)
	release, wait := f.holdConfirms(obs, 77, 1)
	second := f.enqueueConfirm(2, 1)
	third := f.enqueueConfirm(3, 1)

	release()

	require.NoError(t, wait().err)
	for _, r := range []confirmed{<-second, <-third} {
		require.NoError(t, r.err)
		assert.Equal(t, inventory.ConfirmResult{Confirmed: 1}, r.res)
	}
	sizes, failed := obs.all()
	assert.Equal(t, []int{1, 2, 1, 1}, sizes, "the two orders were sent as one batch first, then each alone")
	assert.Len(t, failed, 1, "the batch failed once, as a whole")
	onHand, reserved := f.row(77, whIstanbul)
	assert.EqualValues(t, 10-1-2-3, onHand)
	assert.Zero(t, reserved)
	assert.Equal(t, []int32{-1, -2, -3}, f.sales(77, whIstanbul), "each order moved the row alone")
	f.assertConsistent()
	f.assertAudited()
}

// TestConfirmOrders_EachKindOfOrderInOneStatement_StampedAfterTheReportItWaitedFor: the batch
// statement answers each order on its own (confirmed, already confirmed, partly released, no
// reservation) and, having waited for a row a seller report held, stamps its confirms after that
// report's commit, as SoldAfterCount requires.
func TestConfirmOrders_EachKindOfOrderInOneStatement_StampedAfterTheReportItWaitedFor(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.sku(77, map[int32]int32{whIstanbul: 10})
	f.sku(78, map[int32]int32{whIstanbul: 10})
	f.reserveEach(map[int64][]inventory.Line{
		1: {line(77, 1)},
		2: {line(77, 1)},
		3: {line(77, 1), line(78, 1)},
		5: {line(77, 2), line(78, 3)},
	})
	_, err := f.eng.Confirm(f.ctx, 2)
	require.NoError(t, err)
	f.exec(`UPDATE stock_reservations SET status = 'RELEASED' WHERE order_id = 3 AND sku_id = 78`)
	f.exec(`UPDATE inventory SET reserved = reserved - 1 WHERE sku_id = 78`)

	tx := f.holdRows(`sku_id = 77`)
	type row struct {
		Order                  int64
		Kind                   string
		Reservations, Released int32
	}
	got := make(chan []row, 1)
	go func() {
		rows, err := f.pool.Query(f.ctx, `SELECT * FROM confirm_orders('{5, 4, 3, 2, 1, 1}')`)
		if !assert.NoError(t, err) {
			got <- nil
			return
		}
		var out []row
		for rows.Next() {
			var r row
			assert.NoError(t, rows.Scan(&r.Order, &r.Kind, &r.Reservations, &r.Released))
			out = append(out, r)
		}
		assert.NoError(t, rows.Err())
		got <- out
	}()
	f.waitForLockWaiters(1)
	var reportDone time.Time
	require.NoError(t, tx.QueryRow(f.ctx, `UPDATE inventory SET on_hand = 8, reported_quantity = 8, source_updated_at = now()
		WHERE sku_id = 77 AND warehouse_id = 1 RETURNING clock_timestamp()`).Scan(&reportDone))
	require.NoError(t, tx.Commit(f.ctx))

	assert.Equal(t, []row{
		{1, "confirmed", 1, 0},
		{2, "already", 0, 0},
		{3, "not_active", 0, 1},
		{4, "none", 0, 0},
		{5, "confirmed", 2, 0},
	}, receive(t, got, "the batch statement never returned"))
	onHand, reserved := f.row(77, whIstanbul)
	assert.EqualValues(t, 8-1-2, onHand, "the batch took its units from the reported count")
	assert.Zero(t, reserved)
	onHand, reserved = f.row(78, whIstanbul)
	assert.EqualValues(t, 10-3, onHand)
	assert.Zero(t, reserved, "order 3's rest was given back")
	var early int
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT count(*) FROM stock_reservations
		WHERE order_id IN (1, 5) AND (status <> 'CONFIRMED' OR confirmed_at <= $1)`, reportDone).Scan(&early))
	assert.Zero(t, early, "every confirm of the batch is stamped after the report it waited for (%s)", reportDone)
	f.assertConsistent()
}

// statements records the statements a pool sends while on: the sqlc name of each (its first line,
// "-- name: X :kind"), or its first line.
type statements struct {
	mu    sync.Mutex
	on    bool
	names []string
}

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.on {
		first, _, _ := strings.Cut(strings.TrimSpace(data.SQL), "\n")
		s.names = append(s.names, strings.TrimSpace(first))
	}
	return ctx
}

func (*statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A batch's statements count as sent, in the order queued (a transaction's BEGIN goes with its
// first statement: db.InTx).
func (s *statements) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	for _, q := range data.Batch.QueuedQueries {
		s.TraceQueryStart(ctx, conn, pgx.TraceQueryStartData{SQL: q.SQL})
	}
	return ctx
}

func (*statements) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (*statements) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// during returns the statements sent while fn ran.
func (s *statements) during(fn func()) []string {
	s.mu.Lock()
	s.on, s.names = true, nil
	s.mu.Unlock()
	fn()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.on = false
	return s.names
}

// TestConfirm_Uncontended_SendsWhatTheDirectConfirmSends: with combining on, a confirm that has
// nothing to combine with sends exactly the statements of a confirm with combining off: no read of
// the order's SKUs before it. It still counts as a batch of one; a repeat counts as none.
func TestConfirm_Uncontended_SendsWhatTheDirectConfirmSends(t *testing.T) {
	t.Parallel()
	sent := map[string][]string{}
	for _, mode := range confirmModes {
		cfg, err := pgxpool.ParseConfig(testenv.DatabaseURL(t))
		require.NoError(t, err)
		rec := &statements{}
		cfg.ConnConfig.Tracer = rec
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		obs := newConfirmBatches()
		f := newFixtureOn(t, pool, obs, mode.opts...)
		f.sku(77, map[int32]int32{whIstanbul: 10})
		f.sku(78, map[int32]int32{whIstanbul: 10})
		f.reserveEach(map[int64][]inventory.Line{1: {line(77, 2), line(78, 1)}})

		var res inventory.ConfirmResult
		sent[mode.name] = rec.during(func() { res, err = f.eng.Confirm(f.ctx, 1) })
		require.NoError(t, err)
		assert.Equal(t, inventory.ConfirmResult{Confirmed: 2}, res, mode.name)
		again := rec.during(func() { res, err = f.eng.Confirm(f.ctx, 1) })
		require.NoError(t, err)
		assert.True(t, res.Already, mode.name)
		assert.NotContains(t, strings.Join(sent[mode.name], "\n")+strings.Join(again, "\n"),
			"-- name: ReservationsOfOrder ", "%s: no read of the order's SKUs", mode.name)

		sizes, failed := obs.all()
		assert.Empty(t, failed)
		if mode.name == "combined" {
			assert.Equal(t, []int{1}, sizes, "the confirm is a batch of one, its repeat none")
		}
		onHand, reserved := f.row(77, whIstanbul)
		assert.EqualValues(t, 8, onHand, mode.name)
		assert.Zero(t, reserved, mode.name)
		f.assertConsistent()
	}
	assert.Equal(t, sent["direct"], sent["combined"], "a lone combined confirm sends what a direct one sends")
	assert.Contains(t, sent["combined"], "-- name: LockReservationsOfOrder :many", "the recorder saw the confirm")
}
