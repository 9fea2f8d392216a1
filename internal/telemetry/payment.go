package telemetry

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/marketplace/checkout/payment"
)

// TracedGateway makes each call to the payment provider a client span: the operation, the
// idempotency key (which names the order, never the shopper) and the intent's status. With
// tracing off it is g itself.
func (t *Tracing) TracedGateway(g payment.Gateway) payment.Gateway {
	if !t.On() || g == nil {
		return g
	}
	return tracedGateway{next: g, tracer: t.provider.Tracer("github.com/marketplace/checkout/payment")}
}

type tracedGateway struct {
	next   payment.Gateway
	tracer trace.Tracer
}

var _ payment.Gateway = tracedGateway{}

func (g tracedGateway) call(ctx context.Context, op string, ref payment.Ref,
	do func(context.Context) (payment.Intent, error)) (payment.Intent, error) {
	attrs := []attribute.KeyValue{attribute.String("payment.operation", op), attribute.String("payment.key", ref.Key)}
	if ref.OrderID != 0 {
		attrs = append(attrs, attribute.Int64("order.id", ref.OrderID))
	}
	ctx, span := g.tracer.Start(ctx, "payment "+op, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	defer span.End()
	in, err := do(ctx)
	if errors.Is(err, payment.ErrNotFound) {
		// The provider never saw the key: an answer, not a failure.
		span.SetAttributes(attribute.String("payment.status", "NOT_FOUND"))
		return in, err
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return in, err
	}
	span.SetAttributes(attribute.String("payment.status", string(in.Status)), attribute.String("payment.intent", in.ID))
	return in, nil
}

func (g tracedGateway) Authorize(ctx context.Context, req payment.AuthorizeRequest) (payment.Intent, error) {
	return g.call(ctx, "authorize", req.Ref, func(ctx context.Context) (payment.Intent, error) {
		return g.next.Authorize(ctx, req)
	})
}

func (g tracedGateway) Capture(ctx context.Context, ref payment.Ref) (payment.Intent, error) {
	return g.call(ctx, "capture", ref, func(ctx context.Context) (payment.Intent, error) { return g.next.Capture(ctx, ref) })
}

func (g tracedGateway) Void(ctx context.Context, ref payment.Ref) (payment.Intent, error) {
	return g.call(ctx, "void", ref, func(ctx context.Context) (payment.Intent, error) { return g.next.Void(ctx, ref) })
}

func (g tracedGateway) Refund(ctx context.Context, ref payment.Ref) (payment.Intent, error) {
	return g.call(ctx, "refund", ref, func(ctx context.Context) (payment.Intent, error) { return g.next.Refund(ctx, ref) })
}

func (g tracedGateway) RefundPart(ctx context.Context, ref payment.Ref, refund payment.PartialRefund) (payment.Intent, error) {
	return g.call(ctx, "refund_part", ref, func(ctx context.Context) (payment.Intent, error) {
		return g.next.RefundPart(ctx, ref, refund)
	})
}

func (g tracedGateway) Lookup(ctx context.Context, ref payment.Ref) (payment.Intent, error) {
	return g.call(ctx, "lookup", ref, func(ctx context.Context) (payment.Intent, error) { return g.next.Lookup(ctx, ref) })
}

// Rules are the provider's own.
func (g tracedGateway) Rules() payment.Rules { return g.next.Rules() }
