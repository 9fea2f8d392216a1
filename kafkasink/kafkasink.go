// Package kafkasink forwards the checkout's events from its stream on the broker to a Kafka topic,
// for shops whose consumers read Kafka: the same CloudEvents envelope (structured mode), keyed by
// its partition key so that each order's events stay in order in one partition, through franz-go's
// idempotent producer. It is a durable consumer of the stream like the product's own: a Kafka that
// is down stops only it, and it goes on from where it was.
//
// Tested against franz-go's in-process Kafka (kfake), not against a Kafka broker.
package kafkasink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/marketplace/checkout/events"
)

// ConsumerName is the sink's durable consumer on the checkout's stream.
const ConsumerName = "kafka-sink"

// Options say where the sink writes.
type Options struct {
	// Brokers are Kafka's seed brokers (KAFKA_BROKERS); Topic the topic (KAFKA_TOPIC).
	Brokers []string
	Topic   string
	// Batch is how many events one fetch from the stream takes (default 500).
	Batch int
	// Tracing makes the sink's spans; nil means the process's (otel's global).
	Tracing trace.TracerProvider
}

// Sink is the forwarder.
type Sink struct {
	client *kgo.Client
	opts   Options
	log    *slog.Logger

	consumer *events.Consumer
}

// New connects the producer: idempotent (a retried produce is written once), every in-sync
// replica's acknowledgement, at most one request in flight per broker so that a retry keeps the
// records' order.
func New(b *events.Broker, o Options, log *slog.Logger) (*Sink, error) {
	if len(o.Brokers) == 0 || o.Topic == "" {
		return nil, errors.New("KAFKA_BROKERS and KAFKA_TOPIC are required")
	}
	if o.Batch <= 0 {
		o.Batch = 500
	}
	client, err := kgo.NewClient(kgo.SeedBrokers(o.Brokers...), kgo.DefaultProduceTopic(o.Topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.MaxProduceRequestsInflightPerBroker(1),
		kgo.ProducerLinger(5*time.Millisecond), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	if err != nil {
		return nil, fmt.Errorf("kafka %s: %w", strings.Join(o.Brokers, ","), err)
	}
	if log == nil {
		log = slog.Default()
	}
	return &Sink{client: client, opts: o, log: log,
		consumer: &events.Consumer{Broker: b, Config: ConsumerConfig, Tracing: o.Tracing}}, nil
}

// Close closes the producer.
func (s *Sink) Close() { s.client.Close() }

// ConsumerConfig is the sink's consumer: every event the stream keeps, in stream order.
func ConsumerConfig(prefix string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{Durable: ConsumerName, Description: "Every event, forwarded to Kafka",
		FilterSubject: events.SubjectsAll(prefix), DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute, MaxDeliver: -1, MaxAckPending: 5_000}
}

// Step forwards one batch: produced (every record acknowledged by Kafka) before the stream's
// messages are acknowledged, so a sink that stops in between forwards them again (Kafka's
// consumers drop a repeat by the event's id, as the broker's do).
func (s *Sink) Step(ctx context.Context) (int, error) {
	n := 0
	_, err := s.consumer.Step(ctx, s.opts.Batch, time.Second, func(ctx context.Context, fetched []events.Message) error {
		var err error
		n, err = s.forward(ctx, fetched)
		return err
	})
	return n, err
}

// forward produces a batch's events; it terminates the messages that are not events and naks the
// rest when Kafka did not take them.
func (s *Sink) forward(ctx context.Context, fetched []events.Message) (int, error) {
	var msgs []jetstream.Msg
	var records []*kgo.Record
	for _, m := range fetched {
		e, err := events.Decode(m.Data())
		if err != nil {
			s.log.Error("kafka sink: a message that is not an event", "subject", m.Subject(), "error", err)
			_ = m.Term()
			continue
		}
		msgs = append(msgs, m.Msg)
		headers := []kgo.RecordHeader{{Key: "content-type", Value: []byte(events.ContentType)}}
		// The event's trace goes on from the sink's span of it, for Kafka's consumers.
		if tp, ts := events.TraceContext(m.Ctx); tp != "" {
			headers = append(headers, kgo.RecordHeader{Key: events.HeaderTraceparent, Value: []byte(tp)})
			if ts != "" {
				headers = append(headers, kgo.RecordHeader{Key: events.HeaderTracestate, Value: []byte(ts)})
			}
		}
		records = append(records, &kgo.Record{Key: []byte(e.PartitionKey), Value: m.Data(), Headers: headers})
	}
	if len(records) == 0 {
		return 0, nil
	}
	if err := s.client.ProduceSync(ctx, records...).FirstErr(); err != nil {
		for _, m := range msgs {
			_ = m.NakWithDelay(time.Second)
		}
		return 0, fmt.Errorf("kafka: %w", err)
	}
	return len(msgs), nil
}

// Run forwards until ctx ends, waiting out a Kafka or a broker that is down.
func (s *Sink) Run(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	for {
		_, err := s.Step(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			s.log.Warn("kafka sink: waiting", "error", err)
			s.consumer.Forget()
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
