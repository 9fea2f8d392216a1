package outbox_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/internal/metrics"
	"github.com/marketplace/checkout/outbox"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestRelay_InOrderAndAPoisonEventIsSetAside(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	for _, typ := range []string{"good", "bad", "good"} {
		_, err := pool.Exec(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', '1', $1, '{}')`, typ)
		require.NoError(t, err)
	}
	var seen []int64
	record := func(ctx context.Context, e outbox.Event) error { seen = append(seen, e.ID); return nil }
	r := &outbox.Relay{Pool: pool, Log: slog.New(slog.NewJSONHandler(io.Discard, nil)), MaxAttempts: 3,
		Handlers: map[string]outbox.Handler{
			"good": record,
			"bad":  func(context.Context, outbox.Event) error { return errors.New("downstream refuses") },
		}}

	n, err := r.Once(ctx)
	require.Error(t, err)
	assert.Equal(t, 1, n, "the event before the failing one is published")
	for i := 0; i < 2; i++ {
		n, err = r.Once(ctx)
		require.Error(t, err)
		assert.Zero(t, n, "the events behind a failing one wait: order is kept")
	}
	n, err = r.Once(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, n, "after 3 attempts the failing event is set aside and the next one goes")
	assert.Len(t, seen, 2)
	assert.Less(t, seen[0], seen[1])

	var attempts int
	var dead bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT attempts, dead_at IS NOT NULL FROM outbox WHERE event_type = 'bad'`).Scan(&attempts, &dead))
	assert.Equal(t, 3, attempts)
	assert.True(t, dead)
	var unpublished int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE published_at IS NULL AND dead_at IS NULL`).Scan(&unpublished))
	assert.Zero(t, unpublished)
}

func TestRelay_Backlog_WaitingEventsAndTheOldestAge_AsGauges(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	m := metrics.New()
	r := &outbox.Relay{Pool: pool, Log: slog.New(slog.NewJSONHandler(io.Discard, nil)), MaxAttempts: 1,
		Handlers: map[string]outbox.Handler{"bad": func(context.Context, outbox.Event) error { return errors.New("refused") }}}
	m.RegisterOutboxGauges(r)
	_, err := pool.Exec(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, created_at)
		VALUES ('order', '1', 'bad', '{}', now() - interval '45 seconds'),
		       ('order', '1', 'good', '{}', now() - interval '40 seconds'),
		       ('order', '2', 'good', '{}', now())`)
	require.NoError(t, err)

	gauges := func() map[string]float64 {
		out := map[string]float64{}
		families, err := m.Registry.Gather()
		require.NoError(t, err)
		for _, f := range families {
			out[f.GetName()] = f.GetMetric()[0].GetGauge().GetValue()
		}
		return out
	}
	before := gauges()
	assert.EqualValues(t, 3, before["checkout_outbox_pending_events"])
	assert.InDelta(t, 45, before["checkout_outbox_lag_seconds"], 5)
	assert.Zero(t, before["checkout_outbox_scrape_error"])

	_, err = r.Once(ctx)
	require.Error(t, err, "the first event is set aside")
	_, err = r.Once(ctx)
	require.NoError(t, err)
	after := gauges()
	assert.Zero(t, after["checkout_outbox_pending_events"], "published and set-aside events wait no more")
	assert.Zero(t, after["checkout_outbox_lag_seconds"])
}
