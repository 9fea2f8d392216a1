package audit_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/audit"
	"github.com/marketplace/checkout/internal/dev/demo"
	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/internal/money"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/order"
	"github.com/marketplace/checkout/payment/paysim"
	"github.com/marketplace/checkout/workflows"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// world is a scratch database in a state every invariant holds for: orders confirmed, failed,
// declined, refunded after confirmation and still pending, a confirmed order with units of a line
// cancelled after payment (one damaged, one the seller could not ship), and a seller's later
// count.
type world struct {
	t    *testing.T
	ctx  context.Context
	pool *pgxpool.Pool
	eng  *inventory.Engine
	addr int64

	confirmed, expired, refunded, declined, pending, lineCancelled int64
}

func newWorld(t *testing.T) *world {
	t.Helper()
	ctx := context.Background()
	pool := testenv.Pool(t)
	require.NoError(t, demo.Load(ctx, pool))
	w := &world{t: t, ctx: ctx, pool: pool, eng: inventory.New(pool, nil)}
	w.addr = w.id(`INSERT INTO addresses (user_id, city, line1, lat, lon) VALUES (7, 'Istanbul', 'Test 1', 41.0, 29.0) RETURNING id`)

	w.confirmed = w.order(order.StatusConfirmed, "", map[int64]int32{71: 2, 72: 1}, "tok_ok", "CAPTURED")
	w.reserve(w.confirmed, map[int64]int32{71: 2, 72: 1})
	_, err := w.eng.Confirm(ctx, w.confirmed)
	require.NoError(t, err)

	w.expired = w.order(order.StatusFailed, problem.HoldExpired, map[int64]int32{71: 1}, "tok_3ds", "VOIDED")
	w.reserve(w.expired, map[int64]int32{71: 1})
	_, err = w.eng.Release(ctx, w.expired)
	require.NoError(t, err)

	w.declined = w.order(order.StatusFailed, problem.PaymentDeclined, map[int64]int32{73: 1}, "tok_decline", "DECLINED")
	w.reserve(w.declined, map[int64]int32{73: 1})
	_, err = w.eng.Release(ctx, w.declined)
	require.NoError(t, err)

	w.refunded = w.order(order.StatusCancelled, problem.RefundedBySupport, map[int64]int32{74: 3}, "tok_ok", "REFUNDED")
	w.reserve(w.refunded, map[int64]int32{74: 3})
	_, err = w.eng.Confirm(ctx, w.refunded)
	require.NoError(t, err)
	_, err = w.eng.Restock(ctx, w.refunded)
	require.NoError(t, err)

	w.pending = w.order(order.StatusPendingPayment, "", map[int64]int32{78: 1}, "tok_3ds", "REQUIRES_ACTION")
	w.reserve(w.pending, map[int64]int32{78: 1})

	w.lineCancelled = w.order(order.StatusConfirmed, "", map[int64]int32{76: 3}, "tok_ok", "CAPTURED")
	w.reserve(w.lineCancelled, map[int64]int32{76: 3})
	_, err = w.eng.Confirm(ctx, w.lineCancelled)
	require.NoError(t, err)
	w.cancelLine(w.lineCancelled, 76, 1, inventory.CancelDamaged, "r1")
	w.cancelLine(w.lineCancelled, 76, 1, inventory.CancelSellerCannotShip, "r2")

	// The seller counts SKU 71 in Istanbul again after the sales: 30 on the shelf.
	_, err = w.eng.ApplySellerStock(ctx, 42, inventory.StockUpdate{SKUID: 71, WarehouseID: 1, Quantity: 30,
		SourceUpdatedAt: time.Now()})
	require.NoError(t, err)
	// The orders that failed or were cancelled did so a while ago: past the audit's grace for
	// giving back what they held.
	w.exec(`UPDATE orders SET updated_at = now() - interval '10 minutes' WHERE status IN ('FAILED', 'CANCELLED')`)
	return w
}

// cancelLine runs a line cancellation's steps as its workflow does: record, refund at the
// provider, restock where the reason says, announce.
func (w *world) cancelLine(orderID, skuID int64, units int32, reason, requestID string) {
	w.t.Helper()
	orders := &activities.Orders{Pool: w.pool}
	rec, err := orders.RecordLineCancel(w.ctx, activities.LineCancelRequest{OrderID: orderID, SKUID: skuID, Units: units,
		Reason: reason, RequestID: requestID, RequestedBy: "audit test"})
	require.NoError(w.t, err)
	pays := &activities.Payments{Pool: w.pool, Gateway: paysim.New(w.pool, paysim.Options{})}
	_, err = pays.RefundLineCancel(w.ctx, rec.ID)
	require.NoError(w.t, err)
	if rec.Restock {
		_, err = w.eng.RestockCancelled(w.ctx, rec.ID)
		require.NoError(w.t, err)
	}
	_, err = orders.AnnounceLineCancel(w.ctx, rec.ID)
	require.NoError(w.t, err)
}

func (w *world) id(sql string, args ...any) int64 {
	w.t.Helper()
	var id int64
	require.NoError(w.t, w.pool.QueryRow(w.ctx, sql, args...).Scan(&id))
	return id
}

func (w *world) exec(sql string, args ...any) {
	w.t.Helper()
	_, err := w.pool.Exec(w.ctx, sql, args...)
	require.NoError(w.t, err)
}

// order writes an order with its items, its payment row and the provider's intent, in the final
// state given (the money side of the saga, as its activities leave it).
func (w *world) order(status order.Status, code problem.Code, lines map[int64]int32, token, payStatus string) int64 {
	w.t.Helper()
	var total int64
	for sku, q := range lines {
		var price int64
		require.NoError(w.t, w.pool.QueryRow(w.ctx, `SELECT price_minor FROM skus WHERE id = $1`, sku).Scan(&price))
		total += price * int64(q)
	}
	key := fmt.Sprintf("audit-%d", time.Now().UnixNano())
	var failure *string
	if code != "" {
		failure = (*string)(&code)
	}
	id := w.id(`INSERT INTO orders (user_id, idempotency_key, request_hash, workflow_id, status, address_id, price_version,
		total_minor, currency, hold_expires_at, failure_code)
		VALUES (7, $1, 'h', $2, $3, $4, 'pv_test', $5, 'TRY', now() + interval '15 minutes', $6) RETURNING id`,
		key, workflows.OrderWorkflowID(7, key), string(status), w.addr, total, failure)
	for sku, q := range lines {
		w.exec(`INSERT INTO order_items (order_id, sku_id, seller_id, title, quantity, unit_price_minor, currency)
			SELECT $1, id, seller_id, title, $2, price_minor, currency FROM skus WHERE id = $3`, id, q, sku)
	}
	captured, refunded := int64(0), int64(0)
	switch payStatus {
	case "CAPTURED":
		captured = total
	case "REFUNDED":
		captured, refunded = total, total
	}
	intent := fmt.Sprintf("pi_%d", id)
	w.exec(`INSERT INTO paysim.intents (id, idempotency_key, order_id, amount_minor, currency, token, status, captured_minor, refunded_minor)
		VALUES ($1, $2, $3, $4, 'TRY', $5, $6, $7, $8)`, intent, fmt.Sprintf("order-%d", id), id, total, token, payStatus, captured, refunded)
	w.exec(`INSERT INTO payments (order_id, idempotency_key, provider, intent_id, status, amount_minor, currency, captured_minor, refunded_minor)
		VALUES ($1, $2, 'paysim', $3, $4, $5, 'TRY', $6, $7)`, id, fmt.Sprintf("order-%d", id), intent, payStatus, total, captured, refunded)
	return id
}

func (w *world) reserve(orderID int64, lines map[int64]int32) {
	w.t.Helper()
	req := inventory.ReserveRequest{OrderID: orderID, ShipTo: inventory.Location{Lat: 41.0, Lon: 29.0}, Hold: 15 * time.Minute}
	for sku, q := range lines {
		req.Lines = append(req.Lines, inventory.Line{SKUID: sku, Quantity: q})
	}
	_, err := w.eng.Reserve(w.ctx, req)
	require.NoError(w.t, err)
}

func (w *world) workflowOf(orderID int64) string {
	w.t.Helper()
	var id string
	require.NoError(w.t, w.pool.QueryRow(w.ctx, `SELECT workflow_id FROM orders WHERE id = $1`, orderID).Scan(&id))
	return id
}

// visibility is Temporal's list of open workflows, as the test wants it.
type visibility struct {
	open []*workflowpb.WorkflowExecutionInfo
}

func (v *visibility) ListWorkflow(context.Context, *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	return &workflowservice.ListWorkflowExecutionsResponse{Executions: v.open}, nil
}

func openExecution(t *testing.T, workflowID, typ string, orderStatus order.Status, started time.Time) *workflowpb.WorkflowExecutionInfo {
	t.Helper()
	status, err := converter.GetDefaultDataConverter().ToPayload(string(orderStatus))
	require.NoError(t, err)
	attention, err := converter.GetDefaultDataConverter().ToPayload(false)
	require.NoError(t, err)
	return &workflowpb.WorkflowExecutionInfo{
		Execution: &commonpb.WorkflowExecution{WorkflowId: workflowID, RunId: "r1"},
		Type:      &commonpb.WorkflowType{Name: typ},
		StartTime: timestamppb.New(started),
		SearchAttributes: &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{
			workflows.AttrOrderStatus.GetName(): status, workflows.AttrNeedsAttention.GetName(): attention}},
	}
}

// audit runs the auditor as ops would, with the pending order's workflow and hold child open.
func (w *world) audit(extra ...*workflowpb.WorkflowExecutionInfo) audit.Report {
	w.t.Helper()
	v := &visibility{open: append([]*workflowpb.WorkflowExecutionInfo{
		openExecution(w.t, w.workflowOf(w.pending), workflows.OrderWorkflowName, order.StatusPendingPayment, time.Now()),
		openExecution(w.t, workflows.HoldWorkflowID(w.pending), workflows.HoldWorkflowName, "", time.Now()),
	}, extra...)}
	rep, err := audit.Run(w.ctx, w.pool, audit.Options{HoldTTL: 15 * time.Minute, SweeperPeriod: time.Minute,
		Slack: time.Minute, Visibility: v, TaskQueue: "checkout", Provider: paysim.NewRecords(w.pool)})
	require.NoError(w.t, err)
	return rep
}

func TestAudit_CleanDatabase_NoViolation(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	assert.Empty(t, w.audit().Violations)
}

// TestAudit_InjectedViolation_IsReported breaks one invariant at a time by direct SQL, as a bug
// or a hand-made "fix" would, and expects the auditor to name that invariant.
func TestAudit_InjectedViolation_IsReported(t *testing.T) {
	t.Parallel()
	cases := []struct {
		invariant string
		inject    func(w *world) []*workflowpb.WorkflowExecutionInfo
	}{
		{audit.ReservedWithinOnHand, func(w *world) []*workflowpb.WorkflowExecutionInfo {
			w.exec(`ALTER TABLE inventory DROP CONSTRAINT inventory_reserved_le_on_hand`)
			w.exec(`UPDATE inventory SET reserved = on_hand + 1 WHERE sku_id = 75 AND warehouse_id = 2`)
			return nil
		}},
		{audit.ReservedMatchesActive, func(w *world) []*workflowpb.WorkflowExecutionInfo {
			w.exec(`UPDATE inventory SET reserved = reserved + 1 WHERE sku_id = 75 AND warehouse_id = 2`)
			return nil
		}},
		{audit.LedgerMatchesOnHand, func(w *world) []*workflowpb.WorkflowExecutionInfo {
			// A change of on_hand the ledger never saw (its trigger switched off).
			w.exec(`ALTER TABLE inventory DISABLE TRIGGER inventory_ledger_upd`)
			w.exec(`UPDATE inventory SET on_hand = on_hand - 1 WHERE sku_id = 75 AND warehouse_id = 2`)
			return nil
		}},
		{audit.SalesMatchConfirmed, func(w *world) []*workflowpb.WorkflowExecutionInfo {
			// Stock that appeared from nowhere: recorded, but neither a seller's report nor a sale.
			w.exec(`UPDATE inventory SET on_hand = on_hand + 5 WHERE sku_id = 75 AND warehouse_id = 2`)
			return nil
		}},
		{audit.SoldWithinSupplied, func(w *world) []*workflowpb.WorkflowExecutionInfo {
			// Two units of the last retro radio sold: the seller only ever had one.
			w.exec(`INSERT INTO stock_reservations (order_id, sku_id, warehouse_id, quantity, status, expires_at)
				VALUES (424242, 81, 3, 2, 'CONFIRMED', now())`)
			return nil
		}},
		{audit.ConfirmedOrderFulfilled, func(w *world) []*workflowpb.WorkflowExecutionInfo {
			w.exec(`UPDATE order_items SET quantity = quantity + 1 WHERE order_id = $1 AND sku_id = 71`, w.confirmed)
			return nil
		}},
		{audit.MoneyMatchesKeptUnits, func(w *world) []*workflowpb.WorkflowExecutionInfo {
			// Money given back for a unit that still ships: refunded with no cancellation.
			w.exec(`UPDATE paysim.intents SET refunded_minor = 100 WHERE order_id = $1`, w.confirmed)
			return nil
		}},
		{audit.MoneyMatchesKeptUnits + " (cancelled, not refunded)", func(w *world) []*workflowpb.WorkflowExecutionInfo {
			// A unit cancelled long ago whose money was never given back.
			w.exec(`UPDATE paysim.intents SET refunded_minor = 0, status = 'CAPTURED' WHERE order_id = $1`, w.lineCancelled)
			return nil
		}},
		{audit.ConfirmedOrderFulfilled + " (cancelled units)", func(w *world) []*workflowpb.WorkflowExecutionInfo {
			// The line says one more unit was cancelled than its reservations record.
			w.exec(`UPDATE order_items SET cancelled_quantity = cancelled_quantity + 1 WHERE order_id = $1`, w.lineCancelled)
			return nil
		}},
		{audit.SalesMatchConfirmed + " (restocked twice)", func(w *world) []*workflowpb.WorkflowExecutionInfo {
			// A cancelled unit put back on the shelf a second time.
			w.exec(`UPDATE inventory SET on_hand = on_hand + 1 WHERE sku_id = 76 AND warehouse_id = 1`)
			return nil
		}},
		{audit.ConfirmedOrderPaidOnce, func(w *world) []*workflowpb.WorkflowExecutionInfo {
			w.exec(`INSERT INTO paysim.intents (id, idempotency_key, order_id, amount_minor, currency, token, status, captured_minor)
				SELECT 'pi_twice', 'another-key', order_id, amount_minor, currency, token, 'CAPTURED', amount_minor
				FROM paysim.intents WHERE order_id = $1`, w.confirmed)
			return nil
		}},
		{audit.FailedOrderStockReleased, func(w *world) []*workflowpb.WorkflowExecutionInfo {
			w.exec(`UPDATE stock_reservations SET status = 'ACTIVE' WHERE order_id = $1`, w.expired)
			return nil
		}},
		{audit.FailedOrderNoMoneyKept, func(w *world) []*workflowpb.WorkflowExecutionInfo {
			w.exec(`UPDATE paysim.intents SET status = 'CAPTURED', captured_minor = amount_minor WHERE order_id = $1`, w.expired)
			return nil
		}},
		{audit.FailedOrderAuthVoided, func(w *world) []*workflowpb.WorkflowExecutionInfo {
			w.exec(`UPDATE paysim.intents SET status = 'AUTHORIZED' WHERE order_id = $1`, w.declined)
			return nil
		}},
		{audit.NoStaleReservation, func(w *world) []*workflowpb.WorkflowExecutionInfo {
			w.exec(`UPDATE stock_reservations SET expires_at = now() - interval '1 hour' WHERE order_id = $1`, w.pending)
			return nil
		}},
		{audit.NoOpenOrderPastHold, func(w *world) []*workflowpb.WorkflowExecutionInfo {
			// The order row says it still waits for payment an hour after its hold ended.
			w.exec(`UPDATE orders SET hold_expires_at = now() - interval '1 hour' WHERE id = $1`, w.pending)
			return nil
		}},
		{audit.NoOpenOrderPastHold + " (workflow)", func(w *world) []*workflowpb.WorkflowExecutionInfo {
			// Temporal still runs the workflow of an order confirmed an hour ago.
			w.exec(`UPDATE orders SET updated_at = now() - interval '1 hour' WHERE id = $1`, w.confirmed)
			return []*workflowpb.WorkflowExecutionInfo{openExecution(w.t, w.workflowOf(w.confirmed),
				workflows.OrderWorkflowName, order.StatusConfirmed, time.Now().Add(-time.Hour))}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.invariant, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			rep := w.audit(tc.inject(w)...)
			var found []string
			for _, v := range rep.Violations {
				found = append(found, v.Invariant)
			}
			assert.Contains(t, found, firstWord(tc.invariant), rep.Violations)
		})
	}
}

// TestAudit_LaggingCount_CleanUntilASoldUnitIsResold: a seller's count stamped before our sales
// takes them off and the audit stays clean, also once the shelf is sold out; the same count
// applied as sent, written directly as a report that ignored the sales would be, puts the sold
// units back on sale, and once they are sold again only sold-within-supplied sees it: every
// other record agrees.
func TestAudit_LaggingCount_CleanUntilASoldUnitIsResold(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	const count = 12 // SKU 76 in Istanbul, as the demo stocks it
	sell := func(order int64, units int32) {
		t.Helper()
		w.reserve(order, map[int64]int32{76: units})
		_, err := w.eng.Confirm(w.ctx, order)
		require.NoError(t, err)
	}
	stockViolations := func() []audit.Violation {
		t.Helper()
		var found []audit.Violation
		for _, v := range w.audit().Violations {
			if v.Subject == "sku 76 @ warehouse 1" {
				found = append(found, v)
			}
		}
		return found
	}

	counted := time.Now().Truncate(time.Microsecond)
	sell(900001, 2)
	res, err := w.eng.ApplySellerStock(w.ctx, 42, inventory.StockUpdate{SKUID: 76, WarehouseID: 1, Quantity: count,
		SourceUpdatedAt: counted})
	require.NoError(t, err)
	require.EqualValues(t, count-2, res.OnHand, "the two sold after the count stay sold")
	assert.Empty(t, w.audit().Violations, "a lagging count is no violation")
	sell(900002, count-2)
	assert.Empty(t, w.audit().Violations, "nor is selling out what it left")

	w.exec(`UPDATE inventory SET on_hand = $1, reported_quantity = $1, sold_after_report = 0, source_updated_at = $2
		WHERE sku_id = 76 AND warehouse_id = 1`, count, counted.Add(time.Microsecond))
	assert.Empty(t, stockViolations(), "units back on the shelf are no oversell until sold")
	sell(900003, count)
	found := stockViolations()
	require.Len(t, found, 1, found)
	assert.Equal(t, audit.SoldWithinSupplied, found[0].Invariant)
	assert.Contains(t, found[0].Detail, "the seller counted 12 units at", found[0].Detail)
	assert.Contains(t, found[0].Detail, "24 have been sold since", found[0].Detail)
}

func firstWord(s string) string {
	for i, r := range s {
		if r == ' ' {
			return s[:i]
		}
	}
	return s
}

// TestAudit_OrdersMidWay_NotFlagged: what a healthy system shows for a moment is not a violation:
// an order failed a moment ago whose payment is still being reversed, an order open past its
// hold while its parked step is retried, and a unit cancelled a moment ago whose refund is under
// way.
func TestAudit_OrdersMidWay_NotFlagged(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	// Failed just now by its hold (which fails the order first, then reverses the payment).
	w.exec(`UPDATE orders SET updated_at = now() WHERE id = $1`, w.expired)
	w.exec(`UPDATE paysim.intents SET status = 'AUTHORIZED' WHERE order_id = $1`, w.expired)
	// Parked a minute ago, now past its hold, its step being retried with the order open.
	retrying := w.order(order.StatusPendingPayment, "", map[int64]int32{75: 1}, "tok_ok", "AUTHORIZED")
	w.exec(`UPDATE orders SET hold_expires_at = now() - interval '20 minutes' WHERE id = $1`, retrying)
	w.exec(`INSERT INTO order_events (order_id, kind, detail, created_at)
		VALUES ($1, 'needs_attention', '{"step": "capture"}', now() - interval '1 minute')`, retrying)
	// A unit cancelled just now: recorded, its refund not made yet.
	_, err := (&activities.Orders{Pool: w.pool}).RecordLineCancel(w.ctx, activities.LineCancelRequest{OrderID: w.confirmed,
		SKUID: 71, Units: 1, Reason: inventory.CancelLost, RequestID: "midway", RequestedBy: "audit test"})
	require.NoError(t, err)

	assert.Empty(t, w.audit().Violations)

	// Later, the same states are violations.
	w.exec(`UPDATE orders SET updated_at = now() - interval '10 minutes' WHERE id = $1`, w.expired)
	w.exec(`UPDATE order_events SET created_at = now() - interval '1 hour' WHERE order_id = $1`, retrying)
	w.exec(`UPDATE line_cancellations SET created_at = now() - interval '1 hour' WHERE order_id = $1`, w.confirmed)
	var found []string
	for _, v := range w.audit().Violations {
		found = append(found, v.Invariant)
	}
	assert.Contains(t, found, audit.FailedOrderAuthVoided)
	assert.Contains(t, found, audit.NoOpenOrderPastHold)
	assert.Contains(t, found, audit.MoneyMatchesKeptUnits, "a cancelled unit's money still kept long after")

	// Unless the refund waits for support: the provider refused it and support was asked.
	w.exec(`UPDATE line_cancellations SET attention = '{"step": "refund"}' WHERE order_id = $1`, w.confirmed)
	found = nil
	for _, v := range w.audit().Violations {
		found = append(found, v.Invariant)
	}
	assert.NotContains(t, found, audit.MoneyMatchesKeptUnits)
}

// TestAudit_MoneyViolations_NameBothRecords: a money violation names the numbers of both records
// of the money, the provider's intents and the payments row, word for word.
func TestAudit_MoneyViolations_NameBothRecords(t *testing.T) {
	t.Parallel()
	details := func(w *world, orderID int64) map[string]string {
		t.Helper()
		out := map[string]string{}
		for _, v := range w.audit().Violations {
			if v.Subject == fmt.Sprintf("order %d", orderID) {
				out[v.Invariant] = v.Detail
			}
		}
		return out
	}
	total := func(w *world, orderID int64) string {
		return money.Format(w.id(`SELECT total_minor FROM orders WHERE id = $1`, orderID))
	}

	t.Run("a second intent captured", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t)
		w.exec(`INSERT INTO paysim.intents (id, idempotency_key, order_id, amount_minor, currency, token, status, captured_minor, created_at)
			SELECT 'pi_twice', 'another-key', order_id, amount_minor, currency, token, 'CAPTURED', amount_minor, now() + interval '1 second'
			FROM paysim.intents WHERE order_id = $1`, w.confirmed)
		tot, twice := total(w, w.confirmed), money.Format(2*w.id(`SELECT total_minor FROM orders WHERE id = $1`, w.confirmed))
		assert.Equal(t, map[string]string{
			audit.ConfirmedOrderPaidOnce: fmt.Sprintf("order total %s; provider: 2 intents (pi_%d CAPTURED, pi_twice CAPTURED), 2 captured, captured %s, refunded 0.00, amount %s; payments row: CAPTURED, intent \"pi_%d\", amount %s, captured %s, refunded 0.00",
				tot, w.confirmed, twice, tot, w.confirmed, tot, tot),
			audit.MoneyMatchesKeptUnits: fmt.Sprintf("units kept are worth %s (order total %s); provider captured %s and refunded 0.00 (keeps %s); payments row captured %s and refunded 0.00 (keeps %s)",
				tot, tot, twice, twice, tot, tot),
		}, details(w, w.confirmed))
	})
	t.Run("no intent at all", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t)
		w.exec(`DELETE FROM paysim.intents WHERE order_id = $1`, w.confirmed)
		tot := total(w, w.confirmed)
		assert.Equal(t, map[string]string{
			audit.ConfirmedOrderPaidOnce: fmt.Sprintf("order total %s; provider: 0 intents (none), 0 captured, captured 0.00, refunded 0.00, amount 0.00; payments row: CAPTURED, intent \"pi_%d\", amount %s, captured %s, refunded 0.00",
				tot, w.confirmed, tot, tot),
			audit.MoneyMatchesKeptUnits: fmt.Sprintf("units kept are worth %s (order total %s); provider captured 0.00 and refunded 0.00 (keeps 0.00); payments row captured %s and refunded 0.00 (keeps %s)",
				tot, tot, tot, tot),
		}, details(w, w.confirmed))
	})
	t.Run("money kept for a failed order", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t)
		w.exec(`UPDATE paysim.intents SET status = 'CAPTURED', captured_minor = amount_minor WHERE order_id = $1`, w.expired)
		assert.Equal(t, map[string]string{
			audit.FailedOrderNoMoneyKept: fmt.Sprintf("FAILED (%s): provider captured %s and refunded 0.00; payments row captured 0.00 and refunded 0.00",
				problem.HoldExpired, total(w, w.expired)),
		}, details(w, w.expired))
	})
	t.Run("authorization left open", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t)
		w.exec(`UPDATE paysim.intents SET status = 'AUTHORIZED' WHERE order_id = $1`, w.declined)
		assert.Equal(t, map[string]string{
			audit.FailedOrderAuthVoided: fmt.Sprintf("FAILED (%s): 1 provider intents still open (pi_%d AUTHORIZED)", problem.PaymentDeclined, w.declined),
		}, details(w, w.declined))
	})
}

// TestAudit_NoProvider_SaysItsSideWasNotChecked: asked without the provider's record, the audit
// judges the money by the payments rows alone and says that the provider's side was not checked;
// a fault only the provider's record shows goes unseen.
func TestAudit_NoProvider_SaysItsSideWasNotChecked(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.exec(`UPDATE paysim.intents SET status = 'AUTHORIZED' WHERE order_id = $1`, w.declined)
	w.exec(`UPDATE payments SET captured_minor = amount_minor WHERE order_id = $1`, w.expired)

	rep, err := audit.Run(w.ctx, w.pool, audit.Options{HoldTTL: 15 * time.Minute, SweeperPeriod: time.Minute, Slack: time.Minute})
	require.NoError(t, err)
	assert.False(t, rep.ProviderChecked)
	var text strings.Builder
	require.NoError(t, rep.WriteText(&text, 0))
	assert.Contains(t, text.String(), "payment provider not asked: its side of the money not checked")
	var total int64
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT total_minor FROM orders WHERE id = $1`, w.expired).Scan(&total))
	assert.Equal(t, []audit.Violation{{Invariant: audit.FailedOrderNoMoneyKept, Subject: fmt.Sprintf("order %d", w.expired),
		Detail: fmt.Sprintf("FAILED (%s): provider not checked; payments row captured %s and refunded 0.00",
			problem.HoldExpired, money.Format(total))}}, rep.Violations)

	rep = w.audit()
	assert.True(t, rep.ProviderChecked)
	var found []string
	for _, v := range rep.Violations {
		found = append(found, v.Invariant)
	}
	assert.Contains(t, found, audit.FailedOrderAuthVoided, "with the provider's record")
	text.Reset()
	require.NoError(t, rep.WriteText(&text, 0))
	assert.NotContains(t, text.String(), "payment provider not asked")
}
