package e2e_test

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/order"
	"github.com/marketplace/checkout/payment"
	"github.com/marketplace/checkout/workflows"
)

// TestPaymentReconciler_LateAuthorizationOfAFailedOrderStillPending_Voided: an order gave up
// before its payment was ever answered (refused out of stock, so its payment row still says
// PENDING and its compensation found nothing at the provider), and the provider authorizes its key
// afterwards — a call that arrived late — without a webhook (a card authorized at once sends
// none). The payment reconciler's scheduled run finds the money held and voids it; a second run
// has nothing left to do.
func TestPaymentReconciler_LateAuthorizationOfAFailedOrderStillPending_Voided(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	cfg := s.ensureSchedules()
	sku := s.proofSKU("LATE-PENDING", 0)
	sh := s.shopper(7031)
	sh.fill(map[int64]int32{sku: 1})
	r := sh.order("k-"+randomHex(8), sh.preview(), "tok_ok")
	require.Equal(t, http.StatusConflict, r.status, r.raw)
	id := r.int("orderId")
	require.NotZero(t, id)
	require.Equal(t, "FAILED", s.waitFinal(sh.token, id, 10*time.Second).str("status"))
	require.Equal(t, "PENDING", s.scalarText(`SELECT status FROM payments WHERE order_id = $1`, id))

	_, err := s.sim.Authorize(s.ctx, payment.AuthorizeRequest{Ref: payment.Ref{Key: order.PaymentKey(id), OrderID: id},
		AmountMinor: 100_00, Currency: "TRY", PaymentMethodToken: "tok_ok"})
	require.NoError(t, err)

	var res activities.ReconcilePaymentsResult
	s.runSchedule(cfg.ScheduleIDPrefix+workflows.SchedulePaymentReconciler, &res)

	assert.Equal(t, "VOIDED", s.scalarText(`SELECT status FROM paysim.intents WHERE idempotency_key = $1`,
		order.PaymentKey(id)), "no money held for a failed order: %+v", res)
	assert.Equal(t, "VOIDED", s.scalarText(`SELECT status FROM payments WHERE order_id = $1`, id))
	assert.Equal(t, 1, res.Reversed, "%+v", res)
	assert.Equal(t, "FAILED", s.waitFinal(sh.token, id, time.Second).str("status"), "the order stays failed")

	var again activities.ReconcilePaymentsResult
	s.runSchedule(cfg.ScheduleIDPrefix+workflows.SchedulePaymentReconciler, &again)
	assert.Zero(t, again.Checked, "reversed: off the list")
	s.auditClean()
}

// TestPaymentReconciler_LineCancelWhoseWorkflowIsGone_Finished: support cancels the two units of
// a line the seller cannot ship, one request at a time: the first under a workflow id support typed
// itself, the second under the id its request derives, recorded as a release before this one
// recorded it (no workflow named on the record). The provider refuses the refunds, so both wait for
// support, and both workflows are then terminated by mistake: nothing in Temporal will pay those
// refunds any more. While the workflows waited, the payment reconciler left the cancellations to
// them; once they are gone, a run while the provider still refuses leaves them waiting for support,
// and the run after the provider is fixed refunds each unit under its cancellation's own key, puts
// it back on the shelf and tells the shopper and the seller. Its next run, and support starting a
// request again, move no more money.
func TestPaymentReconciler_LineCancelWhoseWorkflowIsGone_Finished(t *testing.T) {
	t.Parallel()
	refuse := &atomic.Bool{}
	refuse.Store(true)
	s := startStack(t, stackOptions{gateway: func(g payment.Gateway) payment.Gateway {
		return refusingRefunds{Gateway: g, refuse: refuse}
	}})
	cfg := s.ensureSchedules()
	reconcile := func() activities.ReconcilePaymentsResult {
		var res activities.ReconcilePaymentsResult
		s.runSchedule(cfg.ScheduleIDPrefix+workflows.SchedulePaymentReconciler, &res)
		return res
	}
	_, id := s.confirmedOrder(9107, map[int64]int32{73: 2})
	stock := s.onHand(73, 1)
	input := func(request string) string {
		return fmt.Sprintf(`{"orderId": %d, "skuId": 73, "units": 1, "reason": "seller_cannot_ship", "requestId": %q}`, id, request)
	}
	typed, derived := "support-typed-"+randomHex(4), workflows.LineCancelWorkflowID(id, "ui-gone-2")
	for i, wf := range []string{typed, derived} {
		s.startFromUI(wf, input(fmt.Sprintf("ui-gone-%d", i+1)))
		require.Eventually(t, func() bool {
			return s.scalar(`SELECT count(*) FROM line_cancellations WHERE order_id = $1 AND attention IS NOT NULL`, id) == int64(i+1)
		}, 30*time.Second, 100*time.Millisecond, "the refused refund waits for support")
	}
	assert.Equal(t, typed, s.scalarText(`SELECT workflow_id FROM line_cancellations WHERE request_id = 'ui-gone-1'`),
		"the record names the workflow that took the request up")
	_, err := s.pool.Exec(s.ctx, `UPDATE line_cancellations SET workflow_id = NULL WHERE request_id = 'ui-gone-2'`)
	require.NoError(t, err)
	// Recorded long enough ago for the reconciler to look at them.
	_, err = s.pool.Exec(s.ctx, `UPDATE line_cancellations SET created_at = now() - interval '10 minutes' WHERE order_id = $1`, id)
	require.NoError(t, err)
	require.Equal(t, int64(2*899_90), s.scalar(`SELECT sum(amount_minor) FROM line_cancellations WHERE order_id = $1`, id))

	// Their workflows run (waiting for support): the cancellations are their business.
	refuse.Store(false)
	waiting := reconcile()
	assert.Zero(t, s.scalar(`SELECT refunded_minor FROM paysim.intents WHERE order_id = $1`, id), "%+v", waiting)
	assert.Zero(t, waiting.LineCancelsFinished)

	s.terminate(typed, "support: terminated by mistake")
	s.terminate(derived, "support: terminated by mistake")
	refuse.Store(true)
	refused := reconcile()
	assert.Equal(t, 2, refused.LineCancelsFailed, "%+v", refused)
	assert.Zero(t, s.scalar(`SELECT refunded_minor FROM paysim.intents WHERE order_id = $1`, id))
	o := s.call(http.MethodGet, fmt.Sprintf("/api/v1/orders/%d", id), s.support(), nil, nil)
	require.Equal(t, http.StatusOK, o.status, o.raw)
	for _, c := range o.body["cancellations"].([]any) {
		assert.Equal(t, "NEEDS_ATTENTION", c.(map[string]any)["status"], "still waiting for the provider to be fixed")
	}

	refuse.Store(false)
	finished := reconcile()
	assert.Equal(t, 2, finished.LineCancelsFinished, "%+v", finished)
	assert.Zero(t, finished.LineCancelsFailed)
	assert.Equal(t, float64(2), s.metric("checkout_payment_reconciler_line_cancels_total", "result", "finished"))
	assert.Equal(t, float64(2), s.metric("checkout_payment_reconciler_line_cancels_total", "result", "failed"))

	assert.Equal(t, int64(2*899_90), s.scalar(`SELECT refunded_minor FROM paysim.intents WHERE order_id = $1`, id), "%+v", finished)
	assert.Equal(t, int64(2*899_90), s.scalar(`SELECT refunded_minor FROM payments WHERE order_id = $1`, id))
	assert.Equal(t, stock+2, s.onHand(73, 1), "the units never left the seller's shelf: sellable again")
	assert.Equal(t, int64(2), s.scalar(`SELECT count(*) FROM outbox_events WHERE event_type = $1 AND (payload->>'orderId')::bigint = $2`,
		activities.EventOrderLineCancelled, id), "the shopper and the seller are told")
	assert.Equal(t, int64(2), s.scalar(`SELECT count(*) FROM line_cancellations WHERE order_id = $1 AND refunded_at IS NOT NULL
		AND restocked_at IS NOT NULL AND announced_at IS NOT NULL AND attention IS NULL`, id))

	again := reconcile()
	assert.Zero(t, again.LineCancelsFinished, "finished: off the list")
	assert.Equal(t, int64(2), s.scalar(`SELECT count(*) FROM paysim.refunds`), "each refunded once: %+v", again)
	// Support starts the first request again, under the id it derives: it finds it done.
	var st workflows.LineCancelState
	require.NoError(t, s.startFromUI(workflows.LineCancelWorkflowID(id, "ui-gone-1"), input("ui-gone-1")).Get(s.ctx, &st))
	assert.Equal(t, workflows.LineCancelDone, st.Status)
	assert.Equal(t, int64(2), s.scalar(`SELECT count(*) FROM paysim.refunds`))
	assert.Equal(t, int64(2*899_90), s.scalar(`SELECT refunded_minor FROM paysim.intents WHERE order_id = $1`, id))
	assert.Equal(t, stock+2, s.onHand(73, 1))
	s.auditClean()
}
