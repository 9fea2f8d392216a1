package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/marketplace/checkout/payment"
)

// lateAuthorization is the worker's provider for one order whose first authorization times out
// unseen (the provider never got it) while the provider cannot be asked; the second, which the
// order's settling of the unknown outcome sends, waits at the provider until the test lets it
// through, and then authorizes whatever became of its caller meanwhile.
type lateAuthorization struct {
	payment.Gateway
	lookupDown atomic.Bool
	mu         sync.Mutex
	authorizes int
	waiting    chan struct{}
	release    chan struct{}
}

func (g *lateAuthorization) Authorize(ctx context.Context, req payment.AuthorizeRequest) (payment.Intent, error) {
	g.mu.Lock()
	g.authorizes++
	n := g.authorizes
	g.mu.Unlock()
	switch n {
	case 1:
		return payment.Intent{}, fmt.Errorf("authorizing %q: %w", req.Key, payment.ErrTimeout)
	case 2:
		close(g.waiting)
		<-g.release
	}
	return g.Gateway.Authorize(context.WithoutCancel(ctx), req)
}

func (g *lateAuthorization) Lookup(ctx context.Context, ref payment.Ref) (payment.Intent, error) {
	if g.lookupDown.Load() {
		return payment.Intent{}, payment.ErrUnavailable
	}
	return g.Gateway.Lookup(ctx, ref)
}

// TestOrder_CancelWhileTheUnknownPaymentIsSettled_TheLateAuthorizationIsReversed: an order whose
// authorization's outcome is unknown asks the provider again with the server's retries, and
// authorizes again under its key when the provider never saw it. The shopper cancels while that
// second authorization is at the provider. The order stops the settling and waits for it to end
// before it reverses the payment, so the authorization it made is voided by the order itself, not
// left behind a reversal that found nothing.
func TestOrder_CancelWhileTheUnknownPaymentIsSettled_TheLateAuthorizationIsReversed(t *testing.T) {
	t.Parallel()
	g := &lateAuthorization{waiting: make(chan struct{}), release: make(chan struct{})}
	s := startStack(t, stackOptions{hold: 5 * time.Minute, gateway: func(inner payment.Gateway) payment.Gateway {
		g.Gateway = inner
		return g
	}})
	sh := s.shopper(61001)
	sh.fill(map[int64]int32{75: 1})
	key := "k-" + randomHex(8)
	g.lookupDown.Store(true)
	r := sh.order(key, sh.preview(), "tok_ok")
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	require.Equal(t, "UNKNOWN", r.str("payment", "status"), r.raw)
	id := r.int("orderId")
	g.lookupDown.Store(false)
	select {
	case <-g.waiting:
	case <-time.After(30 * time.Second):
		t.Fatal("the order never settled its unknown payment")
	}

	cancelled := make(chan reply, 1)
	go func() {
		cancelled <- s.call(http.MethodPost, fmt.Sprintf("/api/v1/orders/%d/cancel", id), sh.token, nil, nil)
	}()
	wf := sh.workflowOf(key)
	require.Eventually(t, func() bool {
		d, err := s.temporal.DescribeWorkflow(s.ctx, wf, "")
		require.NoError(t, err)
		if d.RawResponse.WorkflowExecutionInfo.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			return true
		}
		for _, a := range d.RawResponse.PendingActivities {
			if a.ActivityType.GetName() == "SettleUnknown" && a.State == enumspb.PENDING_ACTIVITY_STATE_CANCEL_REQUESTED {
				return true
			}
		}
		return false
	}, 5*time.Second, 20*time.Millisecond, "the cancel reached the settling")
	close(g.release) // the provider authorizes now, after the cancel

	c := <-cancelled
	require.Equal(t, http.StatusOK, c.status, c.raw)
	assert.Equal(t, "CANCELLED", s.waitFinal(sh.token, id, 30*time.Second).str("status"))
	require.Eventually(t, func() bool {
		return s.scalarText(`SELECT status FROM paysim.intents WHERE order_id = $1`, id) == "VOIDED"
	}, 15*time.Second, 100*time.Millisecond, "the authorization made after the cancel is voided, not kept")
	assert.Zero(t, s.scalar(`SELECT COALESCE(sum(reserved), 0) FROM inventory`), "stock back")
	s.recordHistory("payment-unknown-cancelled", wf)
}

// TestOrder_TryAgainAnswer_TheSameRequestIsPlacedOnceTheDatabaseIsBack: the order row cannot be
// written (the database refuses it for a while), so the request is answered 503 UNAVAILABLE, try
// again, with nothing recorded under the key. The same request with the same key, once the
// database is back, is placed: the answer of the closed run, which the server keeps under the
// request's update id, does not stick to the key.
func TestOrder_TryAgainAnswer_TheSameRequestIsPlacedOnceTheDatabaseIsBack(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	sh := s.shopper(61101)
	sh.fill(map[int64]int32{76: 1})
	pv := sh.preview()
	_, err := s.pool.Exec(s.ctx, `
		CREATE FUNCTION e2e_refuse_orders() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'e2e: order rows cannot be written now'; END $$;
		CREATE TRIGGER e2e_refuse_orders BEFORE INSERT ON orders FOR EACH ROW EXECUTE FUNCTION e2e_refuse_orders();`)
	require.NoError(t, err)
	key := "k-" + randomHex(8)
	r := sh.order(key, pv, "tok_ok")
	require.Equal(t, http.StatusServiceUnavailable, r.status, r.raw)
	assert.Equal(t, "UNAVAILABLE", r.str("code"))
	assert.Zero(t, s.scalar(`SELECT count(*) FROM idempotency_records`), "a try-again answer is never recorded")

	_, err = s.pool.Exec(s.ctx, `DROP TRIGGER e2e_refuse_orders ON orders; DROP FUNCTION e2e_refuse_orders();`)
	require.NoError(t, err)
	r = sh.order(key, pv, "tok_ok")
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	assert.Equal(t, int64(1), s.scalar(`SELECT count(*) FROM orders WHERE user_id = $1`, sh.id))
	assert.Equal(t, "CONFIRMED", s.waitFinal(sh.token, r.int("orderId"), 30*time.Second).str("status"))
	again := sh.order(key, pv, "tok_ok")
	assert.Equal(t, http.StatusCreated, again.status, again.raw)
	assert.Equal(t, r.int("orderId"), again.int("orderId"), "the key names that order from now on")
	s.recordHistory("try-again-placed", sh.workflowOf(key))
}

// TestSupport_ParkedOrderNobodyActsOn_EscalatedThenGivenUp: a parked order nobody acts on is
// escalated after the worker's PARKED_ESCALATE_AFTER and given up after its PARKED_GIVE_UP_AFTER:
// the order's row ends FAILED ATTENTION_EXPIRED at once, its confirmed units go back, and its
// authorization is voided as soon as the provider can move money again (meanwhile the ended order
// carries the reversal that waits, and counts as waiting for support).
func TestSupport_ParkedOrderNobodyActsOn_EscalatedThenGivenUp(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{hold: 10 * time.Minute, stepRetryWindow: 2 * time.Second,
		workerEnv: map[string]string{"PARKED_ESCALATE_AFTER": "2s", "PARKED_GIVE_UP_AFTER": "5s"}})
	sh, id, wf := s.parkedOrder(61201)

	final := s.waitFinal(sh.token, id, time.Minute)
	assert.Equal(t, "FAILED", final.str("status"))
	assert.Equal(t, "ATTENTION_EXPIRED", final.str("failureCode"))
	asSupport := s.call(http.MethodGet, fmt.Sprintf("/api/v1/orders/%d", id), s.support(), nil, nil)
	assert.Contains(t, asSupport.raw, `"kind":"escalated"`, "escalated before it was given up")
	require.Eventually(t, func() bool {
		return s.scalar(`SELECT count(*) FROM orders WHERE id = $1 AND attention IS NOT NULL`, id) == 1
	}, 30*time.Second, 100*time.Millisecond, "the reversal waits for the provider, on the ended order")
	assert.Equal(t, 1.0, s.metric("checkout_orders_waiting", "status", "NEEDS_ATTENTION"))
	assert.Equal(t, "AUTHORIZED", s.scalarText(`SELECT status FROM paysim.intents WHERE order_id = $1`, id))

	s.providerUp()
	require.Eventually(t, func() bool {
		return s.scalarText(`SELECT status FROM paysim.intents WHERE order_id = $1`, id) == "VOIDED"
	}, time.Minute, 200*time.Millisecond, "the authorization is voided, not left to expire")
	require.NoError(t, s.temporal.GetWorkflow(s.ctx, wf, "").Get(s.ctx, nil))
	assert.Zero(t, s.scalar(`SELECT count(*) FROM orders WHERE id = $1 AND attention IS NOT NULL`, id))
	assert.Zero(t, s.scalar(`SELECT COALESCE(sum(reserved), 0) FROM inventory`), "stock back")
	assert.Equal(t, int64(150), s.scalar(`SELECT sum(on_hand) FROM inventory WHERE sku_id = 88`), "the confirmed units back on the shelf")
	s.recordHistory("parked-given-up", wf)
}
