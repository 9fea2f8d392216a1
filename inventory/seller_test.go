package inventory_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/audit"
	"github.com/marketplace/checkout/inventory"
)

// report applies a seller's count of SKU 77 in Istanbul taken at the given instant.
func (f *fixture) report(count int32, at time.Time) inventory.StockResult {
	f.t.Helper()
	res, err := f.eng.ApplySellerStock(f.ctx, 42, inventory.StockUpdate{SKUID: 77, WarehouseID: whIstanbul,
		Quantity: count, SourceUpdatedAt: at})
	require.NoError(f.t, err)
	return res
}

// assertSellable checks what a shopper can still take from SKU 77 in Istanbul: an order for one
// unit more is refused and names exactly this many.
func (f *fixture) assertSellable(want int32) {
	f.t.Helper()
	_, err := f.reserve(999, istanbul, inventory.Line{SKUID: 77, Quantity: want + 1})
	var oos *inventory.OutOfStockError
	require.ErrorAs(f.t, err, &oos)
	assert.Equal(f.t, want, oos.Lines[0].Available, "sellable units")
	if want > 0 {
		_, err = f.reserve(999, istanbul, inventory.Line{SKUID: 77, Quantity: want})
		require.NoError(f.t, err, "every sellable unit can be ordered")
		_, err = f.eng.Release(f.ctx, 999)
		require.NoError(f.t, err)
	}
}

// lastLedgerEntry checks the row's stock ledger against on_hand and returns its last entry.
func (f *fixture) lastLedgerEntry() (kind string, onHandAfter int32, reported, soldAfter *int32) {
	f.t.Helper()
	var total int32
	require.NoError(f.t, f.pool.QueryRow(f.ctx, `SELECT kind, on_hand_after, reported_quantity, sold_after_report,
			(SELECT sum(delta)::int FROM inventory_ledger WHERE sku_id = 77 AND warehouse_id = 1)
		FROM inventory_ledger WHERE sku_id = 77 AND warehouse_id = 1 ORDER BY id DESC LIMIT 1`).
		Scan(&kind, &onHandAfter, &reported, &soldAfter, &total))
	onHand, _ := f.row(77, whIstanbul)
	assert.Equal(f.t, onHand, total, "the ledger adds up to on_hand")
	return kind, onHandAfter, reported, soldAfter
}

func TestSellerStock_CountStampedAroundASale(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// The report is stamped before order 1 is confirmed, or after it.
		stampedBeforeSale bool
		// Order 1 is restocked (its units back on the shelf) before the report arrives.
		restocked bool
		count     int32

		wantStatus   string
		wantSold     int32
		wantOnHand   int32
		wantReserved int32
	}{
		{name: "stamped before the sale: the sold unit stays sold", stampedBeforeSale: true, count: 10,
			wantStatus: inventory.StockApplied, wantSold: 1, wantOnHand: 9, wantReserved: 2},
		{name: "stamped after the sale: applied as sent", count: 10,
			wantStatus: inventory.StockApplied, wantOnHand: 10, wantReserved: 2},
		{name: "stamped before a sale restocked since: the unit is back", stampedBeforeSale: true, restocked: true, count: 10,
			wantStatus: inventory.StockApplied, wantOnHand: 10, wantReserved: 2},
		{name: "stamped before the sale, counting less than was sold since: zero", stampedBeforeSale: true, count: 0,
			wantStatus: inventory.StockAppliedWithShortfall, wantSold: 1, wantOnHand: 0, wantReserved: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.sku(77, map[int32]int32{whIstanbul: 10})
			_, err := f.reserve(1, istanbul, inventory.Line{SKUID: 77, Quantity: 1})
			require.NoError(t, err)
			_, err = f.reserve(2, istanbul, inventory.Line{SKUID: 77, Quantity: 2})
			require.NoError(t, err)

			counted := time.Now()
			_, err = f.eng.Confirm(f.ctx, 1)
			require.NoError(t, err)
			if !tc.stampedBeforeSale {
				counted = time.Now()
			}
			if tc.restocked {
				_, err = f.eng.Restock(f.ctx, 1)
				require.NoError(t, err)
			}

			res := f.report(tc.count, counted)
			assert.Equal(t, tc.wantStatus, res.Status)
			assert.Equal(t, tc.wantSold, res.SoldAfterCount)
			assert.Equal(t, tc.wantOnHand, res.OnHand)
			onHand, reserved := f.row(77, whIstanbul)
			assert.Equal(t, tc.wantOnHand, onHand)
			assert.Equal(t, tc.wantReserved, reserved)
			f.assertSellable(tc.wantOnHand - tc.wantReserved)

			kind, after, reported, sold := f.lastLedgerEntry()
			assert.Equal(t, "SUPPLY", kind, "the report has its ledger entry, even when on_hand stays")
			assert.Equal(t, tc.wantOnHand, after)
			if assert.NotNil(t, reported) && assert.NotNil(t, sold) {
				assert.Equal(t, tc.count, *reported, "the count as the seller sent it")
				assert.Equal(t, tc.wantSold, *sold, "the units sold after its stamp")
			}
			f.assertConsistent()
		})
	}
}

func TestSellerStock_LaggingCountBelowReserved_ShortfallOnWhatRemains(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.sku(77, map[int32]int32{whIstanbul: 10})
	f.reserveOneEach(5, 77, istanbul)
	counted := time.Now()
	for order := int64(1); order <= 2; order++ {
		_, err := f.eng.Confirm(f.ctx, order)
		require.NoError(t, err)
	}

	// 4 counted before the two sales: 2 remain for the 3 units still reserved.
	res := f.report(4, counted)
	assert.Equal(t, inventory.StockAppliedWithShortfall, res.Status)
	assert.EqualValues(t, 2, res.SoldAfterCount)
	assert.Equal(t, []int64{5}, res.AffectedOrders, "the newest reservation is released")
	onHand, reserved := f.row(77, whIstanbul)
	assert.EqualValues(t, 2, onHand)
	assert.EqualValues(t, 2, reserved)
	assert.Equal(t, 1, f.count(`SELECT count(*) FROM outbox_events WHERE event_type = $1`, inventory.EventOrderStockShortfall))
	assert.Equal(t, 1, f.count(`SELECT count(*) FROM seller_shortfall_events
		WHERE seller_id = 42 AND on_hand_after = 2 AND reserved_before = 3 AND released_units = 1`))
	for order := int64(3); order <= 4; order++ {
		_, err := f.eng.Confirm(f.ctx, order)
		assert.NoError(t, err, "the orders that fit can still complete")
	}
	onHand, reserved = f.row(77, whIstanbul)
	assert.Zero(t, onHand)
	assert.Zero(t, reserved)
	f.assertConsistent()
}

// TestSellerStock_LaggingCountsRacingConfirms_NoSoldUnitResold: a seller's system that has not
// heard of our sales keeps reporting its count of 100 (stamped before any sale) while 60 orders of
// the row are confirmed at once. Whatever the interleaving, every sold unit stays sold.
func TestSellerStock_LaggingCountsRacingConfirms_NoSoldUnitResold(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const count, orders = 100, 60
	f.sku(77, nil)
	counted := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
	f.report(count, counted)
	for order := int64(1); order <= orders; order++ {
		_, err := f.reserve(order, istanbul, inventory.Line{SKUID: 77, Quantity: 1})
		require.NoError(t, err)
	}

	var stamp atomic.Int64 // each report a microsecond after the last: all before every sale
	report := func() string {
		at := counted.Add(time.Duration(stamp.Add(1)) * time.Microsecond)
		res, err := f.eng.ApplySellerStock(f.ctx, 42, inventory.StockUpdate{SKUID: 77, WarehouseID: whIstanbul,
			Quantity: count, SourceUpdatedAt: at})
		if !assert.NoError(t, err) {
			return ""
		}
		assert.Contains(t, []string{inventory.StockApplied, inventory.StockStaleIgnored}, res.Status)
		return res.Status
	}

	var next, applied atomic.Int64
	var confirming, reporting sync.WaitGroup
	for c := 0; c < 16; c++ {
		confirming.Add(1)
		go func() {
			defer confirming.Done()
			for {
				order := next.Add(1)
				if order > orders {
					return
				}
				_, err := f.eng.Confirm(f.ctx, order)
				assert.NoError(t, err, "confirm %d", order)
			}
		}()
	}
	done := make(chan struct{})
	for r := 0; r < 8; r++ {
		reporting.Add(1)
		go func() {
			defer reporting.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				if report() == inventory.StockApplied {
					applied.Add(1)
				}
			}
		}()
	}
	confirming.Wait()
	close(done)
	reporting.Wait()
	require.Equal(t, inventory.StockApplied, report(), "a last lagging count after every sale")
	t.Logf("%d lagging counts applied while the orders were confirmed", applied.Load())

	// Each report took off exactly the units sold before it: the sales whose ledger entries precede
	// its own (a row's entries are in commit order, since both write them holding the row).
	rows, err := f.pool.Query(f.ctx, `SELECT kind, delta, on_hand_after, coalesce(sold_after_report, 0)
		FROM inventory_ledger WHERE sku_id = 77 AND warehouse_id = 1 ORDER BY id`)
	require.NoError(t, err)
	var sold, reports int32
	for rows.Next() {
		var kind string
		var delta, after, soldAfter int32
		require.NoError(t, rows.Scan(&kind, &delta, &after, &soldAfter))
		switch kind {
		case "SALE":
			sold -= delta
		case "SUPPLY":
			reports++
			assert.Equal(t, sold, soldAfter, "report %d: units sold before it", reports)
			assert.Equal(t, count-sold, after, "report %d: on_hand it left", reports)
		default:
			t.Errorf("unexpected %s entry", kind)
		}
	}
	require.NoError(t, rows.Err())
	assert.EqualValues(t, orders, sold)

	onHand, reserved := f.row(77, whIstanbul)
	assert.EqualValues(t, count-orders, onHand, "each of the 60 sold units stays sold")
	assert.Zero(t, reserved)
	assert.Equal(t, orders, f.count(`SELECT count(*) FROM stock_reservations WHERE status = 'CONFIRMED'`))
	f.lastLedgerEntry()
	f.assertSellable(count - orders)
	f.assertConsistent()
}

// TestSellerStock_ConfirmWaitingForAReport_TakesItsUnitFromTheCount: a confirm that reaches the row
// while a report holds it moves its unit after the report, from the count the report set, and is
// stamped after the report.
func TestSellerStock_ConfirmWaitingForAReport_TakesItsUnitFromTheCount(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.sku(77, map[int32]int32{whIstanbul: 10})
	_, err := f.reserve(1, istanbul, inventory.Line{SKUID: 77, Quantity: 1})
	require.NoError(t, err)

	// Hold the row as a report does while it is applied.
	tx := f.holdRows(`sku_id = 77 AND warehouse_id = 1`)
	confirmed := make(chan error, 1)
	go func() {
		_, err := f.eng.Confirm(f.ctx, 1)
		confirmed <- err
	}()
	require.Eventually(t, func() bool {
		return f.count(`SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND datname = current_database()`) > 0
	}, 10*time.Second, 10*time.Millisecond, "the confirm waits for the row")
	var reportDone time.Time
	require.NoError(t, tx.QueryRow(f.ctx, `UPDATE inventory SET on_hand = 8, reported_quantity = 8, source_updated_at = now()
		WHERE sku_id = 77 AND warehouse_id = 1 RETURNING clock_timestamp()`).Scan(&reportDone))
	require.NoError(t, tx.Commit(f.ctx))
	select {
	case err := <-confirmed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the confirm never went through")
	}

	onHand, _ := f.row(77, whIstanbul)
	assert.EqualValues(t, 7, onHand, "the confirm took its unit from the reported count")
	var confirmedAt time.Time
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT confirmed_at FROM stock_reservations WHERE order_id = 1`).Scan(&confirmedAt))
	assert.True(t, confirmedAt.After(reportDone), "confirmed at %s, after the report it waited for (%s)", confirmedAt, reportDone)
	f.assertConsistent()
}

// TestSellerStock_ShortfallMeetsAConfirmInFlight_RetriesThenApplies: a report below what is
// reserved gets the row first, while a confirm holds the only reservation it could release and
// waits for the row. The report must not wait for that reservation (the confirm waits for it: a
// deadlock) nor set on_hand under reserved: it lets the row go, tries again once the confirm has
// committed, and then counts the confirmed units as sold after its count.
func TestSellerStock_ShortfallMeetsAConfirmInFlight_RetriesThenApplies(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.sku(77, map[int32]int32{whIstanbul: 5})
	_, err := f.reserve(1, istanbul, inventory.Line{SKUID: 77, Quantity: 3})
	require.NoError(t, err)

	// The row is held while the report and then the confirm queue for it, in that order.
	holder := f.holdRows(`sku_id = 77 AND warehouse_id = 1`)
	counted := time.Now()
	reported := make(chan inventory.StockResult, 1)
	go func() {
		res, err := f.eng.ApplySellerStock(f.ctx, 42, inventory.StockUpdate{SKUID: 77, WarehouseID: whIstanbul,
			Quantity: 1, SourceUpdatedAt: counted})
		assert.NoError(t, err, "the report")
		reported <- res
	}()
	f.waitForLockWaiters(1)
	confirmed := make(chan error, 1)
	go func() {
		_, err := f.eng.Confirm(f.ctx, 1)
		confirmed <- err
	}()
	// The confirm holds order 1's reservation and waits for the row, behind the report.
	f.waitForLockWaiters(2)
	require.NoError(t, holder.Commit(f.ctx))

	for _, wait := range []func() bool{
		func() bool {
			select {
			case err := <-confirmed:
				return assert.NoError(t, err, "the confirm")
			case <-time.After(30 * time.Second):
				return false
			}
		},
		func() bool {
			select {
			case res := <-reported:
				assert.Equal(t, inventory.StockApplied, res.Status, "nothing left to release once the confirm committed")
				assert.EqualValues(t, 3, res.SoldAfterCount, "the units confirmed after the count")
				assert.Zero(t, res.CancelledReservations)
				return true
			case <-time.After(30 * time.Second):
				return false
			}
		},
	} {
		require.True(t, wait(), "the report and the confirm both finish")
	}
	onHand, reserved := f.row(77, whIstanbul)
	assert.Zero(t, onHand, "a count of 1 less the 3 sold after it")
	assert.Zero(t, reserved)
	assert.Zero(t, f.count(`SELECT count(*) FROM outbox_events WHERE event_type = $1`, inventory.EventOrderStockShortfall))
	assert.Zero(t, f.count(`SELECT count(*) FROM seller_shortfall_events`))
	f.lastLedgerEntry()
	f.assertConsistent()
}

// TestSellerStock_ShortfallsRacingReserveConfirmRelease_NoDriftNoDeadlock: two processes reserve,
// confirm and release orders of two rows (one or both, in either order) while a seller's system
// keeps sending counts of those rows, most of them below what is reserved. Nothing deadlocks, no
// step fails but for the answers the rules give (out of stock, a confirm of an order a shortfall
// took), and at the end every figure agrees with the reservations and the ledger.
func TestSellerStock_ShortfallsRacingReserveConfirmRelease_NoDriftNoDeadlock(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.sku(77, nil)
	f.sku(78, nil)
	start := time.Now().Add(-time.Hour)
	for _, sku := range []int64{77, 78} {
		_, err := f.eng.ApplySellerStock(f.ctx, 42, inventory.StockUpdate{SKUID: sku, WarehouseID: whIstanbul,
			Quantity: 40, SourceUpdatedAt: start})
		require.NoError(t, err)
	}
	obs := &batchFailures{}
	engines := f.processes(2, obs)
	lines := func(order int64) []inventory.Line {
		a, b := inventory.Line{SKUID: 77, Quantity: 1}, inventory.Line{SKUID: 78, Quantity: 2}
		return [][]inventory.Line{{a}, {b, a}, {a, b}, {b}}[order%4]
	}
	const clients, orders = 12, 600
	var confirmed, notActive, refused, shortfalls, contention atomic.Int64
	var next atomic.Int64
	var work, reporting sync.WaitGroup
	for c := range clients {
		eng := engines[c%len(engines)]
		work.Go(func() {
			for {
				order := next.Add(1)
				if order > orders {
					return
				}
				_, err := eng.Reserve(f.ctx, inventory.ReserveRequest{OrderID: order, Lines: lines(order), ShipTo: istanbul,
					Hold: 15 * time.Minute})
				var oos *inventory.OutOfStockError
				if errors.As(err, &oos) {
					refused.Add(1)
					continue
				}
				if !assert.NoError(t, err, "reserve %d", order) {
					return
				}
				if order%3 == 0 {
					_, err = eng.Release(f.ctx, order)
					assert.NoError(t, err, "release %d", order)
					continue
				}
				_, err = eng.Confirm(f.ctx, order)
				var na *inventory.NotActiveError
				switch {
				case err == nil:
					confirmed.Add(1)
				case errors.As(err, &na):
					notActive.Add(1) // a shortfall took a line first
				default:
					t.Errorf("confirm %d: %v", order, err)
				}
			}
		})
	}
	stop := make(chan struct{})
	for r := range 2 {
		reporting.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				sku := int64(77 + (i+r)%2)
				res, err := f.eng.ApplySellerStock(f.ctx, 42, inventory.StockUpdate{SKUID: sku, WarehouseID: whIstanbul,
					Quantity: int32((i * 7) % 12), SourceUpdatedAt: time.Now()})
				switch {
				case errors.Is(err, inventory.ErrContention):
					contention.Add(1) // the seller's system sends it again
				case assert.NoError(t, err, "report of sku %d", sku):
					if res.Status == inventory.StockAppliedWithShortfall {
						shortfalls.Add(1)
					}
				}
			}
		})
	}
	work.Wait()
	close(stop)
	reporting.Wait()
	t.Logf("%d confirmed, %d refused at confirm, %d out of stock, %d shortfalls, %d reports gave up",
		confirmed.Load(), notActive.Load(), refused.Load(), shortfalls.Load(), contention.Load())

	assert.Empty(t, obs.all(), "no combined batch failed")
	assert.Positive(t, shortfalls.Load(), "counts fell below what was reserved")
	assert.Equal(t, int(confirmed.Load()), f.count(`SELECT count(DISTINCT order_id) FROM stock_reservations WHERE status = 'CONFIRMED'`))
	assert.Zero(t, f.count(`SELECT count(*) FROM (SELECT order_id FROM stock_reservations
		GROUP BY order_id HAVING count(DISTINCT status) > 1) mixed`), "an order is wholly confirmed, released or held")
	taken := `SELECT DISTINCT (payload->>'orderId')::bigint AS order_id, (payload->>'skuId')::bigint AS sku_id
		FROM outbox_events WHERE event_type = '` + inventory.EventOrderStockShortfall + `'`
	assert.Equal(t, int(notActive.Load()), f.count(`SELECT count(DISTINCT order_id) FROM (`+taken+`) e WHERE order_id % 3 <> 0`),
		"each confirm refused was of an order a shortfall had taken")
	assert.Zero(t, f.count(`SELECT count(*) FROM (`+taken+`) e WHERE NOT EXISTS (SELECT 1 FROM stock_reservations r
		WHERE r.order_id = e.order_id AND r.sku_id = e.sku_id AND r.status = 'RELEASED')`), "what a shortfall took stays released")
	f.lastLedgerEntry()
	// The stock invariants of the auditor. (Not sold-within-supplied: these counts are arbitrary
	// numbers, not a shelf's, so a count below the units sold since its stamp is the seller's word
	// disagreeing with itself, which that check reports.)
	rep, err := audit.Run(f.ctx, f.pool, audit.Options{})
	require.NoError(t, err)
	checked := 0
	for _, c := range rep.Checks {
		switch c.Invariant {
		case audit.ReservedWithinOnHand, audit.ReservedMatchesActive, audit.LedgerMatchesOnHand, audit.SalesMatchConfirmed:
			checked++
			assert.Zero(t, c.Violations, "%s: %v", c.Rule, rep.Violations)
		}
	}
	assert.Equal(t, 4, checked)
	f.assertConsistent()
}
