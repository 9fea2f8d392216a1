package worker_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/events"
	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/internal/metrics"
	"github.com/marketplace/checkout/worker"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// gauge reads one series of the registry: the family's name and, for a labelled one, its status.
func gauge(t *testing.T, m *metrics.Metrics, name, status string) (float64, bool) {
	t.Helper()
	families, err := m.Registry.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, s := range f.GetMetric() {
			if len(s.GetLabel()) == 0 || s.GetLabel()[0].GetValue() == status {
				return s.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

func TestLoops_OrderGauges_CountWaitingOrdersAndUnknownPaymentsOfOpenOrdersOnly(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	m := metrics.New()
	cfg := testenv.Config(t, nil)
	broker, err := events.Connect(events.Options{URL: cfg.Events.NATSURL, Prefix: cfg.Events.Prefix, Replicas: 1,
		MaxAge: cfg.Events.MaxAge, MaxBytes: cfg.Events.MaxBytes})
	require.NoError(t, err)
	t.Cleanup(broker.Close)
	worker.Loops(worker.Deps{Config: cfg, Pool: pool, Metrics: m, Broker: broker})
	read := func(name, status string) float64 {
		v, ok := gauge(t, m, name, status)
		require.True(t, ok, "%s{status=%q} is served", name, status)
		return v
	}

	for _, status := range []string{"PENDING_PAYMENT", "NEEDS_ATTENTION"} {
		assert.Zero(t, read("checkout_orders_waiting", status), "an empty status reads 0")
	}
	assert.Zero(t, read("checkout_orders_past_hold_seconds", ""))
	assert.Zero(t, read("checkout_payments_unknown", ""))
	assert.Zero(t, read("checkout_orders_scrape_error", ""))

	var addr int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO addresses (user_id, city, line1, lat, lon)
		VALUES (7, 'Istanbul', 'Test 1', 41, 29) RETURNING id`).Scan(&addr))
	// status, seconds since its last change, seconds past its hold (negative: still held), payment,
	// the step that waits for support, if one does (an ended order's: its giving back is parked)
	parked := `{"step": "capture", "error": "provider down"}`
	escalated := `{"step": "reverse payment", "error": "provider down", "escalatedAt": "2026-12-01T10:00:00Z"}`
	for i, o := range []struct {
		status       string
		changed, due int
		payment      string
		attention    string
	}{
		{"PENDING_PAYMENT", 120, 90, "UNKNOWN", ""},
		{"PENDING_PAYMENT", 30, -600, "REQUIRES_ACTION", ""},
		{"PENDING_PAYMENT", 10, -800, "UNKNOWN", ""},
		{"NEEDS_ATTENTION", 600, 300, "AUTHORIZED", parked},
		{"FAILED", 5000, 4000, "UNKNOWN", ""},
		{"CANCELLED", 700, 5000, "AUTHORIZED", escalated},
		{"CONFIRMED", 50, 40, "CAPTURED", ""},
	} {
		var id int64
		require.NoError(t, pool.QueryRow(ctx, `INSERT INTO orders (user_id, idempotency_key, request_hash, workflow_id,
			status, address_id, price_version, total_minor, currency, hold_expires_at, updated_at, attention)
			VALUES (7, $1::text, 'h', 'order-u7-' || $1::text, $2, $3, 'pv', 1000, 'TRY',
			        now() - make_interval(secs => $4), now() - make_interval(secs => $5),
			        NULLIF($6::text, '')::jsonb)
			RETURNING id`, "k"+string(rune('a'+i)), o.status, addr, o.due, o.changed, o.attention).Scan(&id))
		_, err := pool.Exec(ctx, `INSERT INTO payments (order_id, idempotency_key, provider, status, amount_minor,
			currency, created_at) VALUES ($1, $4::text, 'paysim', $2, 1000, 'TRY', now() - make_interval(secs => $3))`,
			id, o.payment, o.changed, fmt.Sprint("order-", id))
		require.NoError(t, err)
	}

	assert.EqualValues(t, 3, read("checkout_orders_waiting", "PENDING_PAYMENT"))
	assert.EqualValues(t, 2, read("checkout_orders_waiting", "NEEDS_ATTENTION"),
		"an ended order whose giving back waits for support waits for support too")
	assert.InDelta(t, 120, read("checkout_orders_waiting_oldest_seconds", "PENDING_PAYMENT"), 5)
	assert.InDelta(t, 700, read("checkout_orders_waiting_oldest_seconds", "NEEDS_ATTENTION"), 5)
	assert.EqualValues(t, 1, read("checkout_orders_escalated", ""), "waiting for support past the escalation")
	assert.InDelta(t, 90, read("checkout_orders_past_hold_seconds", ""), 5,
		"a parked order past its hold waits for support, not for its hold")
	assert.EqualValues(t, 2, read("checkout_payments_unknown", ""), "a closed order's unknown payment is the reconciler's")
	assert.InDelta(t, 120, read("checkout_payments_unknown_oldest_seconds", ""), 5)

	pool.Close()
	assert.EqualValues(t, 1, read("checkout_orders_scrape_error", ""))
	_, served := gauge(t, m, "checkout_orders_waiting", "PENDING_PAYMENT")
	assert.False(t, served, "no figure is made up when the database cannot be read")
}
