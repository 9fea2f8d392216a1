package availability

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/marketplace/checkout/availability/internal/availabilitystore"
	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/events"
)

// Observer receives the projector's progress; *metrics.Metrics is one.
type Observer interface {
	// AvailabilityApplied counts a batch: its events and the SKUs whose figure changed.
	AvailabilityApplied(events, skus int)
	// AvailabilityLag is one event's end-to-end lag: from the change to the projection's commit.
	AvailabilityLag(d time.Duration)
}

type noObserver struct{}

func (noObserver) AvailabilityApplied(int, int)    {}
func (noObserver) AvailabilityLag(d time.Duration) {}

// ConsumerName is the projector's durable consumer on the checkout's stream.
const ConsumerName = "availability"

// Projector applies stock.changed events to the projection: a durable pull consumer on the
// broker, shared by every worker (the broker hands each batch to one of them). Each batch is one
// transaction: every (SKU, warehouse) row takes the newest event it has not seen (by event id, so
// a redelivery or a late copy changes nothing), and the touched SKUs' sums are written; the events
// are acknowledged after the commit. A worker that dies before acknowledging leaves its batch to be
// delivered again. Paused (the cart's stock hints switched off), it fetches nothing: the events
// wait on the stream.
type Projector struct {
	pool   *pgxpool.Pool
	broker *events.Broker
	obs    Observer
	log    *slog.Logger

	// BatchSize is how many events one fetch and one transaction take.
	BatchSize int
	// FetchWait is how long an idle fetch waits for events.
	FetchWait time.Duration
	// Paused, when set and true, makes the projector fetch nothing.
	Paused func(ctx context.Context) bool

	consumer *events.Consumer
}

// Defaults of the projector.
const (
	DefaultBatchSize = 500
	DefaultFetchWait = time.Second
)

// NewProjector returns a projector of the broker's stock events; obs and log may be nil.
func NewProjector(pool *pgxpool.Pool, broker *events.Broker, obs Observer, log *slog.Logger) *Projector {
	if obs == nil {
		obs = noObserver{}
	}
	if log == nil {
		log = slog.Default()
	}
	return &Projector{pool: pool, broker: broker, obs: obs, log: log, BatchSize: DefaultBatchSize, FetchWait: DefaultFetchWait,
		consumer: &events.Consumer{Broker: broker, Config: ConsumerConfig}}
}

// ConsumerConfig is the projector's durable consumer: every stock.changed event the stream keeps,
// each acknowledged once applied, redelivered after 30 s without.
func ConsumerConfig(prefix string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{Durable: ConsumerName, Description: "The availability projection (cart stock hints)",
		FilterSubject: events.Subject(prefix, events.StockChanged), DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: -1, MaxAckPending: 20_000}
}

// Step fetches one batch and applies it; it returns how many events it applied.
func (p *Projector) Step(ctx context.Context) (int, error) {
	if p.Paused != nil && p.Paused(ctx) {
		return 0, nil
	}
	return p.consumer.Step(ctx, p.batchSize(), p.fetchWait(), p.apply)
}

// apply writes a batch in one transaction (acknowledged by Step once it returns).
func (p *Projector) apply(ctx context.Context, msgs []events.Message) error {
	var args availabilitystore.ApplyStockEventsParams
	var times []time.Time
	for _, m := range msgs {
		e, err := events.Decode(m.Data())
		var s events.Stock
		if err == nil {
			err = json.Unmarshal(e.Data, &s)
		}
		id, perr := strconv.ParseInt(e.ID, 10, 64)
		if err != nil || perr != nil || e.Type != events.StockChanged {
			// Never applicable: acknowledged so that it does not come back, and logged.
			p.log.Error("availability: a message that is not a stock.changed event", "subject", m.Subject(), "error", err)
			_ = m.Term()
			continue
		}
		args.SkuIds = append(args.SkuIds, s.SKUID)
		args.WarehouseIds = append(args.WarehouseIds, s.WarehouseID)
		args.Sellable = append(args.Sellable, s.Sellable)
		args.EventIds = append(args.EventIds, id)
		times = append(times, e.Time)
	}
	var skus []int64
	// BEGIN and the projection's lock go with the events' apply (db.InTx).
	err := db.InTx(ctx, p.pool, func(tx db.DBTX) error {
		q := availabilitystore.New(tx)
		if err := q.LockProjection(ctx); err != nil {
			return err
		}
		changed, err := q.ApplyStockEvents(ctx, args)
		if err != nil {
			return err
		}
		slices.Sort(changed)
		skus = slices.Compact(changed)
		if len(skus) == 0 {
			return nil
		}
		_, err = q.RefreshSKUAvailability(ctx, skus)
		return err
	})
	if err != nil {
		return err // not acknowledged: the broker delivers the batch again
	}
	now := time.Now()
	for _, t := range times {
		p.obs.AvailabilityLag(now.Sub(t))
	}
	p.obs.AvailabilityApplied(len(args.EventIds), len(skus))
	return nil
}

// Run is the worker loop: it applies batches as they come and keeps going after failures (logged,
// retried after a pause) until ctx ends.
func (p *Projector) Run(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	for {
		if p.Paused != nil && p.Paused(ctx) {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(p.fetchWait()):
			}
			continue
		}
		_, err := p.Step(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			p.log.Warn("availability projector: waiting for the broker", "error", err)
			p.consumer.Forget()
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

// Backlog is the projector's lag: stock events on the stream not yet applied, and the age of the
// oldest of them (0 when none).
func (p *Projector) Backlog(ctx context.Context) (pending int64, oldest time.Duration, err error) {
	c, err := p.consumer.Ensure(ctx)
	if err != nil {
		return 0, 0, err
	}
	info, err := c.Info(ctx)
	if err != nil {
		p.consumer.Forget()
		return 0, 0, err
	}
	pending = int64(info.NumPending) + int64(info.NumAckPending)
	if pending == 0 {
		return 0, 0, nil
	}
	prefix := p.broker.Options().Prefix
	s, err := p.broker.JetStream().Stream(ctx, events.StreamName(prefix))
	if err != nil {
		return pending, 0, err
	}
	m, err := s.GetMsg(ctx, info.AckFloor.Stream+1, jetstream.WithGetMsgSubject(events.Subject(prefix, events.StockChanged)))
	if err != nil {
		return pending, 0, err
	}
	e, err := events.Decode(m.Data)
	if err != nil {
		return pending, 0, err
	}
	return pending, max(time.Since(e.Time), 0), nil
}

func (p *Projector) batchSize() int {
	if p.BatchSize <= 0 {
		return DefaultBatchSize
	}
	return p.BatchSize
}

func (p *Projector) fetchWait() time.Duration {
	if p.FetchWait <= 0 {
		return DefaultFetchWait
	}
	return p.FetchWait
}

// Rebuild recomputes the whole projection from the inventory, under the projector's lock: what
// ops do when the projector fell further behind than the stream keeps (events lost to it).
func Rebuild(ctx context.Context, pool *pgxpool.Pool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		q := availabilitystore.New(tx)
		if err := q.LockProjection(ctx); err != nil {
			return err
		}
		return q.RebuildAvailability(ctx)
	})
}
