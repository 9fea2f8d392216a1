// Package telemetry is how one order is followed across the processes: OpenTelemetry traces (the
// sampling decided here, in one place, and exported over OTLP), the Temporal SDK's own metrics
// on the process's Prometheus registry, and log lines that carry the order's ids and its trace.
package telemetry

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// TracingOptions say where a process sends its spans and which traces it keeps.
type TracingOptions struct {
	// Endpoint is the OTLP/HTTP traces endpoint (http://127.0.0.1:4318/v1/traces); empty turns
	// tracing off: no span is recorded, the instrumentation costs next to nothing.
	Endpoint string
	// Service names the process in the traces (checkout-api, checkout-worker, checkout).
	Service string
	// Version is the build of the workflow code the process runs.
	Version string
	// SampleRatio is the share of new traces kept (0 to 1). A trace begun elsewhere keeps its
	// parent's decision.
	SampleRatio float64
	// SlowAfter: a request or activity that takes at least this long keeps its trace whatever the
	// ratio said, as does one that fails (0: only failures).
	SlowAfter time.Duration
}

// Tracing is a process's tracer provider. Its zero value (and a nil *Tracing) is off.
type Tracing struct {
	provider *sdktrace.TracerProvider
}

// StartTracing sets the process's tracer provider and the W3C trace context propagator, which
// every instrumentation in the process reads (otel's globals). With no endpoint it sets nothing
// and returns an off Tracing.
func StartTracing(o TracingOptions) (*Tracing, error) {
	if o.Endpoint == "" {
		return &Tracing{}, nil
	}
	exporter, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(o.Endpoint))
	if err != nil {
		return nil, fmt.Errorf("traces exporter: %w", err)
	}
	t := newTracing(o, redacting{exporter})
	otel.SetTracerProvider(t.provider)
	otel.SetTextMapPropagator(Propagator)
	return t, nil
}

// Propagator carries a trace across HTTP and Temporal: W3C trace context and baggage.
var Propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// newTracing builds the provider around exporter: spans go out in batches; the traces the ratio
// did not pick are still recorded, and kept when one of their spans fails or is slow (keeper).
func newTracing(o TracingOptions, exporter sdktrace.SpanExporter) *Tracing {
	batch := sdktrace.NewBatchSpanProcessor(exporter)
	res := resource.NewSchemaless(attribute.String("service.name", o.Service),
		attribute.String("service.version", o.Version))
	return &Tracing{provider: sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithSampler(Sampler(o.SampleRatio)),
		sdktrace.WithSpanProcessor(newKeeper(batch, o.SlowAfter, defaultKeeperLimit)),
	)}
}

// On reports whether the process records spans.
func (t *Tracing) On() bool { return t != nil && t.provider != nil }

// TracerProvider is the process's provider; nil when tracing is off, so that a part given none
// adds no instrumentation at all.
func (t *Tracing) TracerProvider() trace.TracerProvider {
	if !t.On() {
		return nil
	}
	return t.provider
}

// Shutdown sends the spans still buffered and stops the provider.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if !t.On() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return t.provider.Shutdown(ctx)
}

// Sampler is the one sampling rule: a trace begun by a caller keeps the caller's decision
// (parent-based); a new one is picked with probability ratio. A trace not picked is still
// recorded (not exported), so that the keeper can keep it when it fails or is slow.
func Sampler(ratio float64) sdktrace.Sampler {
	return recordUnpicked{sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))}
}

type recordUnpicked struct{ sdktrace.Sampler }

func (s recordUnpicked) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	r := s.Sampler.ShouldSample(p)
	if r.Decision == sdktrace.Drop {
		r.Decision = sdktrace.RecordOnly
	}
	return r
}

func (s recordUnpicked) Description() string {
	return "RecordUnpicked(" + s.Sampler.Description() + ")"
}
