// Package outbox publishes the events that state changes wrote to the outbox (outbox_events) in
// their own transaction to the event broker: in id order (so in order per order and per stock
// row), one relay at a time, each event acknowledged by the broker before it is marked, with its id
// as the broker's de-duplication id, so that a relay that dies between the two publishes nothing
// twice in effect.
package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/events"
	"github.com/marketplace/checkout/outbox/internal/outboxstore"
)

// Event is one outbox row.
type Event = events.Row

// Handler acts on an event inside the product (a shortfall signals its order's workflow) once the
// broker has it. An error stops the batch there, so that later events wait for it; a handler
// returns nil for events it can never act on.
type Handler func(ctx context.Context, e Event) error

// Publisher is the event broker as the relay needs it: an envelope stored, or an error.
type Publisher interface {
	Publish(ctx context.Context, e events.Envelope) (dup bool, err error)
}

var _ Publisher = (*events.Broker)(nil)

// ErrBroker wraps what the broker answered when it did not take an event: the relay stops and
// tries again, and the event keeps its place.
var ErrBroker = errors.New("event broker")

// Relay reads unpublished events in id order, publishes each to the broker and hands it to the
// handler of its type, if any.
type Relay struct {
	Pool      *pgxpool.Pool
	Broker    Publisher
	Handlers  map[string]Handler
	BatchSize int32
	// Interval is the poll period when the outbox is empty.
	Interval time.Duration
	// PublishTimeout bounds the wait for the broker's acknowledgement of one event (default 5s).
	PublishTimeout time.Duration
	// Prepare, when set, runs before the first batch and again after a broker failure until it
	// succeeds (the stream is ensured).
	Prepare func(ctx context.Context) error
	// Retention is how long published events stay in the table (default 72h); the broker's stream
	// keeps them from then on.
	Retention time.Duration
	Log       *slog.Logger
	// Published counts events by type; nil means not counted.
	Published *prometheus.CounterVec
	// Dead counts events set aside, after MaxAttempts failures or at once when the broker refuses
	// the event itself, by type; nil means not counted.
	Dead *prometheus.CounterVec
	// BrokerFailures counts the publishes the broker did not acknowledge; nil means not counted.
	BrokerFailures prometheus.Counter
	// MaxAttempts bounds the attempts at an event whose handler keeps failing (default 20).
	MaxAttempts int32
	// Tracing makes the publish spans; nil means the process's (otel's global).
	Tracing trace.TracerProvider
}

func (r *Relay) maxAttempts() int32 {
	if r.MaxAttempts > 0 {
		return r.MaxAttempts
	}
	return 20
}

// Backoff bounds: a broker that is back is used again within brokerBackoffMax.
const (
	brokerBackoffMax  = 5 * time.Second
	handlerBackoffMax = 30 * time.Second
	purgeEvery        = time.Minute
)

// Run relays until ctx ends. A broker that is down stops it (the outbox grows, nothing is marked);
// it goes on by itself once the broker acknowledges again.
func (r *Relay) Run(ctx context.Context) error {
	interval := r.Interval
	if interval <= 0 {
		interval = 200 * time.Millisecond
	}
	backoff := interval
	prepared := r.Prepare == nil
	var lastPurge time.Time
	for {
		var n int
		var err error
		if !prepared {
			if err = r.Prepare(ctx); err == nil {
				prepared = true
			} else {
				if r.BrokerFailures != nil && ctx.Err() == nil {
					r.BrokerFailures.Inc()
				}
				err = fmt.Errorf("%w: %v", ErrBroker, err)
			}
		}
		if prepared {
			n, err = r.Once(ctx)
		}
		if ctx.Err() != nil {
			return nil
		}
		wait := interval
		switch {
		case errors.Is(err, ErrBroker):
			r.Log.Warn("outbox relay: the event broker did not take the next event; waiting for it", "error", err)
			backoff = min(backoff*2, brokerBackoffMax)
			wait = backoff
			prepared = r.Prepare == nil
		case err != nil:
			r.Log.Warn("outbox relay", "error", err)
			backoff = min(backoff*2, handlerBackoffMax)
			wait = backoff
		default:
			backoff = interval
			if time.Since(lastPurge) > purgeEvery {
				lastPurge = time.Now()
				if err := r.purge(ctx); err != nil && ctx.Err() == nil {
					r.Log.Warn("outbox relay: purging published events", "error", err)
				}
			}
			if n > 0 {
				continue
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// purge deletes published events older than the retention, a batch at a time.
func (r *Relay) purge(ctx context.Context) error {
	keep := r.Retention
	if keep <= 0 {
		keep = 72 * time.Hour
	}
	for {
		n, err := outboxstore.New(r.Pool).PurgePublishedOutbox(ctx, keep.Seconds(), 5000)
		if err != nil || n < 5000 {
			return err
		}
	}
}

// Backlog is the relay's lag: events not yet published nor set aside, and the age of the oldest.
func (r *Relay) Backlog(ctx context.Context) (pending int64, oldest time.Duration, err error) {
	row, err := outboxstore.New(r.Pool).OutboxLag(ctx)
	if err != nil {
		return 0, 0, err
	}
	return row.Pending, time.Duration(row.OldestSeconds * float64(time.Second)), nil
}

// Once relays one batch and returns how many events it published. It stops at the first event the
// broker does not acknowledge (an error wrapping ErrBroker; the events before it are marked) or
// whose handler fails (one attempt counted). An event the broker refuses for itself
// (events.ErrUnpublishable) is set aside at once and the batch goes on.
func (r *Relay) Once(ctx context.Context) (int, error) {
	batch := r.BatchSize
	if batch <= 0 {
		batch = 200
	}
	published := 0
	var stopErr error
	// BEGIN goes with the relay's lock, the marks with the COMMIT (db.InTx).
	err := db.InTx(ctx, r.Pool, func(tx db.DBTX) error {
		q := outboxstore.New(tx)
		locked, err := q.TryLockOutboxRelay(ctx)
		if err != nil || !locked {
			return err
		}
		rows, err := q.UnpublishedOutbox(ctx, batch)
		if err != nil {
			return err
		}
		var done []int64
		for _, row := range rows {
			e := Event{ID: row.ID, AggregateType: row.AggregateType, AggregateID: row.AggregateID, Type: row.EventType,
				Payload: row.Payload, CreatedAt: row.CreatedAt}
			if row.Traceparent != nil {
				e.Traceparent = *row.Traceparent
			}
			if row.Tracestate != nil {
				e.Tracestate = *row.Tracestate
			}
			if err := r.relay(ctx, e); err != nil {
				if errors.Is(err, ErrBroker) {
					stopErr = err
					break
				}
				// An event the broker refuses for itself is refused on every try: it is set aside at
				// once and the batch goes on, rather than holding every event behind it through its
				// attempts.
				if errors.Is(err, events.ErrUnpublishable) {
					if qerr := r.failed(ctx, q, e, err, 1); qerr != nil {
						return qerr
					}
					continue
				}
				// A handler's failure counts one attempt and stops the batch.
				if qerr := r.failed(ctx, q, e, err, r.maxAttempts()); qerr != nil {
					return qerr
				}
				stopErr = err
				break
			}
			if r.Published != nil {
				r.Published.WithLabelValues(e.Type).Inc()
			}
			done = append(done, e.ID)
		}
		if len(done) > 0 {
			if err := q.MarkOutboxPublished(ctx, done); err != nil {
				return err
			}
		}
		published = len(done)
		// Commit what was published even when the batch stopped early; the rest is tried again.
		return nil
	})
	if err == nil {
		err = stopErr
	}
	return published, err
}

// failed counts one failed attempt at e; its attempts-th sets it aside, logged and counted.
func (r *Relay) failed(ctx context.Context, q *outboxstore.Queries, e Event, cause error, attempts int32) error {
	msg := cause.Error()
	dead, err := q.OutboxHandlerFailed(ctx, &msg, attempts, e.ID)
	if err != nil || !dead {
		return err
	}
	r.Log.Error("outbox event set aside", "event_id", e.ID, "type", e.Type, "aggregate_id", e.AggregateID,
		"attempts", attempts, "error", msg)
	if r.Dead != nil {
		r.Dead.WithLabelValues(e.Type).Inc()
	}
	return nil
}

// relay publishes one event and runs its handler, in a span of the event's trace when the change
// that wrote it was sampled.
func (r *Relay) relay(ctx context.Context, e Event) (err error) {
	env, err := events.Build(e)
	if err != nil {
		return err // a payload this build cannot publish: counted as a failed attempt
	}
	if parent, ok := events.RemoteContext(ctx, e.Traceparent, e.Tracestate); ok {
		var span trace.Span
		ctx, span = events.Tracer(r.Tracing).Start(parent, "publish "+e.Type, trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(attribute.String("messaging.system", "nats"),
				attribute.String("messaging.operation.type", "send"),
				attribute.String("messaging.message.id", env.ID), attribute.String("event.type", e.Type),
				attribute.String("event.subject", env.Subject)))
		defer func() {
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			span.End()
		}()
		env.TraceParent, env.TraceState = events.TraceContext(ctx)
	}
	timeout := r.PublishTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	dup, err := r.Broker.Publish(pctx, env)
	cancel()
	if errors.Is(err, events.ErrUnpublishable) {
		return fmt.Errorf("event %d (%s): %w", e.ID, e.Type, err)
	}
	if err != nil {
		if r.BrokerFailures != nil && ctx.Err() == nil {
			r.BrokerFailures.Inc()
		}
		return fmt.Errorf("%w: event %d (%s): %v", ErrBroker, e.ID, e.Type, err)
	}
	r.Log.Debug("outbox event published", "event_id", e.ID, "type", e.Type, "aggregate_id", e.AggregateID,
		"duplicate", dup)
	if h := r.Handlers[e.Type]; h != nil {
		if err := h(ctx, e); err != nil {
			return fmt.Errorf("event %d (%s): %w", e.ID, e.Type, err)
		}
	}
	return nil
}
