package outbox_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/events"
	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/outbox"
)

// TestRelay_SampledChange_PublishedInItsTrace_UnsampledWithout: an event written by a change
// whose span is sampled (in a transaction begun by db.BeginFunc, or a single statement through
// db.Traced) is published in a producer span of that change's trace, and carries the span's
// traceparent as a NATS header and in its envelope (as its schema says); one written by an unsampled change, or by
// a statement after a sampled transaction on the same connection, carries none and starts no span.
func TestRelay_SampledChange_PublishedInItsTrace_UnsampledWithout(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	b := broker(t, testenv.NATSURL(t))
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	r := &outbox.Relay{Pool: pool, Broker: b, Log: quiet, Tracing: tp}
	ctx := context.Background()

	change := func(sampled bool) (context.Context, trace.SpanContext) {
		var flags trace.TraceFlags
		if sampled {
			flags = trace.FlagsSampled
		}
		tid, sid := trace.TraceID{}, trace.SpanID{}
		copy(tid[:], randomBytes(t, 16))
		copy(sid[:], randomBytes(t, 8))
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: flags})
		return trace.ContextWithSpanContext(ctx, sc), sc
	}
	const insert = `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
		VALUES ('order', $1, 'order.stock_shortfall', $2)`
	payload := func(order int64) []byte {
		p, _ := json.Marshal(events.StockShortfall{OrderID: order, SellerID: 42, SKUID: 77, WarehouseID: 1, ReleasedUnits: 1})
		return p
	}
	inTx := func(ctx context.Context, order int64) {
		require.NoError(t, db.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, insert, strconv.FormatInt(order, 10), payload(order))
			return err
		}))
	}
	alone := func(ctx context.Context, order int64) {
		_, err := db.Traced(pool).Exec(ctx, insert, strconv.FormatInt(order, 10), payload(order))
		require.NoError(t, err)
	}

	sampledTx, txSpan := change(true)
	inTx(sampledTx, 1)
	sampledOne, oneSpan := change(true)
	alone(sampledOne, 2)
	unsampled, _ := change(false)
	inTx(unsampled, 3)
	alone(unsampled, 4)
	alone(ctx, 5) // no span at all
	// On one connection: the setting of a sampled transaction does not outlive it.
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	tx, err := conn.BeginTx(sampledTx, db.TxOptions(sampledTx))
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	_, err = conn.Exec(ctx, insert, "6", payload(6))
	require.NoError(t, err)
	conn.Release()

	n, err := r.Once(ctx)
	require.NoError(t, err)
	require.Equal(t, 6, n)

	parents := map[string]trace.SpanContext{"1": txSpan, "2": oneSpan}
	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		for _, a := range s.Attributes() {
			if a.Key == "messaging.message.id" {
				spans[a.Value.AsString()] = s
			}
		}
	}
	assert.Len(t, spans, 2, "one publish span per sampled event")

	st, err := b.JetStream().Stream(ctx, events.StreamName(b.Options().Prefix))
	require.NoError(t, err)
	v, err := events.NewValidator()
	require.NoError(t, err)
	for seq := uint64(1); seq <= 6; seq++ {
		m, err := st.GetMsg(ctx, seq)
		require.NoError(t, err)
		e, err := events.Decode(m.Data)
		require.NoError(t, err)
		assert.NoError(t, v.Validate(m.Data), "event %s follows the envelope's schema", e.ID)
		header := m.Header.Get(events.HeaderTraceparent)
		parent, sampled := parents[e.ID]
		if !sampled {
			assert.Empty(t, header, "event %s of an unsampled change: no traceparent header", e.ID)
			assert.Empty(t, e.TraceParent, "event %s of an unsampled change: no traceparent in its envelope", e.ID)
			continue
		}
		span := spans[e.ID]
		require.NotNil(t, span, "event %s: its publish span", e.ID)
		assert.Equal(t, "publish order.stock_shortfall", span.Name())
		assert.Equal(t, trace.SpanKindProducer, span.SpanKind())
		assert.Equal(t, parent.TraceID(), span.SpanContext().TraceID(), "event %s: in the change's trace", e.ID)
		assert.Equal(t, parent.SpanID(), span.Parent().SpanID(), "event %s: a child of the change's span", e.ID)
		want := "00-" + span.SpanContext().TraceID().String() + "-" + span.SpanContext().SpanID().String() + "-01"
		assert.Equal(t, want, header, "event %s: the publish span's traceparent header", e.ID)
		assert.Equal(t, want, e.TraceParent, "event %s: the publish span's traceparent in the envelope", e.ID)
	}
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return b
}
