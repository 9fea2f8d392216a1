package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/audit"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/payment"
	"github.com/marketplace/checkout/payment/paysim"
	"github.com/marketplace/checkout/workflows"
)

// confirmedOrder places an order paid at once and waits until it is CONFIRMED.
func (s *stack) confirmedOrder(user int64, items map[int64]int32) (*shopper, int64) {
	s.t.Helper()
	sh := s.shopper(user)
	sh.fill(items)
	r := sh.order("k-"+randomHex(8), sh.preview(), "tok_ok")
	require.Equal(s.t, http.StatusCreated, r.status, r.raw)
	id := r.int("orderId")
	require.Equal(s.t, "CONFIRMED", s.waitFinal(sh.token, id, 30*time.Second).str("status"))
	return sh, id
}

// cancelLine is ops cancelling units of a line through the API.
func (s *stack) cancelLine(orderID, skuID int64, key string, units int, reason string) reply {
	return s.call(http.MethodPost, fmt.Sprintf("/api/v1/ops/orders/%d/lines/%d/cancel", orderID, skuID), s.ops(),
		[]string{"Idempotency-Key", key}, map[string]any{"units": units, "reason": reason})
}

// startFromUI starts a line cancellation as support does from the Temporal UI's start form: the
// workflow type, the task queue and the input as pasted JSON, which the API's codec endpoint
// encodes for the signed-in staff member — writing its actor key (supportStaff) into a JSON object.
func (s *stack) startFromUI(workflowID, input string) client.WorkflowRun {
	s.t.Helper()
	var obj map[string]any
	if json.Unmarshal([]byte(input), &obj) == nil {
		obj["actor"] = supportStaff
		raw, err := json.Marshal(obj)
		require.NoError(s.t, err)
		input = string(raw)
	}
	return s.startUnsigned(workflowID, input)
}

// startUnsigned starts a line cancellation with its input as given: as a client that does not go
// through the codec endpoint would.
func (s *stack) startUnsigned(workflowID, input string) client.WorkflowRun {
	s.t.Helper()
	run, err := s.temporal.ExecuteWorkflow(s.ctx, client.StartWorkflowOptions{ID: workflowID, TaskQueue: s.cfg.TaskQueue},
		workflows.LineCancelWorkflowName, json.RawMessage(input))
	require.NoError(s.t, err)
	return run
}

func (s *stack) auditClean() {
	s.t.Helper()
	rep, err := audit.Run(s.ctx, s.pool, audit.Options{HoldTTL: s.cfg.HoldTTL, Slack: 10 * time.Second,
		Visibility: s.temporal, TaskQueue: s.cfg.TaskQueue, Provider: paysim.NewRecords(s.pool)})
	require.NoError(s.t, err)
	var out strings.Builder
	require.NoError(s.t, rep.WriteText(&out, 20))
	assert.Empty(s.t, rep.Violations, out.String())
}

func (s *stack) onHand(sku int64, warehouse int32) int64 {
	return s.scalar(`SELECT on_hand FROM inventory WHERE sku_id = $1 AND warehouse_id = $2`, sku, warehouse)
}

func TestLineCancel_DamagedUnit_PartialRefund_NotRestocked_RepeatChangesNothing(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	sh, id := s.confirmedOrder(9101, map[int64]int32{76: 2})
	stock := s.onHand(76, 1)
	key := "lc-" + randomHex(6)

	r := s.cancelLine(id, 76, key, 1, "damaged")
	require.Equal(t, http.StatusOK, r.status, r.raw)
	assert.Equal(t, int64(2), r.int("quantity"))
	assert.Equal(t, int64(1), r.int("cancelledQuantity"))
	assert.Equal(t, int64(1), r.int("remaining"))
	assert.Equal(t, "DONE", r.str("cancellation", "status"))
	assert.Equal(t, "1899.00", r.str("cancellation", "refund"), "exactly one unit's price")

	assert.Equal(t, int64(1899_00), s.scalar(`SELECT refunded_minor FROM paysim.intents WHERE order_id = $1`, id))
	assert.Equal(t, int64(1899_00), s.scalar(`SELECT refunded_minor FROM payments WHERE order_id = $1`, id))
	assert.Equal(t, stock, s.onHand(76, 1), "a damaged unit is not put back on the shelf")
	assert.Equal(t, int64(1), s.scalar(`SELECT count(*) FROM outbox_events WHERE event_type = $1 AND (payload->>'orderId')::bigint = $2
		AND (payload->>'sellerId')::bigint = 42 AND (payload->>'userId')::bigint = $3 AND (payload->>'units')::int = 1`,
		activities.EventOrderLineCancelled, id, sh.id))

	o := s.call(http.MethodGet, fmt.Sprintf("/api/v1/orders/%d", id), sh.token, nil, nil)
	require.Equal(t, http.StatusOK, o.status, o.raw)
	assert.Equal(t, "CONFIRMED", o.str("status"))
	assert.Equal(t, "3798.00", o.str("totals", "ordered"))
	assert.Equal(t, "1899.00", o.str("totals", "refunded"))
	assert.Equal(t, "1899.00", o.str("totals", "kept"))
	item := o.body["items"].([]any)[0].(map[string]any)
	assert.Equal(t, float64(1), item["cancelledQuantity"])
	cancellation := o.body["cancellations"].([]any)[0].(map[string]any)
	assert.Equal(t, "damaged", cancellation["reason"])
	assert.NotContains(t, cancellation, "requestedBy", "who asked is for staff")
	assert.Contains(t, o.raw, `"kind":"line_cancelled"`)
	assert.NotContains(t, o.raw, `"actor"`, "the shopper never sees which staff member acted")
	assert.NotContains(t, o.raw, "staffActions")
	// Who asked: the ops user of the bearer token, through the ops API, from the caller's address.
	asSupport := s.call(http.MethodGet, fmt.Sprintf("/api/v1/orders/%d", id), s.support(), nil, nil)
	require.Len(t, asSupport.body["staffActions"], 1, asSupport.raw)
	acted := asSupport.body["staffActions"].([]any)[0].(map[string]any)
	assert.Equal(t, "line_cancel", acted["action"])
	assert.Equal(t, map[string]any{"sub": "950", "role": "ops", "name": "user 950", "via": "ops-api", "ip": "127.0.0.1"}, acted["actor"])
	assert.Equal(t, int64(1), s.scalar(`SELECT count(*) FROM staff_actions WHERE order_id = $1 AND actor_sub = '950'
		AND actor_role = 'ops' AND actor_via = 'ops-api' AND action = 'line_cancel' AND reason = 'damaged'`, id))
	s.auditClean()

	wf := workflows.LineCancelWorkflowID(id, key)
	s.recordHistory("line-cancel-damaged", wf)

	// The same request again: the same answer, nothing more moved.
	again := s.cancelLine(id, 76, key, 1, "damaged")
	require.Equal(t, http.StatusOK, again.status, again.raw)
	assert.Equal(t, int64(1), again.int("cancelledQuantity"))
	// And support pasting the same request into the UI's start form (a new run of the same
	// workflow id, which the UI allows once the first has closed): found, nothing more changes.
	var st workflows.LineCancelState
	require.NoError(t, s.startFromUI(wf,
		fmt.Sprintf(`{"orderId": %d, "skuId": 76, "units": 1, "reason": "damaged", "requestId": %q}`, id, key)).Get(s.ctx, &st))
	assert.Equal(t, workflows.LineCancelDone, st.Status)
	assert.Equal(t, int64(1899_00), s.scalar(`SELECT refunded_minor FROM paysim.intents WHERE order_id = $1`, id))
	assert.Equal(t, int64(1), s.scalar(`SELECT count(*) FROM paysim.refunds`))
	assert.Equal(t, int64(1), s.scalar(`SELECT cancelled_quantity FROM order_items WHERE order_id = $1`, id))
	assert.Equal(t, int64(1), s.scalar(`SELECT count(*) FROM outbox_events WHERE event_type = $1`, activities.EventOrderLineCancelled))
	assert.Equal(t, stock, s.onHand(76, 1))
	s.recordHistory("line-cancel-repeated", wf)

	reused := s.cancelLine(id, 76, key, 1, "lost")
	assert.Equal(t, http.StatusUnprocessableEntity, reused.status, reused.raw)
	assert.Equal(t, "IDEMPOTENCY_KEY_REUSED", reused.str("code"))
	s.auditClean()
}

func TestLineCancel_ConcurrentRequests_NeverMoreThanTheLineHas(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	_, id := s.confirmedOrder(9102, map[int64]int32{71: 3})

	var wg sync.WaitGroup
	replies := make([]reply, 3)
	for i := range replies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies[i] = s.cancelLine(id, 71, fmt.Sprintf("lc-race-%d-%s", i, randomHex(4)), 2, "lost")
		}()
	}
	wg.Wait()
	done, refused := 0, 0
	for _, r := range replies {
		switch r.status {
		case http.StatusOK:
			done++
		case http.StatusConflict:
			assert.Equal(t, "UNITS_EXCEED_LINE", r.str("code"), r.raw)
			assert.Equal(t, int64(1), r.int("remaining"), r.raw)
			refused++
		default:
			t.Errorf("unexpected answer %d: %s", r.status, r.raw)
		}
	}
	assert.Equal(t, 1, done, "three requests of 2 units on a 3-unit line: one goes through")
	assert.Equal(t, 2, refused)
	assert.Equal(t, int64(2), s.scalar(`SELECT cancelled_quantity FROM order_items WHERE order_id = $1`, id))
	assert.Equal(t, int64(2), s.scalar(`SELECT sum(cancelled_quantity) FROM stock_reservations WHERE order_id = $1`, id))
	assert.Equal(t, int64(2*1249_90), s.scalar(`SELECT refunded_minor FROM paysim.intents WHERE order_id = $1`, id))
	assert.Equal(t, int64(1), s.scalar(`SELECT count(*) FROM line_cancellations WHERE order_id = $1`, id),
		"a refused request leaves no record")

	// The last unit can still go.
	last := s.cancelLine(id, 71, "lc-last-"+randomHex(4), 1, "lost")
	require.Equal(t, http.StatusOK, last.status, last.raw)
	assert.Equal(t, int64(0), last.int("remaining"))
	assert.Equal(t, "REFUNDED", s.scalarText(`SELECT status FROM paysim.intents WHERE order_id = $1`, id),
		"every unit cancelled: the whole capture given back")
	s.auditClean()
}

func TestLineCancel_Refusals_NothingChanged(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{hold: 10 * time.Minute})
	sh := s.shopper(9103)
	sh.fill(map[int64]int32{78: 2})
	pending := sh.order("k-"+randomHex(8), sh.preview(), "tok_3ds")
	require.Equal(t, http.StatusCreated, pending.status, pending.raw)
	pid := pending.int("orderId")
	_, cid := s.confirmedOrder(9104, map[int64]int32{78: 2})

	r := s.cancelLine(pid, 78, "lc-"+randomHex(4), 1, "damaged")
	assert.Equal(t, http.StatusConflict, r.status, r.raw)
	assert.Equal(t, "ORDER_NOT_CONFIRMED", r.str("code"))
	assert.Equal(t, "PENDING_PAYMENT", r.str("status"))

	for _, tc := range []struct {
		name          string
		order, sku    int64
		units         int
		reason, token string
		status        int
		code          string
	}{
		{"more units than the line has", cid, 78, 3, "damaged", s.ops(), http.StatusConflict, "UNITS_EXCEED_LINE"},
		{"unknown reason", cid, 78, 1, "broken", s.ops(), http.StatusBadRequest, "VALIDATION_FAILED"},
		{"no units", cid, 78, 0, "damaged", s.ops(), http.StatusBadRequest, "VALIDATION_FAILED"},
		{"no such line", cid, 71, 1, "damaged", s.ops(), http.StatusNotFound, "LINE_NOT_FOUND"},
		{"no such order", cid + 1000, 78, 1, "damaged", s.ops(), http.StatusNotFound, "NOT_FOUND"},
		{"a shopper", cid, 78, 1, "damaged", sh.token, http.StatusForbidden, "FORBIDDEN"},
		{"support (the UI is theirs)", cid, 78, 1, "damaged", s.support(), http.StatusForbidden, "FORBIDDEN"},
	} {
		r := s.call(http.MethodPost, fmt.Sprintf("/api/v1/ops/orders/%d/lines/%d/cancel", tc.order, tc.sku), tc.token,
			[]string{"Idempotency-Key", "lc-" + randomHex(4)}, map[string]any{"units": tc.units, "reason": tc.reason})
		assert.Equal(t, tc.status, r.status, "%s: %s", tc.name, r.raw)
		assert.Equal(t, tc.code, r.str("code"), tc.name)
	}
	noKey := s.call(http.MethodPost, fmt.Sprintf("/api/v1/ops/orders/%d/lines/78/cancel", cid), s.ops(), nil,
		map[string]any{"units": 1, "reason": "damaged"})
	assert.Equal(t, http.StatusBadRequest, noKey.status, noKey.raw)

	// From the UI: a pending order's line, and input support typed wrong, fail the workflow
	// with the reason.
	for input, code := range map[string]problem.Code{
		fmt.Sprintf(`{"orderId": %d, "skuId": 78, "units": 1, "reason": "damaged", "requestId": "ui-1"}`, pid): problem.OrderNotConfirmed,
		fmt.Sprintf(`{"orderId": %d, "skuId": 78, "units": 1, "reason": "dropped", "requestId": "ui-2"}`, cid): problem.ValidationFailed,
		fmt.Sprintf(`{"order": %d, "skuId": 78, "units": 1, "reason": "lost", "requestId": "ui-3"}`, cid):      problem.ValidationFailed,
	} {
		err := s.startFromUI("line-cancel-ui-"+randomHex(4), input).Get(s.ctx, nil)
		var appErr *temporal.ApplicationError
		require.ErrorAs(t, err, &appErr, input)
		assert.Equal(t, string(code), appErr.Type(), input)
	}
	// Not through the codec endpoint: an input that names nobody, whatever name is typed in, is
	// refused before anything changes.
	for _, input := range []string{
		fmt.Sprintf(`{"orderId": %d, "skuId": 78, "units": 1, "reason": "damaged", "requestId": "ui-4"}`, cid),
		fmt.Sprintf(`{"orderId": %d, "skuId": 78, "units": 1, "reason": "damaged", "requestId": "ui-5", "requestedBy": "ops user 950"}`, cid),
	} {
		err := s.startUnsigned("line-cancel-ui-"+randomHex(4), input).Get(s.ctx, nil)
		var appErr *temporal.ApplicationError
		require.ErrorAs(t, err, &appErr, input)
		assert.Equal(t, string(problem.ValidationFailed), appErr.Type(), input)
		assert.Contains(t, appErr.Message(), "no actor", input)
	}
	assert.Zero(t, s.scalar(`SELECT count(*) FROM staff_actions`))
	assert.Zero(t, s.scalar(`SELECT count(*) FROM line_cancellations`))
	assert.Zero(t, s.scalar(`SELECT COALESCE(sum(cancelled_quantity), 0) FROM order_items`))
	assert.Zero(t, s.scalar(`SELECT COALESCE(sum(refunded_minor), 0) FROM paysim.intents`))
}

func TestLineCancel_SellerCannotShip_FromTheUI_PutBackOnTheShelf(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	_, id := s.confirmedOrder(9105, map[int64]int32{73: 2})
	stock := s.onHand(73, 1)
	wf := workflows.LineCancelWorkflowID(id, "ui-seller-1")

	var st workflows.LineCancelState
	require.NoError(t, s.startFromUI(wf, fmt.Sprintf(
		`{"orderId": %d, "skuId": 73, "units": 1, "reason": "seller_cannot_ship", "requestId": "ui-seller-1"}`, id)).Get(s.ctx, &st))

	assert.Equal(t, workflows.LineCancelDone, st.Status)
	assert.True(t, st.Restock)
	assert.Equal(t, stock+1, s.onHand(73, 1), "the unit never left the seller's shelf: sellable again")
	assert.Equal(t, int64(1), s.scalar(`SELECT count(*) FROM inventory_ledger WHERE sku_id = 73 AND warehouse_id = 1
		AND kind = 'RESTOCK' AND delta = 1`))
	assert.Equal(t, int64(899_90), s.scalar(`SELECT refunded_minor FROM paysim.intents WHERE order_id = $1`, id))
	o := s.call(http.MethodGet, fmt.Sprintf("/api/v1/orders/%d", id), s.support(), nil, nil)
	require.Equal(t, http.StatusOK, o.status, o.raw)
	c := o.body["cancellations"].([]any)[0].(map[string]any)
	assert.Equal(t, true, c["restocked"])
	assert.Equal(t, supportStaff.String(), c["requestedBy"], "the person who asked, from the verified actor")
	assert.Equal(t, "899.90", o.str("totals", "kept"))
	s.auditClean()
	s.recordHistory("line-cancel-seller-cannot-ship", wf)
}

// refusingRefunds is the worker's provider, refusing partial refunds while refuse is set (as a
// provider does for an intent it holds in another state).
type refusingRefunds struct {
	payment.Gateway
	refuse *atomic.Bool
}

func (g refusingRefunds) RefundPart(ctx context.Context, key payment.Ref, r payment.PartialRefund) (payment.Intent, error) {
	if g.refuse.Load() {
		return payment.Intent{}, fmt.Errorf("refund of %q: %w", key.Key, payment.ErrInvalidState)
	}
	return g.Gateway.RefundPart(ctx, key, r)
}

func TestLineCancel_RefundRefused_NeedsAttention_SupportRetries(t *testing.T) {
	t.Parallel()
	refuse := &atomic.Bool{}
	refuse.Store(true)
	s := startStack(t, stackOptions{gateway: func(g payment.Gateway) payment.Gateway {
		return refusingRefunds{Gateway: g, refuse: refuse}
	}})
	_, id := s.confirmedOrder(9106, map[int64]int32{74: 2})
	wf := workflows.LineCancelWorkflowID(id, "ui-refused-1")
	run := s.startFromUI(wf, fmt.Sprintf(
		`{"orderId": %d, "skuId": 74, "units": 1, "reason": "lost", "requestId": "ui-refused-1"}`, id))

	deadline := time.Now().Add(30 * time.Second)
	for s.scalar(`SELECT count(*) FROM line_cancellations WHERE order_id = $1 AND attention IS NOT NULL`, id) == 0 {
		require.True(t, time.Now().Before(deadline), "the refused refund never asked for support")
		time.Sleep(200 * time.Millisecond)
	}
	// The row is written by the step; the search attribute leaves with the workflow task after it.
	var desc *client.WorkflowExecutionDescription
	require.Eventually(t, func() bool {
		d, err := s.temporal.DescribeWorkflow(s.ctx, wf, "")
		if err != nil {
			return false
		}
		desc = d
		attention, _ := d.TypedSearchAttributes.GetBool(workflows.AttrNeedsAttention)
		return attention
	}, 30*time.Second, 200*time.Millisecond, "visible in the UI: NeedsAttention = true")
	orderAttr, _ := desc.TypedSearchAttributes.GetInt64(workflows.AttrOrderID)
	assert.Equal(t, id, orderAttr, "found with OrderId = <id> beside the order's own workflow")
	o := s.call(http.MethodGet, fmt.Sprintf("/api/v1/orders/%d", id), s.support(), nil, nil)
	require.Equal(t, http.StatusOK, o.status, o.raw)
	assert.Equal(t, "NEEDS_ATTENTION", o.body["cancellations"].([]any)[0].(map[string]any)["status"])
	assert.Zero(t, s.scalar(`SELECT refunded_minor FROM paysim.intents WHERE order_id = $1`, id), "nothing refunded yet")
	assert.Error(t, s.supportAction(wf, workflows.ActionCancel, "skip it"), "only retry: the money must go back")

	refuse.Store(false) // the provider's side fixed
	require.NoError(t, s.supportAction(wf, workflows.ActionRetry, "intent fixed at the provider"))
	var st workflows.LineCancelState
	require.NoError(t, run.Get(s.ctx, &st))
	assert.Equal(t, workflows.LineCancelDone, st.Status)
	assert.False(t, st.NeedsAttention)
	assert.Equal(t, int64(549_90), s.scalar(`SELECT refunded_minor FROM paysim.intents WHERE order_id = $1`, id))
	assert.Zero(t, s.scalar(`SELECT count(*) FROM line_cancellations WHERE attention IS NOT NULL`))
	s.auditClean()
	s.recordHistory("line-cancel-refund-refused", wf)
}

func (s *stack) scalarText(sql string, args ...any) string {
	s.t.Helper()
	var v string
	require.NoError(s.t, s.pool.QueryRow(s.ctx, sql, args...).Scan(&v))
	return v
}
