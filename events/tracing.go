package events

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// An event continues the trace of the change that wrote it (docs/events.md): the relay's
// publish span is a child of the trace context stored with the outbox row, and the message carries
// the publish span's W3C trace context twice: as NATS headers (traceparent, tracestate), which the
// consumers read, and as the envelope's CloudEvents distributed-tracing extension attributes,
// which travel with the event wherever it is copied (a Kafka record, a seller's webhook body). An
// event whose change was not sampled carries neither, and starts no span.

// Header names of the W3C trace context on a message.
const (
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
)

// w3c is the trace context format of every message, whatever the process's propagator.
var w3c propagation.TraceContext

// TracerName is the instrumentation name of the event spans.
const TracerName = "github.com/marketplace/checkout/events"

// Tracer is tp's tracer of the event spans; nil tp means the process's (otel's global).
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(TracerName)
}

// RemoteContext is ctx with the trace context traceparent and tracestate name as its remote
// parent; ok is false (and ctx is returned as it is) when traceparent names none.
func RemoteContext(ctx context.Context, traceparent, tracestate string) (context.Context, bool) {
	if traceparent == "" {
		return ctx, false
	}
	out := w3c.Extract(ctx, propagation.MapCarrier{HeaderTraceparent: traceparent, HeaderTracestate: tracestate})
	if !trace.SpanContextFromContext(out).IsValid() {
		return ctx, false
	}
	return out, true
}

// TraceContext is the W3C trace context of ctx's span (empty when it has none).
func TraceContext(ctx context.Context) (traceparent, tracestate string) {
	c := propagation.MapCarrier{}
	w3c.Inject(ctx, c)
	return c[HeaderTraceparent], c[HeaderTracestate]
}

// MessageContext is ctx with the trace context of a message's headers as its remote parent; ok
// is false when the message carries none.
func MessageContext(ctx context.Context, h nats.Header) (context.Context, bool) {
	return RemoteContext(ctx, h.Get(HeaderTraceparent), h.Get(HeaderTracestate))
}

// StartProcess starts a consumer's span of one message of the stream, a child of the message's
// trace context: "process <event type>". With no trace context on the message it starts none and
// returns ctx and nil.
func StartProcess(ctx context.Context, tp trace.TracerProvider, consumer string, subject string,
	h nats.Header) (context.Context, trace.Span) {
	parent, ok := MessageContext(ctx, h)
	if !ok {
		return ctx, nil
	}
	typ := subject
	if i := strings.Index(subject, ".events."); i >= 0 {
		typ = subject[i+len(".events."):]
	}
	return Tracer(tp).Start(parent, "process "+typ, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("messaging.system", "nats"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", subject),
			attribute.String("messaging.consumer.group.name", consumer),
			attribute.String("messaging.message.id", h.Get(nats.MsgIdHdr)),
			attribute.String("event.type", typ)))
}
