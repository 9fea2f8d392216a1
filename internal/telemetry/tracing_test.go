package telemetry

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// testTracing is a provider as StartTracing builds it, exporting synchronously to memory.
func testTracing(t *testing.T, ratio float64, slow time.Duration) (*Tracing, *tracetest.InMemoryExporter) {
	t.Helper()
	mem := tracetest.NewInMemoryExporter()
	tr := &Tracing{provider: sdktrace.NewTracerProvider(sdktrace.WithSampler(Sampler(ratio)),
		sdktrace.WithSpanProcessor(newKeeper(sdktrace.NewSimpleSpanProcessor(redacting{mem}), slow, 100)))}
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	return tr, mem
}

func names(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

// remoteParent is a caller's span context, as a traceparent header brings it.
func remoteParent(sampled bool) context.Context {
	flags := trace.TraceFlags(0)
	if sampled {
		flags = trace.FlagsSampled
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5},
		TraceFlags: flags, Remote: true})
	return trace.ContextWithRemoteSpanContext(context.Background(), sc)
}

func TestSampler_FollowsTheCallerAndTheRatio(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		ratio  float64
		parent context.Context
		want   bool
	}{
		{"new trace, ratio 1", 1, context.Background(), true},
		{"new trace, ratio 0", 0, context.Background(), false},
		{"caller sampled, ratio 0", 0, remoteParent(true), true},
		{"caller not sampled, ratio 1", 1, remoteParent(false), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, mem := testTracing(t, tc.ratio, 0)
			_, s := tr.provider.Tracer("t").Start(tc.parent, "request")
			assert.True(t, s.IsRecording(), "every span is recorded, so a failure can keep it")
			s.End()
			assert.Equal(t, tc.want, len(mem.GetSpans()) == 1)
		})
	}
}

func TestKeeper_UnpickedTraceKeptWhenASpanFails(t *testing.T) {
	t.Parallel()
	tr, mem := testTracing(t, 0, 0)
	tracer := tr.provider.Tracer("t")
	ctx, root := tracer.Start(context.Background(), "POST /api/v1/orders")
	_, ok := tracer.Start(ctx, "GetCart")
	ok.End()
	_, bad := tracer.Start(ctx, "ReserveOrder")
	bad.SetStatus(codes.Error, "deadlock")
	bad.End()
	assert.ElementsMatch(t, []string{"GetCart", "ReserveOrder"}, names(mem.GetSpans()), "the failure brings its held siblings")
	root.End()
	got := mem.GetSpans()
	require.Len(t, got, 3, "the rest of a kept trace follows")
	for _, s := range got {
		assert.True(t, s.SpanContext.IsSampled(), "%s exported as sampled", s.Name)
		assert.Contains(t, s.Attributes, keptKey.Bool(true))
	}
}

func TestKeeper_UnpickedTraceKeptWhenSlow_DroppedWhenQuick(t *testing.T) {
	t.Parallel()
	tr, mem := testTracing(t, 0, 50*time.Millisecond)
	tracer := tr.provider.Tracer("t")
	start := time.Now()

	ctx, quick := tracer.Start(context.Background(), "POST /api/v1/orders", trace.WithTimestamp(start))
	_, child := tracer.Start(ctx, "GetCart")
	child.End()
	quick.End(trace.WithTimestamp(start.Add(10 * time.Millisecond)))
	assert.Empty(t, mem.GetSpans(), "a quick trace nobody picked is dropped")

	ctx, slow := tracer.Start(context.Background(), "POST /api/v1/orders", trace.WithTimestamp(start))
	_, child = tracer.Start(ctx, "GetCart")
	child.End()
	slow.End(trace.WithTimestamp(start.Add(time.Second)))
	assert.ElementsMatch(t, []string{"GetCart", "POST /api/v1/orders"}, names(mem.GetSpans()))

	// A workflow's run lasts as long as its shopper takes: its length keeps nothing.
	_, run := tracer.Start(remoteParent(false), "RunWorkflow:OrderWorkflow", trace.WithTimestamp(start))
	run.End(trace.WithTimestamp(start.Add(time.Minute)))
	assert.Len(t, mem.GetSpans(), 2)
}

func TestKeeper_GroupsByLocalRoot(t *testing.T) {
	t.Parallel()
	tr, mem := testTracing(t, 0, 0)
	tracer := tr.provider.Tracer("t")
	parent := remoteParent(false)
	// Two activities of one trace in one process: the first ends quietly, the second fails.
	ctx1, a1 := tracer.Start(parent, "RunActivity:CheckPrices")
	_, q1 := tracer.Start(ctx1, "GetCart")
	ctx2, a2 := tracer.Start(parent, "RunActivity:Reserve")
	_, q2 := tracer.Start(ctx2, "ReserveOrder")
	q1.End()
	q2.End()
	a1.End()
	assert.Empty(t, mem.GetSpans())
	a2.SetStatus(codes.Error, "contention")
	a2.End()
	assert.ElementsMatch(t, []string{"ReserveOrder", "RunActivity:Reserve"}, names(mem.GetSpans()),
		"the quiet activity's group was dropped when it ended")
}

func TestKeeper_BoundsWhatItHolds(t *testing.T) {
	t.Parallel()
	mem := tracetest.NewInMemoryExporter()
	k := newKeeper(sdktrace.NewSimpleSpanProcessor(mem), 0, 10)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(Sampler(0)), sdktrace.WithSpanProcessor(k))
	tracer := tp.Tracer("t")
	var roots []trace.Span
	for range 20 {
		ctx, root := tracer.Start(context.Background(), "RunWorkflow:OrderWorkflow")
		_, s := tracer.Start(ctx, "StartActivity:Reserve")
		s.End()
		roots = append(roots, root)
	}
	k.mu.Lock()
	assert.LessOrEqual(t, k.spans, 10)
	k.mu.Unlock()
	for _, r := range roots {
		r.End()
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	assert.Zero(t, k.spans)
	assert.Empty(t, k.roots)
	assert.Empty(t, k.held)
}

func TestRedacting_DropsPersonalAttributes(t *testing.T) {
	t.Parallel()
	tr, mem := testTracing(t, 1, 0)
	_, s := tr.provider.Tracer("t").Start(context.Background(), "POST /api/v1/orders", trace.WithAttributes(
		attribute.String("http.route", "/api/v1/orders"), attribute.String("client.address", "203.0.113.9"),
		attribute.String("user_agent.original", "Mozilla"), attribute.String("http.target", "/api/v1/orders?x=1"),
		attribute.StringSlice("pgx.query.parameters", []string{"tok_ok"})))
	s.End()
	got := mem.GetSpans()
	require.Len(t, got, 1)
	assert.Equal(t, []attribute.KeyValue{attribute.String("http.route", "/api/v1/orders")}, got[0].Attributes)
}

func TestStatementName_SqlcNameElseFirstWord(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "ReserveOrder", StatementName("-- name: ReserveOrder :many\nSELECT * FROM reserve_order($1)"))
	assert.Equal(t, "BEGIN", StatementName(" begin"))
	assert.Equal(t, "SQL", StatementName(""))
}

func TestStartTracing_OffWithoutEndpoint(t *testing.T) {
	t.Parallel()
	tr, err := StartTracing(TracingOptions{})
	require.NoError(t, err)
	assert.False(t, tr.On())
	assert.Nil(t, tr.TracerProvider())
	assert.Nil(t, tr.PGXTracer())
	i, err := tr.TemporalInterceptor()
	require.NoError(t, err)
	assert.Nil(t, i)
	assert.NoError(t, tr.Shutdown(context.Background()))
}
