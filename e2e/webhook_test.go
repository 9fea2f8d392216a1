package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"

	"github.com/marketplace/checkout/api"
	"github.com/marketplace/checkout/order"
	"github.com/marketplace/checkout/payment"
	"github.com/marketplace/checkout/workflows"
)

// gate holds calls at its door until the test opens it; arrived says one is waiting.
type gate struct {
	arrived chan struct{}
	open    chan struct{}
	once    sync.Once
}

func newGate(t *testing.T) *gate {
	g := &gate{arrived: make(chan struct{}, 1), open: make(chan struct{})}
	t.Cleanup(g.let)
	return g
}

func (g *gate) wait(ctx context.Context) error {
	select {
	case g.arrived <- struct{}{}:
	default:
	}
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gate) let() { g.once.Do(func() { close(g.open) }) }

func (g *gate) reached(t *testing.T, what string) {
	t.Helper()
	select {
	case <-g.arrived:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s never came", what)
	}
}

// heldSignals is the API's Temporal client with its payment signals held at the gate; failNext
// makes the next one fail as if Temporal were unreachable.
type heldSignals struct {
	api.TemporalClient
	gate     *gate
	failNext *atomic.Bool
}

func (c heldSignals) SignalWorkflow(ctx context.Context, workflowID, runID, name string, arg any) error {
	if name == workflows.SignalPaymentResult {
		if c.failNext.CompareAndSwap(true, false) {
			return serviceerror.NewUnavailable("temporal unreachable")
		}
		if err := c.gate.wait(ctx); err != nil {
			return err
		}
	}
	return c.TemporalClient.SignalWorkflow(ctx, workflowID, runID, name, arg)
}

// heldLookups is the provider as the API asks it about a webhook's intent, held at the gate.
type heldLookups struct {
	api.PaymentLookup
	gate *gate
}

func (p heldLookups) Lookup(ctx context.Context, key payment.Ref) (payment.Intent, error) {
	if err := p.gate.wait(ctx); err != nil {
		return payment.Intent{}, err
	}
	return p.PaymentLookup.Lookup(ctx, key)
}

// noTransactionHeld asserts that no session of the stack's database sits in an open transaction
// while the API waits on a call: none has been idle in a transaction for a second.
func (s *stack) noTransactionHeld(while string) {
	s.t.Helper()
	time.Sleep(1500 * time.Millisecond)
	assert.Zero(s.t, s.scalar(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
		AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%' AND state_change < now() - interval '1 second'`),
		"a transaction is held open while %s", while)
}

// redeliver posts a webhook body again, as the provider does, giving up after a few seconds.
func (s *stack) redeliver(body []byte) (reply, error) {
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+"/api/v1/payments/webhook", bytesReader(body))
	require.NoError(s.t, err)
	req.Header.Set(payment.SignatureHeader, payment.Sign([]byte(s.cfg.PaymentWebhookSecret), body, time.Now()))
	resp, err := s.http.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	return reply{status: resp.StatusCode, header: resp.Header}, nil
}

// TestWebhook_NoTransactionOpenWhileItCallsTemporalOrTheProvider: the webhook handler calls
// Temporal (the payment signal) and the provider (an intent routed by its key) with no database
// transaction open, so a slow call holds no connection in a transaction and no lock. While the
// first delivery of an event waits on Temporal, a second delivery of it is answered at once with a
// 503 (the provider delivers it again), neither acknowledged as done nor kept waiting; once the
// first has acted, a replay is a duplicate and changes nothing.
func TestWebhook_NoTransactionOpenWhileItCallsTemporalOrTheProvider(t *testing.T) {
	t.Parallel()
	signals, lookups := newGate(t), newGate(t)
	s := startStack(t, stackOptions{
		apiTemporal: func(c api.TemporalClient) api.TemporalClient {
			return heldSignals{TemporalClient: c, gate: signals, failNext: &atomic.Bool{}}
		},
		apiPayments: func(p api.PaymentLookup) api.PaymentLookup { return heldLookups{PaymentLookup: p, gate: lookups} },
	})

	// A 3-D Secure approval: its webhook's signal to the order waits at Temporal's door.
	sh, r, id, intent := s.awaiting3DS(7041, 78)
	require.Equal(t, http.StatusOK, s.answer3DS(r.str("payment", "redirectUrl"), "approve").status)
	signals.reached(t, "the payment signal")
	s.noTransactionHeld("the API signals the order")
	var body []byte
	require.NoError(t, s.pool.QueryRow(s.ctx, `SELECT payload FROM paysim.webhook_events WHERE intent_id = $1`, intent).Scan(&body))
	dup, err := s.redeliver(body)
	require.NoError(t, err, "a second delivery waits for nothing")
	assert.Equal(t, http.StatusServiceUnavailable, dup.status, "in hand: delivered again later, not acknowledged")
	assert.NotEmpty(t, dup.header.Get("Retry-After"))
	signals.let()
	assert.Equal(t, "CONFIRMED", s.waitFinal(sh.token, id, 30*time.Second).str("status"))
	require.Eventually(t, func() bool {
		return s.scalar(`SELECT count(*) FROM payment_webhook_events WHERE intent_id = $1 AND claimed_until IS NULL`, intent) == 1
	}, 10*time.Second, 50*time.Millisecond, "the first delivery marks the event done once it has acted")
	replay := s.webhook(body, s.cfg.PaymentWebhookSecret)
	require.Equal(t, http.StatusOK, replay.status, replay.raw)
	assert.Equal(t, true, replay.body["duplicate"])
	assert.Equal(t, int64(1), s.scalar(`SELECT count(*) FROM payment_webhook_events WHERE intent_id = $1`, intent))

	// A late authorization of an order that gave up: its event is routed by the order's key, so
	// the API asks the provider first; the question waits at the provider's door.
	sku := s.proofSKU("WEBHOOK-LATE", 0)
	late := s.shopper(7042)
	late.fill(map[int64]int32{sku: 1})
	refused := late.order("k-"+randomHex(8), late.preview(), "tok_3ds")
	require.Equal(t, http.StatusConflict, refused.status, refused.raw)
	lateID := refused.int("orderId")
	require.Equal(t, "FAILED", s.waitFinal(late.token, lateID, 10*time.Second).str("status"))
	li, err := s.sim.Authorize(s.ctx, payment.AuthorizeRequest{Ref: payment.Ref{Key: order.PaymentKey(lateID), OrderID: lateID},
		AmountMinor: 100_00, Currency: "TRY", PaymentMethodToken: "tok_3ds"})
	require.NoError(t, err)
	_, err = s.sim.Approve(s.ctx, li.ID)
	require.NoError(t, err)
	lookups.reached(t, "the provider lookup")
	s.noTransactionHeld("the API asks the provider")
	lookups.let()
	require.Eventually(t, func() bool {
		i, err := s.sim.Lookup(s.ctx, payment.Ref{Key: order.PaymentKey(lateID), OrderID: lateID})
		return err == nil && i.Status == payment.StatusVoided
	}, 60*time.Second, 100*time.Millisecond, "the late authorization is voided")
	assert.Equal(t, int64(1), s.scalar(`SELECT count(*) FROM payment_webhook_events WHERE intent_id = $1`, li.ID))
}

// TestWebhook_OrderNotReached_NotAckedAndDeliveredAgain: the signal of a 3-D Secure approval
// fails (Temporal unreachable for a moment). The event is not acted on, so it is not recorded as
// done: the webhook fails, the provider delivers it again, and that delivery confirms the order.
func TestWebhook_OrderNotReached_NotAckedAndDeliveredAgain(t *testing.T) {
	t.Parallel()
	failNext := &atomic.Bool{}
	open := newGate(t)
	open.let()
	s := startStack(t, stackOptions{apiTemporal: func(c api.TemporalClient) api.TemporalClient {
		return heldSignals{TemporalClient: c, gate: open, failNext: failNext}
	}})
	sh, r, id, intent := s.awaiting3DS(7043, 78)
	failNext.Store(true)
	require.Equal(t, http.StatusOK, s.answer3DS(r.str("payment", "redirectUrl"), "approve").status)
	assert.Equal(t, "CONFIRMED", s.waitFinal(sh.token, id, 30*time.Second).str("status"))
	assert.False(t, failNext.Load(), "the first delivery failed")
	// The provider records a delivery once the API has answered it, after the order moved on.
	require.Eventually(t, func() bool {
		return s.scalar(`SELECT count(*) FROM paysim.webhook_events WHERE intent_id = $1 AND delivered_at IS NOT NULL`, intent) == 1
	}, 10*time.Second, 50*time.Millisecond, "the provider's delivery is answered")
	assert.GreaterOrEqual(t, s.scalar(`SELECT attempts FROM paysim.webhook_events WHERE intent_id = $1`, intent), int64(2),
		"delivered again after the failure")
	assert.Equal(t, int64(1), s.scalar(`SELECT count(*) FROM payment_webhook_events WHERE intent_id = $1`, intent))
}

// TestWebhook_OutOfOrderAndRepeated_TheProvidersStateDecides: a provider delivers events more than
// once and in any order. After the shopper approved 3-D Secure and the order was confirmed, a
// stale "declined" event about the same intent (signed, a new event id: as a late delivery of an
// older attempt) and the approval's event again are both acknowledged and change nothing: the
// order asks the provider, whose intent is captured.
func TestWebhook_OutOfOrderAndRepeated_TheProvidersStateDecides(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	sh, r, id, intent := s.awaiting3DS(7031, 79)
	require.Equal(t, http.StatusOK, s.answer3DS(r.str("payment", "redirectUrl"), "approve").status)
	require.Equal(t, "CONFIRMED", s.waitFinal(sh.token, id, 30*time.Second).str("status"))

	in, err := s.sim.Lookup(s.ctx, payment.Ref{Key: order.PaymentKey(id), OrderID: id, IntentID: intent})
	require.NoError(t, err)
	stale := in
	stale.Status, stale.DeclineCode = payment.StatusDeclined, "authentication_failed"
	for _, ev := range []payment.WebhookEvent{
		{ID: "evt_stale_" + randomHex(4), Type: payment.EventDeclined, Created: time.Now().Add(-time.Minute), Intent: stale},
		{ID: "evt_again_" + randomHex(4), Type: payment.EventAuthorized, Created: time.Now(), Intent: in},
	} {
		body, err := json.Marshal(ev)
		require.NoError(t, err)
		for range 2 {
			got := s.webhook(body, s.cfg.PaymentWebhookSecret)
			assert.Equal(t, http.StatusOK, got.status, got.raw)
		}
	}
	time.Sleep(time.Second) // the order's workflow has closed: nothing may reach it, nor reverse anything
	o := s.call(http.MethodGet, fmt.Sprintf("/api/v1/orders/%d", id), sh.token, nil, nil)
	assert.Equal(t, "CONFIRMED", o.str("status"))
	assert.Equal(t, "CAPTURED", o.str("payment", "status"))
	assert.Equal(t, int64(1), s.scalar(`SELECT count(*) FROM paysim.intents WHERE order_id = $1 AND status = 'CAPTURED'`, id))
	s.auditClean()
}
