package webhooks

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/marketplace/checkout/events"
	"github.com/marketplace/checkout/webhooks/internal/webhookstore"
)

// FanoutConsumer is the fan-out's durable consumer on the checkout's stream.
const FanoutConsumer = "seller-webhooks"

// Fanout turns the broker's order events into deliveries: for each event, one row per endpoint of
// each seller the event concerns that is subscribed to its type, holding what that seller may see
// (SellerBody). A durable consumer shared by every worker; a batch is one transaction, acked after
// it commits (a redelivery inserts nothing twice: one delivery per endpoint and event). It only
// writes rows, so a slow or failing endpoint never holds it back, nor the relay before it.
type Fanout struct {
	Pool   *pgxpool.Pool
	Broker *events.Broker
	Log    *slog.Logger

	once     sync.Once
	consumer *events.Consumer
}

// FanoutConfig is the fan-out's consumer: every order event the stream keeps.
func FanoutConfig(prefix string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{Durable: FanoutConsumer, Description: "Sellers' webhooks: deliveries of order events",
		FilterSubject: events.Subject(prefix, "order.>"), DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: -1, MaxAckPending: 10_000}
}

// c is the fan-out's consumer, made at its first use (a Fanout is a struct literal).
func (f *Fanout) c() *events.Consumer {
	f.once.Do(func() { f.consumer = &events.Consumer{Broker: f.Broker, Config: FanoutConfig} })
	return f.consumer
}

// Step fetches one batch and writes its deliveries; it returns how many events it took.
func (f *Fanout) Step(ctx context.Context) (int, error) {
	return f.c().Step(ctx, 200, time.Second, func(ctx context.Context, msgs []events.Message) error {
		return pgx.BeginFunc(ctx, f.Pool, func(tx pgx.Tx) error {
			q := webhookstore.New(tx)
			for _, m := range msgs {
				// In the event's trace, when it has one: its deliveries' statements.
				if err := f.fanout(m.Ctx, q, m.Data()); err != nil {
					return err
				}
			}
			return nil
		}) // an error: not acked, delivered again
	})
}

func (f *Fanout) fanout(ctx context.Context, q *webhookstore.Queries, body []byte) error {
	e, err := events.Decode(body)
	if err != nil || !slices.Contains(Subscribable, e.Type) {
		return nil // nothing a seller receives
	}
	id, err := strconv.ParseInt(e.ID, 10, 64)
	if err != nil {
		return nil
	}
	sellers, err := Sellers(e)
	if err != nil || len(sellers) == 0 {
		f.Log.Error("webhooks: an order event without sellers", "event_id", e.ID, "type", e.Type, "error", err)
		return nil
	}
	endpoints, err := q.WebhookEndpointsForEvent(ctx, sellers, e.Type)
	if err != nil {
		return err
	}
	bodies := map[int64][]byte{}
	for _, ep := range endpoints {
		b, ok := bodies[ep.SellerID]
		if !ok {
			if b, err = SellerBody(e, ep.SellerID); err != nil {
				return err
			}
			bodies[ep.SellerID] = b
		}
		if err := q.InsertWebhookDelivery(ctx, webhookstore.InsertWebhookDeliveryParams{EndpointID: ep.ID, EventID: id,
			EventType: e.Type, Body: b}); err != nil {
			return err
		}
	}
	return nil
}

// Run is the worker loop: it fans events out as they come and keeps going after failures.
func (f *Fanout) Run(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	for {
		_, err := f.Step(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			f.Log.Warn("webhooks fan-out: waiting for the broker or the database", "error", err)
			f.c().Forget()
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 5*time.Second)
		default:
			backoff = 100 * time.Millisecond
		}
	}
}
