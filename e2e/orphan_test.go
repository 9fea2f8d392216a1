package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/audit"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/order"
	"github.com/marketplace/checkout/payment"
	"github.com/marketplace/checkout/payment/paysim"
	"github.com/marketplace/checkout/workflows"
)

// heldAuthorize is the worker's provider with authorizations held at its door until the test
// lets them through: an order's workflow waits there, in its first task, before it has a hold
// child.
type heldAuthorize struct {
	payment.Gateway
	arrived chan struct{}
	open    chan struct{}
}

func (g heldAuthorize) Authorize(ctx context.Context, r payment.AuthorizeRequest) (payment.Intent, error) {
	select {
	case g.arrived <- struct{}{}:
	default:
	}
	select {
	case <-g.open:
	case <-ctx.Done():
		return payment.Intent{}, ctx.Err()
	}
	return g.Gateway.Authorize(ctx, r)
}

// TestPaymentReconciler_OrderTerminatedBeforeItsHold_EndedAndEverythingGivenBack: support
// terminates an order's workflow while it authorizes, so its hold child is never started and
// nothing in Temporal will give back what the order holds; the shopper then approves the payment
// and its webhook is lost. Once the order is past its hold, the payment reconciler's scheduled
// run, on the real server, finds its workflow gone: the order fails ORPHANED, its stock is back
// and its authorization voided, and the auditor (Temporal asked too) finds nothing wrong.
func TestPaymentReconciler_OrderTerminatedBeforeItsHold_EndedAndEverythingGivenBack(t *testing.T) {
	t.Parallel()
	gate := heldAuthorize{arrived: make(chan struct{}, 1), open: make(chan struct{})}
	var opened sync.Once
	let := func() { opened.Do(func() { close(gate.open) }) }
	t.Cleanup(let)
	s := startStack(t, stackOptions{hold: 10 * time.Minute, gateway: func(g payment.Gateway) payment.Gateway {
		gate.Gateway = g
		return gate
	}})
	cfg := s.ensureSchedules()
	sh := s.shopper(8401)
	sh.fill(map[int64]int32{76: 2})
	reservedBefore := s.scalar(`SELECT sum(reserved) FROM inventory WHERE sku_id = 76`)
	key := "k-" + randomHex(8)
	pv := sh.preview()
	// The shopper's request, which the shopper gives up on below: a request still waiting would
	// start the order's workflow again after the terminate (the same key attaches to its order).
	reqCtx, giveUp := context.WithCancel(s.ctx)
	defer giveUp()
	body, err := json.Marshal(map[string]any{"priceVersion": pv, "addressId": sh.address, "paymentMethodToken": "tok_3ds"})
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(reqCtx, http.MethodPost, s.base+"/api/v1/orders", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+sh.token)
	req.Header.Set("Idempotency-Key", key)
	answered := make(chan error, 1)
	go func() {
		resp, err := s.http.Do(req)
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("answered %d", resp.StatusCode)
		}
		answered <- err
	}()

	select {
	case <-gate.arrived:
	case <-time.After(60 * time.Second):
		t.Fatal("the order never reached its authorization")
	}
	require.Equal(t, float64(1), s.metric("checkout_orders_in_flight"))
	giveUp()
	assert.ErrorIs(t, <-answered, context.Canceled)
	require.Eventually(t, func() bool { return s.metric("checkout_orders_in_flight") == 0 }, 30*time.Second,
		50*time.Millisecond, "the API stopped waiting for the order")

	id := s.scalar(`SELECT id FROM orders WHERE user_id = $1`, sh.id)
	require.Equal(t, reservedBefore+2, s.scalar(`SELECT sum(reserved) FROM inventory WHERE sku_id = 76`), "the order holds its stock")
	_, err = s.temporal.DescribeWorkflow(s.ctx, workflows.HoldWorkflowID(id), "")
	var nf *serviceerror.NotFound
	require.ErrorAs(t, err, &nf, "no hold child yet")
	require.NoError(t, s.temporal.TerminateWorkflow(s.ctx, sh.workflowOf(key), "", "support: terminated while authorizing"))
	let()
	// The workflow task under way goes on in the worker (its steps are local): the authorization,
	// the answer, the wait. What it asks of the server then, the hold child first, is refused.
	require.Eventually(t, func() bool {
		return s.scalar(`SELECT count(*) FROM payments WHERE order_id = $1 AND status = 'REQUIRES_ACTION'`, id) == 1
	}, 30*time.Second, 100*time.Millisecond, "the provider asked for 3-D Secure")
	// The shopper approves; the provider's webhook is lost.
	_, err = s.pool.Exec(s.ctx, `UPDATE paysim.intents SET status = 'AUTHORIZED' WHERE idempotency_key = $1`,
		order.PaymentKey(id))
	require.NoError(t, err)
	d, err := s.temporal.DescribeWorkflow(s.ctx, sh.workflowOf(key), "")
	require.NoError(t, err)
	require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, d.RawResponse.WorkflowExecutionInfo.Status, "no run goes on with the order")
	// Its hold, ten minutes, is over (moved back here rather than waited for) by more than the
	// reconciler's two minutes.
	_, err = s.pool.Exec(s.ctx, `UPDATE orders SET hold_expires_at = now() - interval '3 minutes' WHERE id = $1`, id)
	require.NoError(t, err)
	_, err = s.pool.Exec(s.ctx, `UPDATE stock_reservations SET expires_at = now() - interval '3 minutes' WHERE order_id = $1`, id)
	require.NoError(t, err)

	var res activities.ReconcilePaymentsResult
	s.runSchedule(cfg.ScheduleIDPrefix+workflows.SchedulePaymentReconciler, &res)

	assert.Equal(t, 1, res.Orphaned, "%+v", res)
	final := s.waitFinal(sh.token, id, 10*time.Second)
	assert.Equal(t, "FAILED", final.str("status"), final.raw)
	assert.Equal(t, string(problem.Orphaned), final.str("failureCode"))
	assert.Equal(t, "VOIDED", final.str("payment", "status"), "the authorization is given back")
	assert.Equal(t, int64(1), s.scalar(`SELECT count(*) FROM paysim.intents WHERE idempotency_key = $1 AND status = 'VOIDED'`,
		order.PaymentKey(id)), "at the provider too")
	assert.Equal(t, reservedBefore, s.scalar(`SELECT sum(reserved) FROM inventory WHERE sku_id = 76`), "the stock is back")
	assert.Zero(t, s.scalar(`SELECT count(*) FROM stock_reservations WHERE order_id = $1 AND status <> 'RELEASED'`, id))
	_, err = s.temporal.DescribeWorkflow(s.ctx, workflows.HoldWorkflowID(id), "")
	require.ErrorAs(t, err, &nf, "no hold child was ever started")
	rep, err := audit.Run(s.ctx, s.pool, audit.Options{HoldTTL: s.cfg.HoldTTL, Slack: 10 * time.Second,
		Visibility: s.temporal, TaskQueue: s.cfg.TaskQueue, Provider: paysim.NewRecords(s.pool)})
	require.NoError(t, err)
	assert.Empty(t, rep.Violations)
}

// TestAudit_WorkflowOpenPastItsHold_Reported: an order waits for its 3-D Secure answer with its
// workflow and its hold child open in Temporal. Once its hold is over (moved back in the order row
// here; the workflows still count on ten minutes), the auditor asked with Temporal's visibility
// names both open workflows against the order; without it, it sees only the order row.
func TestAudit_WorkflowOpenPastItsHold_Reported(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{hold: 10 * time.Minute})
	sh, key, id := s.waitingOrder(8402, 77)
	_, err := s.pool.Exec(s.ctx, `UPDATE orders SET hold_expires_at = now() - interval '10 minutes' WHERE id = $1`, id)
	require.NoError(t, err)

	opts := audit.Options{HoldTTL: s.cfg.HoldTTL, Slack: time.Minute, Provider: paysim.NewRecords(s.pool)}
	detail := func(rep audit.Report) string {
		for _, v := range rep.Violations {
			if v.Invariant == audit.NoOpenOrderPastHold && v.Subject == fmt.Sprintf("order %d", id) {
				return v.Detail
			}
		}
		return ""
	}
	withoutTemporal, err := audit.Run(s.ctx, s.pool, opts)
	require.NoError(t, err)
	assert.NotContains(t, detail(withoutTemporal), "workflow", "the order row alone says nothing of its workflows")

	opts.Visibility, opts.TaskQueue = s.temporal, s.cfg.TaskQueue
	var rep audit.Report
	require.Eventually(t, func() bool {
		rep, err = audit.Run(s.ctx, s.pool, opts)
		return err == nil && rep.OpenWorkflows == 2
	}, 30*time.Second, 200*time.Millisecond, "Temporal lists the order's two open workflows")
	got := detail(rep)
	assert.Contains(t, got, fmt.Sprintf("workflow %s open", sh.workflowOf(key)), rep.Violations)
	assert.Contains(t, got, fmt.Sprintf("hold child %s still open", workflows.HoldWorkflowID(id)), rep.Violations)
	assert.Equal(t, 1, countViolations(rep, audit.NoOpenOrderPastHold), "one subject: the order")
}

func countViolations(rep audit.Report, invariant string) int {
	for _, c := range rep.Checks {
		if c.Invariant == invariant {
			return c.Violations
		}
	}
	return -1
}

// waitingOrder places an order of one unit of sku for shopper user, paid by 3-D Secure, and
// returns once the order waits for the payment with its hold child running.
func (s *stack) waitingOrder(user, sku int64) (*shopper, string, int64) {
	s.t.Helper()
	sh := s.shopper(user)
	sh.fill(map[int64]int32{sku: 1})
	key := "k-" + randomHex(8)
	r := sh.order(key, sh.preview(), "tok_3ds")
	require.Equal(s.t, http.StatusCreated, r.status, r.raw)
	id := r.int("orderId")
	require.Eventually(s.t, func() bool {
		d, err := s.temporal.DescribeWorkflow(s.ctx, workflows.HoldWorkflowID(id), "")
		return err == nil && d.RawResponse.WorkflowExecutionInfo.Status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	}, 30*time.Second, 50*time.Millisecond, "the hold child runs")
	return sh, key, id
}
