package webhooks_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/marketplace/checkout/events"
	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/webhooks"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestDispatcher_TracedEvent_DeliveredInAClientSpanWhoseTraceparentTheRequestCarries: a delivery
// of an event whose body names its publish's trace context is sent in a client span, a child of
// it, and the request carries that span's traceparent header; a delivery of an untraced event
// carries none and starts no span.
func TestDispatcher_TracedEvent_DeliveredInAClientSpanWhoseTraceparentTheRequestCarries(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var mu sync.Mutex
	var got []string // the requests' traceparent headers, in order
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("traceparent"))
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	_, err := pool.Exec(ctx, `INSERT INTO sellers (id, name) VALUES (42, 'Seller 42') ON CONFLICT DO NOTHING`)
	require.NoError(t, err)
	targets := webhooks.Targets{AllowPrivate: true}
	ep, _, err := webhooks.Endpoints{Pool: pool, Targets: targets}.Create(ctx, 42,
		webhooks.Spec{URL: srv.URL + "/hooks", EventTypes: []string{events.OrderCreated}})
	require.NoError(t, err)

	const traceID, publish = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	for i, traceparent := range []string{"00-" + traceID + "-" + publish + "-01", ""} {
		body, err := json.Marshal(events.Envelope{SpecVersion: "1.0", ID: "1", Type: events.OrderCreated,
			TraceParent: traceparent, Data: json.RawMessage(`{}`)})
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `INSERT INTO webhook_deliveries (endpoint_id, event_id, event_type, body)
			VALUES ($1, $2, $3, $4)`, ep.ID, int64(i+1), events.OrderCreated, body)
		require.NoError(t, err)
	}

	rec := tracetest.NewSpanRecorder()
	d := &webhooks.Dispatcher{Pool: pool, Targets: targets, Log: slog.New(slog.NewJSONHandler(io.Discard, nil)),
		Interval: 20 * time.Millisecond, Tracing: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))}
	done := make(chan struct{})
	go func() { _ = d.Run(ctx); close(done) }()
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 2 }, 30*time.Second,
		20*time.Millisecond, "both delivered")
	cancel()
	<-done

	spans := rec.Ended()
	require.Len(t, spans, 1, "a span for the traced event's delivery alone")
	s := spans[0]
	assert.Equal(t, "webhook delivery", s.Name())
	assert.Equal(t, trace.SpanKindClient, s.SpanKind())
	assert.Equal(t, traceID, s.SpanContext().TraceID().String(), "in the event's trace")
	assert.Equal(t, publish, s.Parent().SpanID().String(), "a child of the event's publish")
	assert.Equal(t, "00-"+traceID+"-"+s.SpanContext().SpanID().String()+"-01", got[0], "the request names the delivery's span")
	assert.Empty(t, got[1], "an untraced event's delivery carries no trace context")
}
