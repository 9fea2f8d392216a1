package inventory_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/audit"
	"github.com/marketplace/checkout/inventory"
)

// batchSizes records the size of every combined batch.
type batchSizes struct {
	mu    sync.Mutex
	sizes []int
	sent  chan int
}

func newBatchSizes() *batchSizes { return &batchSizes{sent: make(chan int, 10_000)} }

func (*batchSizes) ReserveResult(string) {}

func (b *batchSizes) ReserveBatch(orders int) {
	b.mu.Lock()
	b.sizes = append(b.sizes, orders)
	b.mu.Unlock()
	b.sent <- orders
}

func (b *batchSizes) all() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int(nil), b.sizes...)
}

var (
	_ inventory.Observer      = (*batchSizes)(nil)
	_ inventory.BatchObserver = (*batchSizes)(nil)
)

func TestReserve_HotPathCombined_LastUnits_Exactly100(t *testing.T) {
	t.Parallel()
	obs := newBatchSizes()
	f := newFixtureWith(t, obs)
	f.sku(77, map[int32]int32{whIstanbul: 100})                  // the hot SKU
	f.sku(78, map[int32]int32{whIstanbul: 5000, whAnkara: 5000}) // plenty, in another lane's orders too
	f.sku(79, map[int32]int32{whIzmir: 20})                      // runs out: orders short on it
	// Every order wants one unit of the hot SKU; some also want 78 or 79 (their own lanes' rows);
	// every third is 78 alone, in 78's lane, so two lanes' batches meet on 78's rows.
	lines := func(order int64) []inventory.Line {
		switch {
		case order%3 == 0:
			return []inventory.Line{{SKUID: 78, Quantity: 1}}
		case order%5 == 0:
			return []inventory.Line{{SKUID: 78, Quantity: 2}, {SKUID: 77, Quantity: 1}}
		case order%7 == 0:
			return []inventory.Line{{SKUID: 79, Quantity: 1}, {SKUID: 77, Quantity: 1}}
		}
		return []inventory.Line{{SKUID: 77, Quantity: 1}}
	}
	const orders = 2000

	ok, refused, failed := f.reserveConcurrently(200, orders, lines)

	assert.Zero(t, failed, "no transaction errors of any kind")
	assert.Equal(t, orders, ok+refused)
	_, reserved := f.row(77, whIstanbul)
	assert.EqualValues(t, 100, reserved, "exactly the stock of the hot SKU is reserved")
	assert.Equal(t, 100, f.count(`SELECT count(*) FROM stock_reservations WHERE sku_id = 77 AND status = 'ACTIVE'`))
	_, reserved79 := f.row(79, whIzmir)
	assert.LessOrEqual(t, reserved79, int32(20))

	// Every order holds all of its lines or none of them.
	held := map[int64]map[int64]int32{}
	rows, err := f.pool.Query(f.ctx, `SELECT order_id, sku_id, sum(quantity)::int FROM stock_reservations GROUP BY 1, 2`)
	require.NoError(t, err)
	for rows.Next() {
		var order, sku int64
		var qty int32
		require.NoError(t, rows.Scan(&order, &sku, &qty))
		if held[order] == nil {
			held[order] = map[int64]int32{}
		}
		held[order][sku] = qty
	}
	require.NoError(t, rows.Err())
	assert.Len(t, held, ok, "one set of reservations per successful order")
	for order, got := range held {
		want := map[int64]int32{}
		for _, l := range lines(order) {
			want[l.SKUID] = l.Quantity
		}
		assert.Equal(t, want, got, "order %d holds exactly its lines", order)
	}

	sum, largest := 0, 0
	for _, n := range obs.all() {
		sum += n
		largest = max(largest, n)
	}
	assert.Equal(t, orders, sum, "every order went through a combined batch")
	t.Logf("%d batches, largest %d orders", len(obs.all()), largest)
	f.assertConsistent()
	rep, err := audit.Run(f.ctx, f.pool, audit.Options{})
	require.NoError(t, err)
	assert.Empty(t, rep.Violations, "the invariant auditor finds nothing")
}

// holdSKU keeps a batch of sku in flight: it locks sku's rows in a transaction of its own and
// places order first (one unit of sku), whose batch then waits on that lock. Orders of sku placed
// next wait for the next batch. release lets the first batch go; wait returns its order's result.
func (f *fixture) holdSKU(obs *batchSizes, sku, first int64) (release func(), wait func() error) {
	f.t.Helper()
	tx, err := f.pool.Begin(f.ctx)
	require.NoError(f.t, err)
	_, err = tx.Exec(f.ctx, `SELECT 1 FROM inventory WHERE sku_id = $1 ORDER BY warehouse_id FOR UPDATE`, sku)
	require.NoError(f.t, err)
	errc := make(chan error, 1)
	go func() {
		_, err := f.reserve(first, istanbul, inventory.Line{SKUID: sku, Quantity: 1})
		errc <- err
	}()
	require.Equal(f.t, 1, <-obs.sent, "the first order is a batch of its own")
	var once sync.Once
	release = func() { once.Do(func() { require.NoError(f.t, tx.Commit(f.ctx)) }) }
	f.t.Cleanup(release)
	return release, func() error { return <-errc }
}

// enqueue places an order from its own goroutine and returns once it waits for a batch, so that
// orders enter the next batch in the order they are enqueued.
func (f *fixture) enqueue(ctx context.Context, order int64, lines ...inventory.Line) <-chan result {
	f.t.Helper()
	out := make(chan result, 1)
	go func() {
		res, err := f.eng.Reserve(ctx, inventory.ReserveRequest{OrderID: order, Lines: lines, ShipTo: istanbul, Hold: 15 * time.Minute})
		out <- result{res, err}
	}()
	require.Eventually(f.t, func() bool { return inventory.Waiting(f.eng, order) },
		30*time.Second, time.Millisecond, "order %d never queued", order)
	return out
}

type result struct {
	res inventory.Reservation
	err error
}

func TestReserve_Combining_OrdersQueuedBehindABatchShareTheNextOne(t *testing.T) {
	t.Parallel()
	obs := newBatchSizes()
	f := newFixtureWith(t, obs)
	f.sku(77, map[int32]int32{whIstanbul: 100})
	release, wait := f.holdSKU(obs, 77, 1)
	var queued []<-chan result
	for order := int64(2); order <= 31; order++ {
		queued = append(queued, f.enqueue(f.ctx, order, inventory.Line{SKUID: 77, Quantity: 1}))
	}

	release()

	require.NoError(t, wait())
	for _, q := range queued {
		r := <-q
		require.NoError(t, r.err)
		assert.Len(t, r.res.Allocations, 1)
	}
	assert.Equal(t, []int{1, 30}, obs.all(), "the thirty orders that queued went as one batch")
	_, reserved := f.row(77, whIstanbul)
	assert.EqualValues(t, 31, reserved)
	f.assertConsistent()
}

func TestReserve_CombinedBatch_EachOrderAllOrNothingOnTheFiguresBeforeIt(t *testing.T) {
	t.Parallel()
	obs := newBatchSizes()
	f := newFixtureWith(t, obs)
	f.sku(90, map[int32]int32{whIstanbul: 3, whAnkara: 3})
	f.sku(91, map[int32]int32{whIstanbul: 10})
	f.sku(92, map[int32]int32{whIzmir: 1})
	release, wait := f.holdSKU(obs, 90, 1) // order 1 takes Istanbul's first unit

	line := func(sku int64, qty int32) inventory.Line { return inventory.Line{SKUID: sku, Quantity: qty} }
	steps := []struct {
		order int64
		lines []inventory.Line
		want  map[int32]int32 // units per warehouse of SKU 90; nil: refused
		short []inventory.ShortLine
	}{
		// Istanbul's last two.
		{2, []inventory.Line{line(90, 2)}, map[int32]int32{whIstanbul: 2}, nil},
		// Short on 92, so its line of 90 holds nothing either.
		{3, []inventory.Line{line(90, 1), line(92, 2)}, nil, []inventory.ShortLine{{SKUID: 92, Requested: 2, Available: 1}}},
		// Istanbul is empty now: the nearest that can serve.
		{4, []inventory.Line{line(90, 2), line(91, 1)}, map[int32]int32{whAnkara: 2}, nil},
		{5, []inventory.Line{line(90, 2)}, nil, []inventory.ShortLine{{SKUID: 90, Requested: 2, Available: 1}}},
		// The short orders took nothing: Ankara's last unit is still there.
		{6, []inventory.Line{line(90, 1)}, map[int32]int32{whAnkara: 1}, nil},
		{7, []inventory.Line{line(90, 1)}, nil, []inventory.ShortLine{{SKUID: 90, Requested: 1, Available: 0}}},
	}
	outs := make([]<-chan result, len(steps))
	for i, s := range steps {
		outs[i] = f.enqueue(f.ctx, s.order, s.lines...)
	}

	release()

	require.NoError(t, wait())
	for i, s := range steps {
		r := <-outs[i]
		if s.want == nil {
			var oos *inventory.OutOfStockError
			require.ErrorAs(t, r.err, &oos, "order %d", s.order)
			assert.Equal(t, s.short, oos.Lines, "order %d", s.order)
			assert.Zero(t, f.count(`SELECT count(*) FROM stock_reservations WHERE order_id = $1`, s.order))
			continue
		}
		require.NoError(t, r.err, "order %d", s.order)
		got := map[int32]int32{}
		for _, a := range r.res.Allocations {
			if a.SKUID == 90 {
				got[a.WarehouseID] += a.Quantity
			}
		}
		assert.Equal(t, s.want, got, "order %d", s.order)
		assert.Len(t, r.res.Allocations, len(s.lines), "order %d holds every line", s.order)
	}
	assert.Equal(t, []int{1, len(steps)}, obs.all(), "one batch decided them all")
	for _, row := range []struct {
		sku  int64
		wh   int32
		want int32
	}{{90, whIstanbul, 3}, {90, whAnkara, 3}, {91, whIstanbul, 1}, {92, whIzmir, 0}} {
		_, reserved := f.row(row.sku, row.wh)
		assert.Equal(t, row.want, reserved, "sku %d warehouse %d", row.sku, row.wh)
	}
	f.assertConsistent()
}

func TestReserve_Combined_CallerGivesUp(t *testing.T) {
	t.Parallel()
	t.Run("while queued: nothing is reserved", func(t *testing.T) {
		t.Parallel()
		obs := newBatchSizes()
		f := newFixtureWith(t, obs)
		f.sku(77, map[int32]int32{whIstanbul: 10})
		release, wait := f.holdSKU(obs, 77, 1)
		ctx, cancel := context.WithCancel(f.ctx)
		gaveUp := f.enqueue(ctx, 2, inventory.Line{SKUID: 77, Quantity: 1})
		cancel()
		assert.ErrorIs(t, (<-gaveUp).err, context.Canceled)
		after := f.enqueue(f.ctx, 3, inventory.Line{SKUID: 77, Quantity: 1})

		release()

		require.NoError(t, wait())
		require.NoError(t, (<-after).err)
		assert.Zero(t, f.count(`SELECT count(*) FROM stock_reservations WHERE order_id = 2`))
		assert.Equal(t, []int{1, 1}, obs.all(), "the order that left was not sent")
		_, reserved := f.row(77, whIstanbul)
		assert.EqualValues(t, 2, reserved)
		f.assertConsistent()
	})
	t.Run("while its batch is in flight: the retry gets the reservation", func(t *testing.T) {
		t.Parallel()
		obs := newBatchSizes()
		f := newFixtureWith(t, obs)
		f.sku(77, map[int32]int32{whIstanbul: 10})
		// Order 1 waits on its advisory lock, held here, so orders 5 and 6 gather behind it.
		hold1 := f.advisoryLock(1)
		first := make(chan error, 1)
		go func() {
			_, err := f.reserve(1, istanbul, inventory.Line{SKUID: 77, Quantity: 1})
			first <- err
		}()
		require.Equal(t, 1, <-obs.sent)
		ctx, cancel := context.WithCancel(f.ctx)
		gaveUp := f.enqueue(ctx, 5, inventory.Line{SKUID: 77, Quantity: 2})
		sixth := f.enqueue(f.ctx, 6, inventory.Line{SKUID: 77, Quantity: 1})
		// Their batch will wait on order 6's advisory lock, after taking order 5's.
		hold6 := f.advisoryLock(6)
		require.NoError(t, hold1.Commit(f.ctx))
		require.NoError(t, <-first)
		require.Equal(t, 2, <-obs.sent, "orders 5 and 6 in flight as one batch")
		cancel()
		assert.ErrorIs(t, (<-gaveUp).err, context.Canceled)
		// The saga retries the step for the same order; it waits for the batch in flight.
		retry := f.enqueue(f.ctx, 5, inventory.Line{SKUID: 77, Quantity: 2})

		require.NoError(t, hold6.Commit(f.ctx))

		require.NoError(t, (<-sixth).err)
		r := <-retry
		require.NoError(t, r.err)
		require.Len(t, r.res.Allocations, 1)
		assert.EqualValues(t, 2, r.res.Allocations[0].Quantity)
		assert.Equal(t, 1, f.count(`SELECT count(*) FROM stock_reservations WHERE order_id = 5`))
		_, reserved := f.row(77, whIstanbul)
		assert.EqualValues(t, 4, reserved, "order 5 reserved once, and the retry knows it")
		f.assertConsistent()
	})
}

// advisoryLock takes, in a transaction of its own, the advisory lock the reserve paths take for
// order.
func (f *fixture) advisoryLock(order int64) pgx.Tx {
	f.t.Helper()
	tx, err := f.pool.Begin(f.ctx)
	require.NoError(f.t, err)
	_, err = tx.Exec(f.ctx, `SELECT pg_advisory_xact_lock(1, $1::int)`, order)
	require.NoError(f.t, err)
	f.t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

func TestReserve_CombinedBatchFails_OrdersGoAgainEachAlone(t *testing.T) {
	t.Parallel()
	obs := newBatchSizes()
	f := newFixtureWith(t, obs)
	f.sku(77, map[int32]int32{whIstanbul: 10})
	// A broken batch statement: the batch fails as a whole, and each order goes again alone (the
	// one-order statement).
	f.exec(`ALTER FUNCTION reserve_orders(BIGINT[], DOUBLE PRECISION[], DOUBLE PRECISION[], DOUBLE PRECISION[], INT[], BIGINT[], INT[]) RENAME TO reserve_orders_off`)
	release, wait := f.holdSKU(obs, 77, 1)
	second := f.enqueue(f.ctx, 2, inventory.Line{SKUID: 77, Quantity: 3})
	third := f.enqueue(f.ctx, 3, inventory.Line{SKUID: 77, Quantity: 2})

	release()

	require.NoError(t, wait())
	for _, r := range []result{<-second, <-third} {
		require.NoError(t, r.err)
		require.Len(t, r.res.Allocations, 1)
	}
	assert.Equal(t, []int{1, 2, 1, 1}, obs.all(), "the two orders were sent as one batch first, then each alone")
	_, reserved := f.row(77, whIstanbul)
	assert.EqualValues(t, 6, reserved)
	f.assertConsistent()
}

// The batch statement's lock order is the engine's: batches of three processes touching two SKUs'
// rows (named in either order, or one alone), and confirms and releases of those rows, run together without a deadlock. A batch that a
// deadlock rolled back would go again alone and succeed: the observer sees it.
func TestReserve_CombinedBatchesRacingConfirmAndRelease_NoDeadlock(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.sku(201, map[int32]int32{whIstanbul: 1000, whAnkara: 1000})
	f.sku(202, map[int32]int32{whIstanbul: 1000, whAnkara: 1000})
	obs := &batchFailures{}
	engines := f.processes(3, obs)
	const orders = 600
	var wg sync.WaitGroup
	var next atomic.Int64
	for c := 0; c < 60; c++ {
		eng := engines[c%len(engines)]
		wg.Go(func() {
			for {
				order := next.Add(1)
				if order > orders {
					return
				}
				lines := racingLines(order)
				shipTo := istanbul
				if order%5 == 0 {
					shipTo = ankara
				}
				_, err := eng.Reserve(f.ctx, inventory.ReserveRequest{OrderID: order, Lines: lines, ShipTo: shipTo,
					Hold: 15 * time.Minute})
				if !assert.NoError(t, err, "reserve %d", order) {
					return
				}
				switch order % 3 {
				case 0:
					_, err = eng.Confirm(f.ctx, order)
				case 1:
					_, err = eng.Release(f.ctx, order)
				}
				assert.NoError(t, err, "order %d", order)
			}
		})
	}
	wg.Wait()
	assert.Empty(t, obs.all(), "no combined batch failed")
	lines := 0
	for order := int64(1); order <= orders; order++ {
		lines += len(racingLines(order))
	}
	assert.Equal(t, lines, f.count(`SELECT count(*) FROM stock_reservations`), "every order reserved, none failed")
	f.assertConsistent()
}

// racingLines are the lines of an order of the racing test: both SKUs in either order, or one of
// them alone, so that a batch may name 202 before 201.
func racingLines(order int64) []inventory.Line {
	a, b := inventory.Line{SKUID: 201, Quantity: 1}, inventory.Line{SKUID: 202, Quantity: 1}
	return [][]inventory.Line{{b, a}, {a, b}, {b}, {a}}[order%4]
}

// TestReserve_FastPathTakenMeanwhile_NoLockOutOfOrder: a one-line reserve chooses Ankara's row,
// waits for it, and finds it taken. It must not go on to lock Istanbul's row (a lower key) while
// it still holds Ankara's: a combined batch locking the SKU's rows in key order would deadlock
// with it.
func TestReserve_FastPathTakenMeanwhile_NoLockOutOfOrder(t *testing.T) {
	t.Parallel()
	f := newFixtureWith(t, nil, inventory.WithCombining(0))
	f.sku(300, map[int32]int32{whIstanbul: 5, whAnkara: 5})
	taker, err := f.pool.Begin(f.ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = taker.Rollback(f.ctx) })
	_, err = taker.Exec(f.ctx, `UPDATE inventory SET reserved = 5 WHERE sku_id = 300 AND warehouse_id = $1`, whAnkara)
	require.NoError(t, err)
	_, err = taker.Exec(f.ctx, `INSERT INTO stock_reservations (order_id, sku_id, warehouse_id, quantity, expires_at)
		VALUES (899, 300, $1, 5, now() + interval '1 minute')`, whAnkara)
	require.NoError(t, err)

	direct := make(chan error, 1)
	go func() {
		_, err := f.eng.Reserve(f.ctx, inventory.ReserveRequest{OrderID: 900, ShipTo: ankara, Hold: time.Minute,
			Lines: []inventory.Line{{SKUID: 300, Quantity: 1}}})
		direct <- err
	}()
	f.waitForLockWaiters(1)
	batch := make(chan error, 1)
	go func() {
		_, err := f.pool.Exec(f.ctx, `SELECT * FROM reserve_orders('{901}', '{41.01}', '{28.97}', '{60}', '{1}', '{300}', '{1}')`)
		batch <- err
	}()
	f.waitForLockWaiters(2)
	require.NoError(t, taker.Commit(f.ctx))

	require.NoError(t, <-direct, "the direct reserve chose again and got Istanbul")
	require.NoError(t, <-batch)
	_, reserved := f.row(300, whIstanbul)
	assert.EqualValues(t, 2, reserved)
	f.assertConsistent()
}

// waitForLockWaiters waits until n backends of the fixture's database wait on a lock.
func (f *fixture) waitForLockWaiters(n int) {
	f.t.Helper()
	require.Eventually(f.t, func() bool {
		return f.count(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) >= n
	}, 10*time.Second, 10*time.Millisecond)
}

// TestReserve_Combining_FirstComeFirstServedPerSKU: an order of two SKUs waits while one of them
// is in flight; a later order of the other SKU waits behind it instead of going first, so a
// many-SKU order cannot be overtaken for ever while its SKUs are busy by turns.
func TestReserve_Combining_FirstComeFirstServedPerSKU(t *testing.T) {
	t.Parallel()
	obs := newBatchSizes()
	f := newFixtureWith(t, obs)
	f.sku(77, map[int32]int32{whIstanbul: 10})
	f.sku(78, map[int32]int32{whIstanbul: 10})
	release, wait := f.holdSKU(obs, 77, 1)
	both := f.enqueue(f.ctx, 2, inventory.Line{SKUID: 77, Quantity: 1}, inventory.Line{SKUID: 78, Quantity: 1})
	later := f.enqueue(f.ctx, 3, inventory.Line{SKUID: 78, Quantity: 1}) // 78 is free, but order 2 came first

	release()

	require.NoError(t, wait())
	require.NoError(t, (<-both).err)
	require.NoError(t, (<-later).err)
	assert.Equal(t, []int{1, 2}, obs.all(), "orders 2 and 3 went together, after order 1")
	f.assertConsistent()
}

// TestReserve_CombinedBatchBehindAHeldRow_OtherOrdersGoOnTheirOwn: a batch that meets a row held
// by another transaction gives up after its lock timeout, and its orders go again each alone: the
// order of a free SKU does not wait for the held row, and the held row's order waits alone.
func TestReserve_CombinedBatchBehindAHeldRow_OtherOrdersGoOnTheirOwn(t *testing.T) {
	t.Parallel()
	obs := newBatchSizes()
	f := newFixtureWith(t, obs, inventory.WithCombining(2))
	for sku := int64(77); sku <= 80; sku++ {
		f.sku(sku, map[int32]int32{whIstanbul: 10})
	}
	// Orders 1 (SKU 79) and 4 (SKU 80) take both slots, each waiting on its advisory lock, so
	// that orders 2 and 3 gather into one batch behind them.
	hold1, hold4 := f.advisoryLock(1), f.advisoryLock(4)
	first := f.enqueueAny(1, inventory.Line{SKUID: 79, Quantity: 1})
	require.Equal(t, 1, <-obs.sent)
	fourth := f.enqueueAny(4, inventory.Line{SKUID: 80, Quantity: 1})
	require.Equal(t, 1, <-obs.sent)
	held := f.enqueue(f.ctx, 2, inventory.Line{SKUID: 77, Quantity: 1})
	free := f.enqueue(f.ctx, 3, inventory.Line{SKUID: 78, Quantity: 1})
	// A long transaction holds SKU 77's row.
	long, err := f.pool.Begin(f.ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = long.Rollback(context.Background()) })
	_, err = long.Exec(f.ctx, `SELECT 1 FROM inventory WHERE sku_id = 77 FOR UPDATE`)
	require.NoError(t, err)
	require.NoError(t, hold1.Commit(f.ctx))
	require.NoError(t, (<-first).err)
	require.Equal(t, 2, <-obs.sent, "orders 2 and 3 in flight as one batch")
	require.NoError(t, hold4.Commit(f.ctx))
	require.NoError(t, (<-fourth).err)

	select {
	case r := <-free:
		require.NoError(t, r.err)
	case <-time.After(20 * time.Second):
		t.Fatal("the order of a free SKU waited for another SKU's held row")
	}
	require.NoError(t, long.Commit(f.ctx))
	require.NoError(t, (<-held).err)
	assert.Equal(t, []int{1, 1, 2, 1, 1}, obs.all(), "the failed batch's orders went again each alone")
	f.assertConsistent()
}

// enqueueAny places an order from its own goroutine without waiting for it to queue.
func (f *fixture) enqueueAny(order int64, lines ...inventory.Line) <-chan result {
	out := make(chan result, 1)
	go func() {
		res, err := f.eng.Reserve(f.ctx, inventory.ReserveRequest{OrderID: order, Lines: lines, ShipTo: istanbul, Hold: 15 * time.Minute})
		out <- result{res, err}
	}()
	return out
}
