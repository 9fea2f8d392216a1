package events

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Consumer is one of the checkout's durable pull consumers of its stream, shared by every worker
// (the broker hands each batch to one of them). It is made, or found as configured, at its first
// use and again after Forget; a batch is acknowledged only once its apply step succeeded, so a
// worker that fails or dies before leaves the batch to be delivered again.
type Consumer struct {
	Broker *Broker
	// Config is the consumer's configuration on the deployment's prefix.
	Config func(prefix string) jetstream.ConsumerConfig
	// Tracing makes the consumer's spans; nil means the process's (otel's global).
	Tracing trace.TracerProvider

	mu sync.Mutex
	c  jetstream.Consumer
}

// Ensure creates the consumer (and the stream it reads) or finds them as configured.
func (c *Consumer) Ensure(ctx context.Context) (jetstream.Consumer, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.c != nil {
		return c.c, nil
	}
	if c.Broker == nil {
		return nil, ErrNoBroker
	}
	if err := c.Broker.EnsureStream(ctx); err != nil {
		return nil, err
	}
	prefix := c.Broker.Options().Prefix
	cfg := c.Config(prefix)
	js, err := c.Broker.JetStream().CreateOrUpdateConsumer(ctx, StreamName(prefix), cfg)
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", cfg.Durable, err)
	}
	c.c = js
	return js, nil
}

// Forget drops the consumer, to be found (or made) again: the broker may have lost it.
func (c *Consumer) Forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.c = nil
}

// Message is a fetched message with its context: a child of the message's trace, in the
// consumer's span of it, when the message carries a trace context; the batch's context otherwise.
type Message struct {
	jetstream.Msg
	Ctx context.Context
}

// Step fetches up to n messages (waiting up to wait for the first, as Fetch) and hands them to
// apply; it acknowledges them all once apply returns nil and returns how many it fetched. An
// apply that fails leaves them unacknowledged (it may Nak or Term some itself). Each message
// that carries a trace context is processed in a span of that trace (StartProcess), which ends
// once the batch is acknowledged or has failed.
func (c *Consumer) Step(ctx context.Context, n int, wait time.Duration,
	apply func(ctx context.Context, msgs []Message) error) (int, error) {
	js, err := c.Ensure(ctx)
	if err != nil {
		return 0, err
	}
	fetched, err := Fetch(js, n, wait)
	if err != nil || len(fetched) == 0 {
		return 0, err
	}
	durable := c.Config(c.Broker.Options().Prefix).Durable
	msgs := make([]Message, len(fetched))
	var spans []trace.Span
	for i, m := range fetched {
		mctx, span := StartProcess(ctx, c.Tracing, durable, m.Subject(), m.Headers())
		msgs[i] = Message{Msg: m, Ctx: mctx}
		if span != nil {
			spans = append(spans, span)
		}
	}
	if err = apply(ctx, msgs); err == nil {
		for _, m := range msgs {
			_ = m.Ack()
		}
	}
	for _, span := range spans {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
	if err != nil {
		return 0, err
	}
	return len(msgs), nil
}
