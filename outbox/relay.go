// Package outbox publishes the events that state changes wrote to the outbox table in their own
// transaction: at least once, in id order (so in order per order), by one relay at a time.
package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/marketplace/checkout/db"
)

// Event is one outbox row.
type Event struct {
	ID            int64           `json:"id"`
	AggregateType string          `json:"aggregateType"`
	AggregateID   string          `json:"aggregateId"`
	Type          string          `json:"type"`
	Payload       json.RawMessage `json:"payload"`
	CreatedAt     time.Time       `json:"createdAt"`
}

// Handler acts on an event. An error stops the batch there, so that later events wait for it;
// a handler returns nil for events it can never act on.
type Handler func(ctx context.Context, e Event) error

// Relay reads unpublished events in id order and hands each to the handler of its type (events
// without a handler are published as they are: logged and counted).
type Relay struct {
	Pool      *pgxpool.Pool
	Handlers  map[string]Handler
	BatchSize int32
	// Interval is the poll period when the outbox is empty.
	Interval time.Duration
	Log      *slog.Logger
	// Published counts events by type; nil means not counted.
	Published *prometheus.CounterVec
	// Dead counts events set aside after MaxAttempts failures, by type; nil means not counted.
	Dead *prometheus.CounterVec
	// MaxAttempts bounds the attempts at an event whose handler keeps failing (default 20).
	MaxAttempts int32
}

func (r *Relay) maxAttempts() int32 {
	if r.MaxAttempts > 0 {
		return r.MaxAttempts
	}
	return 20
}

// Run relays until ctx ends.
func (r *Relay) Run(ctx context.Context) error {
	interval := r.Interval
	if interval <= 0 {
		interval = 200 * time.Millisecond
	}
	backoff := interval
	for {
		n, err := r.Once(ctx)
		if ctx.Err() != nil {
			return nil
		}
		wait := interval
		if err != nil {
			r.Log.Warn("outbox relay", "error", err)
			backoff = min(backoff*2, 30*time.Second)
			wait = backoff
		} else {
			backoff = interval
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

// Backlog is the relay's lag: events not yet published nor set aside, and the age of the oldest.
func (r *Relay) Backlog(ctx context.Context) (pending int64, oldest time.Duration, err error) {
	row, err := db.New(r.Pool).OutboxLag(ctx)
	if err != nil {
		return 0, 0, err
	}
	return row.Pending, time.Duration(row.OldestSeconds * float64(time.Second)), nil
}

// Once relays one batch and returns how many events it published.
func (r *Relay) Once(ctx context.Context) (int, error) {
	batch := r.BatchSize
	if batch <= 0 {
		batch = 200
	}
	published := 0
	var handlerErr error
	err := pgx.BeginFunc(ctx, r.Pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		locked, err := q.TryLockOutboxRelay(ctx)
		if err != nil || !locked {
			return err
		}
		rows, err := q.UnpublishedOutbox(ctx, batch)
		if err != nil {
			return err
		}
		var done []int64
		var herr error
		for _, row := range rows {
			e := Event{ID: row.ID, AggregateType: row.AggregateType, AggregateID: row.AggregateID, Type: row.EventType,
				Payload: row.Payload, CreatedAt: row.CreatedAt}
			if h := r.Handlers[e.Type]; h != nil {
				if herr = h(ctx, e); herr != nil {
					herr = fmt.Errorf("event %d (%s): %w", e.ID, e.Type, herr)
					msg := herr.Error()
					dead, err := q.OutboxHandlerFailed(ctx, &msg, r.maxAttempts(), e.ID)
					if err != nil {
						return err
					}
					if dead {
						r.Log.Error("outbox event set aside after repeated failures", "event_id", e.ID, "type", e.Type,
							"aggregate_id", e.AggregateID, "error", msg)
						if r.Dead != nil {
							r.Dead.WithLabelValues(e.Type).Inc()
						}
					}
					break
				}
			}
			r.Log.Debug("outbox event published", "event_id", e.ID, "type", e.Type, "aggregate_id", e.AggregateID)
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
		// Commit what was published even when a handler failed; the failed event is retried.
		handlerErr = herr
		return nil
	})
	if err == nil {
		err = handlerErr
	}
	return published, err
}
