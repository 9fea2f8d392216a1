package events

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Consumer is one of the checkout's durable pull consumers of its stream, shared by every worker
// (the broker hands each batch to one of them). It is made, or found as configured, at its first
// use and again after Forget; a batch is acknowledged only once its apply step succeeded, so a
// worker that fails or dies before leaves the batch to be delivered again.
type Consumer struct {
	Broker *Broker
	// Config is the consumer's configuration on the deployment's prefix.
	Config func(prefix string) jetstream.ConsumerConfig

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

// Step fetches up to n messages (waiting up to wait for the first, as Fetch) and hands them to
// apply; it acknowledges them all once apply returns nil and returns how many it fetched. An
// apply that fails leaves them unacknowledged (it may Nak or Term some itself).
func (c *Consumer) Step(ctx context.Context, n int, wait time.Duration,
	apply func(ctx context.Context, msgs []jetstream.Msg) error) (int, error) {
	js, err := c.Ensure(ctx)
	if err != nil {
		return 0, err
	}
	msgs, err := Fetch(js, n, wait)
	if err != nil || len(msgs) == 0 {
		return 0, err
	}
	if err := apply(ctx, msgs); err != nil {
		return 0, err
	}
	for _, m := range msgs {
		_ = m.Ack()
	}
	return len(msgs), nil
}
