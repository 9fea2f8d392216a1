package e2e_test

import (
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/api"
	"github.com/marketplace/checkout/cart"
	"github.com/marketplace/checkout/features"
	"github.com/marketplace/checkout/internal/metrics"
	"github.com/marketplace/checkout/internal/wiring"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/workflows"
)

// secondAPI starts another API replica on the stack's database and Temporal server, as a second
// `checkout api` process would be: its own caches (feature switches, carts: none), its own
// listener. It answers the base URL.
func (s *stack) secondAPI() string {
	s.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(s.t, err)
	m := metrics.New()
	switches := features.New(s.pool, features.Options{TTL: s.cfg.FeaturesCacheTTL, Log: quietLog()})
	m.RegisterFeatures(switches.Snapshot)
	e := api.New(api.Deps{Options: wiring.API(s.cfg), Pool: s.pool, Inventory: inventory.New(s.pool, m), Temporal: s.temporal,
		Metrics: m, Log: quietLog(), Payments: s.sim, Features: switches})
	srv := &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	s.t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// setFeatures sets switches through the ops API of the replica at base and checks the answer.
func (s *stack) setFeatures(base string, to map[string]bool) {
	s.t.Helper()
	r := s.callAt(base, http.MethodPut, "/api/v1/ops/features", s.ops(), nil, to)
	require.Equal(s.t, http.StatusOK, r.status, r.raw)
	seen := 0
	for _, f := range r.body["features"].([]any) {
		f := f.(map[string]any)
		if on, ok := to[f["name"].(string)]; ok {
			seen++
			assert.Equal(s.t, on, f["enabled"], "%s", f["name"])
			assert.Equal(s.t, "ops:950", f["updatedBy"])
		}
	}
	require.Equal(s.t, len(to), seen, "every switch set is in the answer")
}

// until asks the replica at base for path until ok holds for its answer: the state a switch
// reaches every replica in, within its cache's TTL.
func (s *stack) until(base, method, path, token string, ok func(reply) bool) reply {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := s.callAt(base, method, path, token, nil, map[string]any{})
		require.Equal(s.t, http.StatusOK, r.status, r.raw)
		if ok(r) {
			return r
		}
		require.True(s.t, time.Now().Before(deadline), "%s %s on %s never became as expected: %s", method, path, base, r.raw)
		time.Sleep(50 * time.Millisecond)
	}
}

func omitted(r reply) []string {
	var out []string
	if list, ok := r.body["omitted"].([]any); ok {
		for _, v := range list {
			out = append(out, v.(string))
		}
	}
	return out
}

// items answers the items of a cart or preview answer.
func items(r reply) []map[string]any {
	var out []map[string]any
	for _, it := range r.body["items"].([]any) {
		out = append(out, it.(map[string]any))
	}
	return out
}

// TestFeatures_SwitchedAtRunTime_AcrossTwoAPIReplicasAndTheWorker: two API replicas share a
// database. Ops turn the cart's stock hints and the preview's stock warnings off through one
// replica: both replicas' answers leave them out, saying so, with no error; the worker's relay
// stops updating the projection. Abandoned-cart events off: the clean-up defers and deletes
// nothing. Turned on again through the other replica, everything comes back, the relay catches
// up and the clean-up deletes the idle cart with its event. No process restarts.
func TestFeatures_SwitchedAtRunTime_AcrossTwoAPIReplicasAndTheWorker(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	cfg := s.ensureSchedules()
	a, b := s.base, s.secondAPI()
	sku := s.proofSKU("FEAT1", 2) // low stock: the preview warns LOW_STOCK
	sh := s.shopper(7701)
	sh.fill(map[int64]int32{sku: 1})
	idle := s.shopper(7702)
	idle.fill(map[int64]int32{71: 1})
	_, err := s.pool.Exec(s.ctx, `UPDATE carts SET updated_at = now() - make_interval(secs => $1::float8) WHERE user_id = $2`,
		(cfg.CartIdleTTL + time.Hour).Seconds(), idle.id)
	require.NoError(t, err)
	hinted := func(r reply) bool { return len(omitted(r)) == 0 && items(r)[0]["stock"] == "LOW_STOCK" }
	for _, base := range []string{a, b} {
		s.until(base, http.MethodGet, "/api/v1/cart", sh.token, hinted)
		p := s.callAt(base, http.MethodPost, "/api/v1/checkout/preview", sh.token, nil, map[string]any{})
		require.Equal(t, http.StatusOK, p.status, p.raw)
		assert.Empty(t, omitted(p))
		assert.EqualValues(t, 2, items(p)[0]["available"])
		assert.Contains(t, p.raw, `"code":"LOW_STOCK"`)
	}

	s.setFeatures(a, map[string]bool{"cart_stock_hints": false, "preview_stock_warnings": false,
		"abandoned_cart_events": false})
	for _, base := range []string{a, b} {
		r := s.until(base, http.MethodGet, "/api/v1/cart", sh.token, func(r reply) bool {
			return slices.Equal(omitted(r), []string{"cart_stock_hints"})
		})
		assert.NotContains(t, items(r)[0], "stock", "no hint, no error: %s", r.raw)
		assert.NotEmpty(t, items(r)[0]["price"], "the rest of the cart as before")
		p := s.until(base, http.MethodPost, "/api/v1/checkout/preview", sh.token, func(r reply) bool {
			return slices.Equal(omitted(r), []string{"preview_stock_warnings"})
		})
		assert.NotContains(t, items(p)[0], "available", p.raw)
		assert.NotContains(t, p.raw, "LOW_STOCK")
		assert.NotEmpty(t, p.str("priceVersion"), "the preview still prices the cart")
	}
	s.waitMetric("checkout_feature_enabled", func(v float64) bool { return v == 0 }, "feature", "abandoned_cart_events")
	require.Zero(t, s.metric("checkout_feature_enabled", "feature", "cart_stock_hints"), "the worker sees hints off")

	// A delivery while the hints are off: the projection keeps its old figure.
	r := s.call(http.MethodPut, "/seller-api/v1/stocks", s.seller(42), nil, []map[string]any{{"sku": "FEAT1",
		"warehouseId": 1, "quantity": 40, "sourceUpdatedAt": time.Now().UTC().Format(time.RFC3339Nano)}})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	var res cart.JanitorResult
	s.runSchedule(cfg.ScheduleIDPrefix+workflows.ScheduleCartJanitor, &res)
	assert.Equal(t, cart.JanitorResult{Deferred: true}, res)
	assert.Equal(t, int64(1), s.scalar(`SELECT count(*) FROM carts WHERE user_id = $1`, idle.id), "the idle cart waits")
	assert.Zero(t, s.scalar(`SELECT count(*) FROM outbox_events WHERE event_type = $1`, cart.EventCartAbandoned))
	s.waitOutboxPublished()
	time.Sleep(time.Second) // a projector would have applied it by now
	assert.Equal(t, int64(2), s.scalar(`SELECT available FROM sku_availability WHERE sku_id = $1`, sku),
		"the projector applied nothing meanwhile")
	s.waitMetric("checkout_availability_pending_changes", func(v float64) bool { return v >= 1 })

	s.setFeatures(b, map[string]bool{"cart_stock_hints": true, "preview_stock_warnings": true,
		"abandoned_cart_events": true})
	inStock := func(r reply) bool { return len(omitted(r)) == 0 && items(r)[0]["stock"] == "IN_STOCK" }
	for _, base := range []string{a, b} {
		s.until(base, http.MethodGet, "/api/v1/cart", sh.token, inStock) // the relay caught up
		s.until(base, http.MethodPost, "/api/v1/checkout/preview", sh.token, func(r reply) bool {
			return len(omitted(r)) == 0 && items(r)[0]["stock"] == "IN_STOCK" && items(r)[0]["available"] == nil
		})
	}
	s.waitMetric("checkout_feature_enabled", func(v float64) bool { return v == 1 }, "feature", "abandoned_cart_events")
	res = cart.JanitorResult{}
	s.runSchedule(cfg.ScheduleIDPrefix+workflows.ScheduleCartJanitor, &res)
	assert.Equal(t, cart.JanitorResult{Deleted: 1, Events: 1}, res)
	assert.Zero(t, s.scalar(`SELECT count(*) FROM carts WHERE user_id = $1`, idle.id))
	assert.Equal(t, int64(1), s.scalar(`SELECT count(*) FROM outbox_events WHERE event_type = $1`, cart.EventCartAbandoned))
}
