package events_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/marketplace/checkout/events"
	"github.com/marketplace/checkout/internal/dev/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// testBroker connects to the test's broker with a stream prefix of the test's own, its stream
// made.
func testBroker(t *testing.T) *events.Broker {
	t.Helper()
	quiet := slog.New(slog.NewJSONHandler(io.Discard, nil))
	b, err := events.Connect(events.Options{URL: testenv.NATSURL(t), Prefix: testenv.EventsPrefix(t), Replicas: 1,
		MaxAge: time.Hour, MaxBytes: 64 << 20, Log: quiet})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	// A deadline of its own: without one the client allows 5 s, which a loaded machine's
	// nats-server can take to create a stream on disk.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, b.EnsureStream(ctx))
	return b
}

// TestConsumer_MessageWithTraceContext_ProcessedInAConsumerSpanOfIt: a message that carries a
// traceparent header is handed to the apply step in a consumer span, a child of that context, and
// acknowledged; one without is handed over in the batch's context and starts no span.
func TestConsumer_MessageWithTraceContext_ProcessedInAConsumerSpanOfIt(t *testing.T) {
	t.Parallel()
	b := testBroker(t)
	ctx := context.Background()

	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	data, _ := json.Marshal(events.StockShortfall{OrderID: 1, SellerID: 42, SKUID: 77, WarehouseID: 1, ReleasedUnits: 1})
	for i, tp := range []string{parent, ""} {
		env, err := events.Build(events.Row{ID: int64(i + 1), AggregateType: "order", AggregateID: "1",
			Type: events.OrderStockShortfall, Payload: data, CreatedAt: time.Now()})
		require.NoError(t, err)
		env.TraceParent = tp
		_, err = b.Publish(ctx, env)
		require.NoError(t, err)
	}

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	c := &events.Consumer{Broker: b, Tracing: tp, Config: func(prefix string) jetstream.ConsumerConfig {
		return jetstream.ConsumerConfig{Durable: "test", FilterSubject: events.SubjectsAll(prefix),
			AckPolicy: jetstream.AckExplicitPolicy}
	}}
	var got []trace.SpanContext
	n, err := c.Step(ctx, 10, time.Second, func(_ context.Context, msgs []events.Message) error {
		for _, m := range msgs {
			got = append(got, trace.SpanContextFromContext(m.Ctx))
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 2, n)

	spans := rec.Ended()
	require.Len(t, spans, 1, "one span: the message with a trace context")
	s := spans[0]
	assert.Equal(t, "process order.stock_shortfall", s.Name())
	assert.Equal(t, trace.SpanKindConsumer, s.SpanKind())
	assert.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", s.SpanContext().TraceID().String(), "in the message's trace")
	assert.Equal(t, "00f067aa0ba902b7", s.Parent().SpanID().String(), "a child of the message's context")
	assert.Equal(t, s.SpanContext(), got[0], "the apply step has the message in its span")
	assert.False(t, got[1].IsValid(), "a message without a trace context has none")

	n, err = c.Step(ctx, 10, 100*time.Millisecond, func(context.Context, []events.Message) error { return nil })
	require.NoError(t, err)
	assert.Zero(t, n, "both acknowledged")
}

// TestFetch_TakesWhatWaitsAtOnce_ElseTheFirstToCome: messages already waiting come in one fetch,
// up to n; with none waiting, the first published within the wait comes as soon as it is there;
// with none, the fetch returns empty once the wait is over.
func TestFetch_TakesWhatWaitsAtOnce_ElseTheFirstToCome(t *testing.T) {
	t.Parallel()
	b := testBroker(t)
	ctx := context.Background()
	id := int64(0)
	publish := func(n int) {
		for range n {
			id++
			data, _ := json.Marshal(events.Stock{SKUID: id, WarehouseID: 1})
			env, err := events.Build(events.Row{ID: id, AggregateType: "sku", AggregateID: "1", Type: events.StockChanged,
				Payload: data, CreatedAt: time.Now()})
			require.NoError(t, err)
			_, err = b.Publish(ctx, env)
			require.NoError(t, err)
		}
	}
	prefix := b.Options().Prefix
	c, err := b.JetStream().CreateOrUpdateConsumer(ctx, events.StreamName(prefix),
		jetstream.ConsumerConfig{Durable: "fetch", FilterSubject: events.SubjectsAll(prefix),
			AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(t, err)
	ack := func(msgs []jetstream.Msg) {
		for _, m := range msgs {
			require.NoError(t, m.Ack())
		}
	}

	publish(5)
	msgs, err := events.Fetch(c, 3, time.Second)
	require.NoError(t, err)
	assert.Len(t, msgs, 3, "up to n of what waits")
	ack(msgs)
	msgs, err = events.Fetch(c, 10, time.Second)
	require.NoError(t, err)
	assert.Len(t, msgs, 2, "the rest, in one fetch")
	ack(msgs)

	go func() {
		time.Sleep(100 * time.Millisecond)
		publish(1)
	}()
	msgs, err = events.Fetch(c, 10, 30*time.Second)
	require.NoError(t, err)
	assert.Len(t, msgs, 1, "the first to come, without waiting out the wait")
	ack(msgs)

	msgs, err = events.Fetch(c, 10, 100*time.Millisecond)
	require.NoError(t, err)
	assert.Empty(t, msgs)
}
