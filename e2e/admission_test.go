package e2e_test

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"

	"github.com/marketplace/checkout/payment/paysim"
)

// waitMetric polls the stack's metric until ok says so (the state it waits for, not a time).
func (s *stack) waitMetric(name string, ok func(float64) bool, labels ...string) {
	s.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for v := s.metric(name, labels...); !ok(v); v = s.metric(name, labels...) {
		require.True(s.t, time.Now().Before(deadline), "%s stayed at %v", name, v)
		time.Sleep(20 * time.Millisecond)
	}
}

// assertNothingRecorded checks that a refused request left no trace under its key: no answer
// recorded, no card token kept, no order row, no workflow started.
func (s *stack) assertNothingRecorded(sh *shopper, key string) {
	s.t.Helper()
	assert.Zero(s.t, s.scalar(`SELECT count(*) FROM idempotency_records WHERE user_id = $1 AND idempotency_key = $2`, sh.id, key),
		"no answer recorded under the key")
	assert.Zero(s.t, s.scalar(`SELECT count(*) FROM payment_method_tokens WHERE user_id = $1 AND idempotency_key = $2`, sh.id, key),
		"no card token kept")
	assert.Zero(s.t, s.scalar(`SELECT count(*) FROM orders WHERE user_id = $1`, sh.id), "no order row")
	_, err := s.temporal.DescribeWorkflow(s.ctx, sh.workflowOf(key), "")
	var nf *serviceerror.NotFound
	assert.True(s.t, errors.As(err, &nf), "no workflow started: %v", err)
}

// TestOrder_Busy_InFlightBoundRefusesAtOnce_NothingRecorded_SameKeyPlacedLater: with
// ORDERS_MAX_IN_FLIGHT=2 and no worker yet, two orders are held in flight (Temporal has nobody to
// run them); a third is answered 503 BUSY with Retry-After, and nothing is reserved, recorded or
// started for it. Once a worker runs, the two held orders are placed and the refused request,
// sent again with the same key, is placed too.
func TestOrder_Busy_InFlightBoundRefusesAtOnce_NothingRecorded_SameKeyPlacedLater(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{noWorker: true, env: map[string]string{"ORDERS_MAX_IN_FLIGHT": "2",
		"ORDERS_ADMIT_MAX_LATENCY": "0"}})
	sku := s.proofSKU("BUSY1", 50)
	held := []*shopper{s.shopper(7601), s.shopper(7602)}
	refused := s.shopper(7603)
	for _, sh := range append([]*shopper{refused}, held...) {
		sh.fill(map[int64]int32{sku: 1})
	}
	pvs := []string{held[0].preview(), held[1].preview()}
	refusedPV := refused.preview()

	answers := make([]reply, len(held))
	var wg sync.WaitGroup
	for i, sh := range held {
		wg.Go(func() { answers[i] = sh.order(fmt.Sprintf("held-%d", i), pvs[i], "tok_ok") })
	}
	s.waitMetric("checkout_orders_in_flight", func(v float64) bool { return v == 2 })

	key := "refused-" + randomHex(4)
	r := refused.order(key, refusedPV, "tok_ok")
	require.Equal(t, http.StatusServiceUnavailable, r.status, r.raw)
	assert.Equal(t, "BUSY", r.str("code"))
	assert.NotEmpty(t, r.str("message"))
	assertRetryAfter(t, r, 1, 1)
	s.assertNothingRecorded(refused, key)
	assert.Zero(t, s.scalar(`SELECT COALESCE(sum(reserved), 0) FROM inventory WHERE sku_id = $1`, sku),
		"nothing reserved: the held orders wait for a worker, the refused one never started")
	assert.Equal(t, float64(1), s.metric("checkout_orders_busy_total", "reason", "in_flight"))
	assert.Equal(t, float64(2), s.metric("checkout_orders_in_flight"), "a refusal holds no place")

	s.startWorker()
	wg.Wait()
	for i, a := range answers {
		require.Equal(t, http.StatusCreated, a.status, "held order %d: %s", i, a.raw)
	}
	s.waitMetric("checkout_orders_in_flight", func(v float64) bool { return v == 0 })

	again := refused.order(key, refusedPV, "tok_ok")
	require.Equal(t, http.StatusCreated, again.status, "the same key, once there is room: %s", again.raw)
	assert.Empty(t, again.header.Get("Idempotent-Replayed"), "placed afresh, not a replay of the refusal")
	for _, p := range []struct {
		sh    *shopper
		order int64
	}{{held[0], answers[0].int("orderId")}, {held[1], answers[1].int("orderId")}, {refused, again.int("orderId")}} {
		s.waitFinal(p.sh.token, p.order, time.Minute)
	}
	assert.Equal(t, int64(3), s.scalar(`SELECT count(*) FROM orders o JOIN order_items i ON i.order_id = o.id
		WHERE i.sku_id = $1 AND o.status = 'CONFIRMED'`, sku), "three orders, each once")
	assert.Equal(t, int64(3), s.scalar(`SELECT count(*) FROM stock_reservations WHERE sku_id = $1 AND status = 'CONFIRMED'`, sku))
}

// TestOrder_Busy_SlowRoundTripsRefuse_ThenTheSignalRecovers: the payment provider slows down, so
// placing an order takes longer than ORDERS_ADMIT_MAX_LATENCY (1.5 s). With one slow order
// answered in the window, the API lets in at most what it answers in 1.5 s (one or two orders);
// the worker is stopped so that those stay in flight, and the next order is refused BUSY with
// nothing recorded. Once the provider is prompt and a worker runs again, the orders let in one at a
// time bring the latency signal under the limit, two orders sent at once are both placed, and the
// refused request is placed with its own key.
func TestOrder_Busy_SlowRoundTripsRefuse_ThenTheSignalRecovers(t *testing.T) {
	t.Parallel()
	const limit = 1500 * time.Millisecond
	s := startStack(t, stackOptions{env: map[string]string{"ORDERS_ADMIT_MAX_LATENCY": limit.String(),
		"RATE_LIMIT_ORDERS_USER": "off"}})
	sku := s.proofSKU("BUSY2", 500)
	shoppers := make([]*shopper, 5)
	pvs := make([]string, len(shoppers))
	for i := range shoppers {
		shoppers[i] = s.shopper(7611 + int64(i))
		shoppers[i].fill(map[int64]int32{sku: 1})
		pvs[i] = shoppers[i].preview()
	}

	// Every provider call takes longer than the limit: the order's answer waits for its
	// authorization (tok_3ds: the answer leaves before any capture).
	require.NoError(t, s.sim.SetFaults(s.ctx, paysim.Faults{Latency: limit + time.Second}))
	slow := shoppers[0].order("slow-"+randomHex(4), pvs[0], "tok_3ds")
	require.Equal(t, http.StatusCreated, slow.status, slow.raw)
	require.NoError(t, s.sim.SetFaults(s.ctx, paysim.Faults{}))
	s.waitMetric("checkout_orders_admit_latency_seconds", func(v float64) bool { return v > limit.Seconds() })

	// No worker: what is let in stays in flight. One order answered in the window lets in at most
	// max(1, 1 a second × 1.5 s) at once, so by the third order one is refused.
	s.worker.Stop()
	s.worker = nil
	keys := make([]string, 3)
	replies := make([]reply, 3)
	done := make([]chan struct{}, 3)
	var held sync.WaitGroup
	refused := -1
	for i := 0; i < len(keys) && refused < 0; i++ {
		keys[i], done[i] = fmt.Sprintf("held-%d-%s", i, randomHex(4)), make(chan struct{})
		busyBefore := s.metric("checkout_orders_busy_total", "reason", "latency")
		held.Go(func() {
			defer close(done[i])
			replies[i] = shoppers[1+i].order(keys[i], pvs[1+i], "tok_3ds")
		})
		s.waitMetric("checkout_orders_in_flight", func(v float64) bool {
			return v == float64(i+1) || s.metric("checkout_orders_busy_total", "reason", "latency") > busyBefore
		})
		if s.metric("checkout_orders_busy_total", "reason", "latency") > busyBefore {
			refused = i
		}
	}
	require.GreaterOrEqual(t, refused, 1, "one order at least is let in as a probe, and by the third one is refused")
	<-done[refused]
	r := replies[refused]
	require.Equal(t, http.StatusServiceUnavailable, r.status, r.raw)
	assert.Equal(t, "BUSY", r.str("code"))
	assertRetryAfter(t, r, 2, 10)
	s.assertNothingRecorded(shoppers[1+refused], keys[refused])

	// A worker runs again and the provider is prompt: the orders held are placed, and orders sent
	// one at a time (each let in: nothing else is in flight) bring the signal down.
	s.startWorker()
	held.Wait()
	for i := range refused {
		require.Equal(t, http.StatusCreated, replies[i].status, "held order %d: %s", i, replies[i].raw)
	}
	sh := shoppers[4]
	for i := 0; s.metric("checkout_orders_admit_latency_seconds") > limit.Seconds(); i++ {
		require.Less(t, i, 200, "the latency signal stayed over the limit")
		a := sh.order(fmt.Sprintf("recover-%d-%s", i, randomHex(4)), pvs[4], "tok_ok")
		require.Equal(t, http.StatusCreated, a.status, "let in while recovering: %s", a.raw)
	}
	both := make([]reply, 2)
	var wg sync.WaitGroup
	for i := range both {
		wg.Go(func() { both[i] = sh.order(fmt.Sprintf("after-%d-%s", i, randomHex(4)), pvs[4], "tok_ok") })
	}
	wg.Wait()
	for _, a := range both {
		assert.Equal(t, http.StatusCreated, a.status, "orders flow again: %s", a.raw)
	}
	again := shoppers[1+refused].order(keys[refused], pvs[1+refused], "tok_3ds")
	assert.Equal(t, http.StatusCreated, again.status, "the refused request, sent again with its key: %s", again.raw)
}
