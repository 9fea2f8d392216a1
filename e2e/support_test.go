package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/staff"
	"github.com/marketplace/checkout/order"
	"github.com/marketplace/checkout/workflows"
)

// parkedOrder places a 3-D Secure order, approves the payment while the provider can no longer
// move money (it still answers the order's check of the approval) and waits until the capture has
// spent its retries and the order waits for support.
func (s *stack) parkedOrder(user int64) (*shopper, int64, string) {
	s.t.Helper()
	sh := s.shopper(user)
	sh.fill(map[int64]int32{88: 2})
	key := "k-" + randomHex(8)
	r := sh.order(key, sh.preview(), "tok_3ds")
	require.Equal(s.t, http.StatusCreated, r.status, r.raw)
	id := r.int("orderId")
	s.moneyDown.Store(true)
	require.Equal(s.t, http.StatusOK, s.answer3DS(r.str("payment", "redirectUrl"), "approve").status)
	deadline := time.Now().Add(time.Minute)
	for {
		o := s.call(http.MethodGet, fmt.Sprintf("/api/v1/orders/%d", id), sh.token, nil, nil)
		if o.str("status") == "NEEDS_ATTENTION" {
			return sh, id, sh.workflowOf(key)
		}
		require.True(s.t, time.Now().Before(deadline), "order %d never needed attention: %s", id, o.raw)
		time.Sleep(200 * time.Millisecond)
	}
}

func (s *stack) providerUp() { s.moneyDown.Store(false) }

// supportAction sends what support staff send from the UI, as the API's codec endpoint encodes it
// for the signed-in staff member: the action named with its person (supportStaff).
func (s *stack) supportAction(workflowID string, action, reason string) error {
	return s.supportActionBy(workflowID, workflows.SupportRequest{Action: action, Reason: reason, Actor: &supportStaff})
}

func (s *stack) supportActionBy(workflowID string, req workflows.SupportRequest) error {
	h, err := s.temporal.UpdateWorkflow(s.ctx, client.UpdateWorkflowOptions{WorkflowID: workflowID,
		UpdateName: workflows.SupportAction, Args: []any{req}, WaitForStage: client.WorkflowUpdateStageCompleted})
	if err != nil {
		return err
	}
	return h.Get(s.ctx, nil)
}

// supportStaff is the signed-in support person whom the codec endpoint names in every JSON object
// the Temporal UI sends (its actor key, overwritten with the verified identity).
var supportStaff = staff.Actor{Sub: "900", Role: auth.RoleSupport, Name: "Deniz Destek", Via: staff.ViaTemporalUI,
	IP: "127.0.0.1"}

func TestSupport_ProviderDownPastRetries_NeedsAttentionThenRetryAndCancel(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{hold: 10 * time.Minute, stepRetryWindow: 3 * time.Second})
	sh1, id1, wf1 := s.parkedOrder(60001)

	// Support finds it by search attribute, as in the UI's search box.
	query := fmt.Sprintf(`NeedsAttention = true AND CustomerId = %d`, sh1.id)
	var found []string
	require.Eventually(t, func() bool {
		res, err := s.temporal.ListWorkflow(s.ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query})
		require.NoError(t, err)
		found = found[:0]
		for _, e := range res.Executions {
			found = append(found, e.Execution.WorkflowId)
		}
		return len(found) == 1
	}, 20*time.Second, 200*time.Millisecond)
	assert.Equal(t, []string{wf1}, found)
	var st workflows.OrderState
	v, err := s.temporal.QueryWorkflow(s.ctx, wf1, "", workflows.QueryStatus)
	require.NoError(t, err)
	require.NoError(t, v.Get(&st))
	require.NotNil(t, st.Attention)
	assert.Equal(t, "capture", st.Attention.Step)
	assert.Contains(t, st.Attention.Error, "unavailable")

	// The shopper sees a code and a message of ours; support sees the dependency's error.
	asShopper := s.call(http.MethodGet, fmt.Sprintf("/api/v1/orders/%d", id1), sh1.token, nil, nil)
	assert.Equal(t, "ORDER_DELAYED", asShopper.str("attention", "code"), asShopper.raw)
	assert.NotContains(t, asShopper.raw, "unavailable", "no internal error text reaches the shopper")
	asSupport := s.call(http.MethodGet, fmt.Sprintf("/api/v1/orders/%d", id1), s.support(), nil, nil)
	assert.Contains(t, asSupport.str("attention", "error"), "unavailable")

	// An invalid action is refused and changes nothing.
	err = s.supportAction(wf1, "explode", "testing")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `action must be "retry", "cancel" or "refund"`)
	assert.Equal(t, "NEEDS_ATTENTION", s.call(http.MethodGet, fmt.Sprintf("/api/v1/orders/%d", id1), sh1.token, nil, nil).str("status"))

	// The provider is back; support retries the failed step.
	s.providerUp()
	require.NoError(t, s.supportAction(wf1, "retry", "provider recovered"))
	final := s.waitFinal(sh1.token, id1, 30*time.Second)
	assert.Equal(t, "CONFIRMED", final.str("status"))
	assert.Equal(t, "CAPTURED", final.str("payment", "status"))
	assert.NotContains(t, final.raw, "provider recovered", "support's reason stays internal")
	assert.Contains(t, final.raw, `"action":"retry"`, "the shopper sees that support acted")
	bySupport := s.call(http.MethodGet, fmt.Sprintf("/api/v1/orders/%d", id1), s.support(), nil, nil)
	assert.Contains(t, bySupport.raw, `"reason":"provider recovered"`, "support reads the action and its reason in the timeline")

	// A second order in the same state: support cancels it while the provider is still down (the
	// parked capture retries on its own, so once the provider is back it may go through first:
	// then the cancel refunds it). The authorization is voided once the provider is back.
	sh2, id2, wf2 := s.parkedOrder(60002)
	require.NoError(t, s.supportAction(wf2, "cancel", "customer called"))
	s.providerUp()
	final = s.waitFinal(sh2.token, id2, 30*time.Second)
	assert.Equal(t, "CANCELLED", final.str("status"))
	assert.Equal(t, "VOIDED", final.str("payment", "status"), "authorization voided")
	assert.Equal(t, "0.00", final.str("payment", "captured"))
	assert.Zero(t, s.scalar(`SELECT COALESCE(sum(reserved), 0) FROM inventory`), "stock back")
	assert.Equal(t, int64(150-2), s.scalar(`SELECT sum(on_hand) FROM inventory WHERE sku_id = 88`), "only the first order's units left")
	s.recordHistory("support-retry", wf1)
	s.recordHistory("support-cancel", wf2)

	// A third: support refunds it (nothing was captured: the authorization is voided).
	sh3, id3, wf3 := s.parkedOrder(60007)
	require.NoError(t, s.supportAction(wf3, "refund", "goods damaged in the warehouse"))
	s.providerUp()
	final = s.waitFinal(sh3.token, id3, 30*time.Second)
	assert.Equal(t, "CANCELLED", final.str("status"))
	assert.Equal(t, "REFUNDED_BY_SUPPORT", final.str("failureCode"))
	require.Eventually(t, func() bool {
		p := s.call(http.MethodGet, fmt.Sprintf("/api/v1/orders/%d", id3), sh3.token, nil, nil).str("payment", "status")
		return p == "VOIDED" || p == "REFUNDED"
	}, 30*time.Second, 100*time.Millisecond, "no money kept")
	s.recordHistory("support-refund", wf3)
}

// TestSupport_ResetConfirmedOrderBeforeCapture_CapturesOnce resets a confirmed order's workflow
// to the workflow task before its capture, as support can from the UI: the new run repeats the
// capture, and the provider captures once, because the key comes from the order.
func TestSupport_ResetConfirmedOrderBeforeCapture_CapturesOnce(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	sh := s.shopper(60003)
	sh.fill(map[int64]int32{74: 1})
	key := "k-" + randomHex(8)
	r := sh.order(key, sh.preview(), "tok_3ds")
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	id := r.int("orderId")
	wfID := sh.workflowOf(key)
	// Pay only once the workflow has settled into waiting (its second workflow task, after the
	// hold child started), so that a reset point lies between the order row and the payment.
	require.Eventually(t, func() bool { return s.completedTasks(wfID, "") >= 2 }, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, http.StatusOK, s.answer3DS(r.str("payment", "redirectUrl"), "approve").status)
	require.Equal(t, "CONFIRMED", s.waitFinal(sh.token, id, 30*time.Second).str("status"))
	require.NoError(t, s.temporal.GetWorkflow(s.ctx, wfID, "").Get(s.ctx, nil))
	d, err := s.temporal.DescribeWorkflow(s.ctx, wfID, "")
	require.NoError(t, err)
	desc := d.RawResponse
	require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, desc.WorkflowExecutionInfo.Status)

	// The reset point: the last completed workflow task before the webhook's signal, so the new
	// run confirms and captures again.
	var resetTo int64
	it := s.temporal.GetWorkflowHistory(s.ctx, wfID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(t, err)
		if e.EventType == enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED {
			break
		}
		if e.EventType == enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED {
			resetTo = e.EventId
		}
	}
	require.NotZero(t, resetTo)
	reset, err := s.temporal.ResetWorkflowExecution(s.ctx, &workflowservice.ResetWorkflowExecutionRequest{
		Namespace: s.cfg.TemporalNamespace, WorkflowExecution: desc.WorkflowExecutionInfo.Execution,
		Reason: "support: re-run the payment steps", WorkflowTaskFinishEventId: resetTo, RequestId: randomHex(8)})
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	var st workflows.OrderState
	require.NoError(t, s.temporal.GetWorkflow(ctx, wfID, reset.RunId).Get(ctx, &st))
	assert.Equal(t, order.StatusConfirmed, st.Status)
	// The new run acted on the order again after the signal. Which way it went depends on whether
	// the hold child's end (it finished in the first run) reached the new run before the payment
	// did: either it settled again (confirm, capture, complete: the same keys, so nothing twice) or
	// it took the hold's end for an expiry and its fail path found the row CONFIRMED and gave
	// nothing back. Both must leave one capture, one reservation and one unit gone.
	markersAfterSignal, signalled := 0, false
	it = s.temporal.GetWorkflowHistory(s.ctx, wfID, reset.RunId, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(t, err)
		switch {
		case e.EventType == enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
			signalled = true
		case signalled && e.EventType == enumspb.EVENT_TYPE_MARKER_RECORDED:
			markersAfterSignal++
		}
	}
	events := map[string]int{}
	for _, e := range st.Timeline {
		events[e.Event]++
	}
	if events["order already confirmed"] == 1 {
		assert.GreaterOrEqual(t, markersAfterSignal, 1, "the fail path's conditional transition ran in the new run")
	} else {
		assert.GreaterOrEqual(t, markersAfterSignal, 3, "confirm, capture and complete ran again in the new run")
		assert.Equal(t, 1, events["stock confirmed"], "the new run confirmed the stock")
	}
	var amount, captured int64
	var intents int
	require.NoError(t, s.pool.QueryRow(s.ctx, `SELECT count(*), sum(amount_minor), sum(captured_minor) FROM paysim.intents WHERE order_id = $1`, id).
		Scan(&intents, &amount, &captured))
	assert.Equal(t, 1, intents, "one authorization")
	assert.Equal(t, amount, captured, "captured exactly once")
	assert.Equal(t, int64(1), s.scalar(`SELECT count(*) FROM stock_reservations WHERE order_id = $1`, id), "reserved once")
	assert.Equal(t, int64(100-1), s.scalar(`SELECT sum(on_hand) FROM inventory WHERE sku_id = 74 AND warehouse_id = 1`),
		"the unit left the warehouse once")
	assert.Equal(t, "CONFIRMED", s.waitFinal(sh.token, id, time.Second).str("status"))
}

// completedTasks counts the workflow tasks a run has completed.
func (s *stack) completedTasks(workflowID, runID string) int {
	n := 0
	it := s.temporal.GetWorkflowHistory(s.ctx, workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(s.t, err)
		if e.EventType == enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED {
			n++
		}
	}
	return n
}

// TestSupport_OrderTerminated_HoldGivesEverythingBackAtOnce: support terminates an order's workflow
// (no compensation runs); its hold child, asked to stop by the parent-close policy rather than
// terminated, finds the order left open: it releases the stock, fails the order (ORPHANED) and
// voids its payment, without waiting for the hold's expiry.
func TestSupport_OrderTerminated_HoldGivesEverythingBackAtOnce(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{hold: 10 * time.Minute})
	// The hold child starts with the answer; terminate once it runs. (An order terminated before
	// its child started is ended by the payment reconciler: see orphan_test.go.)
	sh, key, id := s.waitingOrder(60004, 87)
	require.NoError(t, s.temporal.TerminateWorkflow(s.ctx, sh.workflowOf(key), "", "support: testing terminate"))

	final := s.waitFinal(sh.token, id, 30*time.Second)
	assert.Equal(t, "FAILED", final.str("status"))
	assert.Equal(t, "ORPHANED", final.str("failureCode"))
	// The hold fails the order first (only an open order may be ended), then reverses its payment.
	require.Eventually(t, func() bool {
		r := s.call(http.MethodGet, fmt.Sprintf("/api/v1/orders/%d", id), sh.token, nil, nil)
		return r.str("payment", "status") == "VOIDED"
	}, 10*time.Second, 100*time.Millisecond, "no authorization left hanging")
	assert.Zero(t, s.scalar(`SELECT COALESCE(sum(reserved), 0) FROM inventory`), "stock back, long before the hold's expiry")
}

// TestSupport_ParkedOrder_HistoryDoesNotGrowWhileItWaits: a parked step goes on retrying on the
// server, and each attempt adds nothing to the order's history; when the outage ends, the order
// completes by itself. Its only timers are its two deadlines (escalation and give-up), set once
// as it parks.
func TestSupport_ParkedOrder_HistoryDoesNotGrowWhileItWaits(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{hold: 10 * time.Minute, stepRetryWindow: 2 * time.Second})
	sh, id, wf := s.parkedOrder(60005)

	attempt := func() int32 {
		d, err := s.temporal.DescribeWorkflow(s.ctx, wf, "")
		require.NoError(t, err)
		for _, a := range d.RawResponse.PendingActivities {
			if a.ActivityType.GetName() == "CaptureFinish" {
				return a.Attempt
			}
		}
		return 0
	}
	require.Eventually(t, func() bool { return attempt() >= 2 }, 30*time.Second, 100*time.Millisecond)
	before := len(s.history(wf).Events)
	require.Eventually(t, func() bool { return attempt() >= 5 }, 60*time.Second, 200*time.Millisecond)
	assert.Equal(t, before, len(s.history(wf).Events), "three more attempts, not one more event")

	s.providerUp()
	final := s.waitFinal(sh.token, id, time.Minute)
	assert.Equal(t, "CONFIRMED", final.str("status"), "nobody acted: the parked step's own retry went through")
	timers := 0
	for _, e := range s.history(wf).Events {
		if e.EventType == enumspb.EVENT_TYPE_TIMER_STARTED {
			timers++
		}
	}
	assert.Equal(t, 2, timers, "its deadlines, and no other timer of the order's own")
	s.recordHistory("parked-resumed", wf)
}

// TestSupport_ActionsNameTheirPerson: a support action that names nobody (not sent through the
// codec endpoint, which names the signed-in person) is refused as an update and ignored as a
// signal, and nothing changes; a named cancel ends the order CANCELLED_BY_SUPPORT, and the order's
// timeline and staff_actions name the person (who, when, why, from where), which the shopper
// never sees.
func TestSupport_ActionsNameTheirPerson(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{hold: 10 * time.Minute, stepRetryWindow: 2 * time.Second})
	sh, id, wf := s.parkedOrder(61301)

	err := s.supportActionBy(wf, workflows.SupportRequest{Action: workflows.ActionCancel, Reason: "no one"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no actor")
	require.NoError(t, s.temporal.SignalWorkflow(s.ctx, wf, "", workflows.SupportAction,
		workflows.SupportRequest{Action: workflows.ActionCancel, Reason: "no one either"}))
	require.Eventually(t, func() bool {
		v, err := s.temporal.QueryWorkflow(s.ctx, wf, "", workflows.QueryStatus)
		require.NoError(t, err)
		var st workflows.OrderState
		require.NoError(t, v.Get(&st))
		for _, e := range st.Timeline {
			if e.Event == "support action ignored" {
				return true
			}
		}
		return false
	}, 10*time.Second, 100*time.Millisecond, "the signal is noted and ignored")
	assert.Equal(t, "NEEDS_ATTENTION", s.call(http.MethodGet, fmt.Sprintf("/api/v1/orders/%d", id), sh.token, nil, nil).str("status"),
		"nothing changed")
	assert.Zero(t, s.scalar(`SELECT count(*) FROM staff_actions`))

	require.NoError(t, s.supportAction(wf, workflows.ActionCancel, "customer called"))
	s.providerUp()
	final := s.waitFinal(sh.token, id, 30*time.Second)
	assert.Equal(t, "CANCELLED", final.str("status"))
	assert.Equal(t, "CANCELLED_BY_SUPPORT", final.str("failureCode"), "support's cancel, not the shopper's")
	assert.Contains(t, final.raw, `"action":"cancel"`, "the shopper sees that support acted")
	assert.NotContains(t, final.raw, supportStaff.Name, "but not who")

	asSupport := s.call(http.MethodGet, fmt.Sprintf("/api/v1/orders/%d", id), s.support(), nil, nil)
	require.Equal(t, http.StatusOK, asSupport.status, asSupport.raw)
	var entry map[string]any
	for _, e := range asSupport.body["timeline"].([]any) {
		if e := e.(map[string]any); e["kind"] == "support_action" {
			entry = e
		}
	}
	require.NotNil(t, entry, asSupport.raw)
	detail := entry["detail"].(map[string]any)
	assert.Equal(t, "customer called", detail["reason"], "why")
	assert.Equal(t, map[string]any{"sub": "900", "role": "support", "name": "Deniz Destek", "via": "temporal-ui",
		"ip": "127.0.0.1"}, detail["actor"], "who, through what and from where")
	assert.NotEmpty(t, entry["at"], "when")
	require.Len(t, asSupport.body["staffActions"], 1, asSupport.raw)
	assert.Equal(t, int64(1), s.scalar(`SELECT count(*) FROM staff_actions WHERE order_id = $1 AND action = 'cancel'
		AND actor_sub = '900' AND actor_name = 'Deniz Destek' AND actor_via = 'temporal-ui' AND step = 'capture'
		AND workflow_id = $2`, id, wf))
	s.recordHistory("support-without-actor-then-cancel", wf)
}
