package db_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/internal/dev/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestTraced_SampledStatement_SeesTheSettingAndAnswersAsThePool: a single statement of a sampled
// span runs with the trace context set local to it, and answers as it does on the pool (rows,
// one row, no row, an error); the setting is gone after it, and an unsampled statement has none.
func TestTraced_SampledStatement_SeesTheSettingAndAnswersAsThePool(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	sampled := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	unsampled := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid}))
	const setting = `SELECT coalesce(current_setting('checkout.traceparent', true), '')`
	q := db.Traced(pool)

	var got string
	require.NoError(t, q.QueryRow(sampled, setting).Scan(&got))
	assert.Equal(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", got)
	require.NoError(t, q.QueryRow(unsampled, setting).Scan(&got))
	assert.Empty(t, got, "unsampled: not set")

	rows, err := q.Query(sampled, `SELECT g FROM generate_series(1, 3) g`)
	require.NoError(t, err)
	n, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	require.NoError(t, err)
	assert.Equal(t, []int32{1, 2, 3}, n)

	assert.ErrorIs(t, q.QueryRow(sampled, `SELECT 1 WHERE false`).Scan(&got), pgx.ErrNoRows)
	_, err = q.Exec(sampled, `SELECT 1/0`)
	assert.ErrorContains(t, err, "division by zero")
	tag, err := q.Exec(sampled, `SELECT set_config('checkout.x', 'y', true)`)
	require.NoError(t, err)
	assert.Equal(t, int64(1), tag.RowsAffected())

	// Each connection of the pool: the setting did not outlive its statement.
	for range 4 {
		require.NoError(t, pool.QueryRow(context.Background(), setting).Scan(&got))
		assert.Empty(t, got)
	}
}
