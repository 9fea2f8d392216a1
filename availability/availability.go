// Package availability keeps the availability projection: sellable units per SKU, read by the cart
// and product pages instead of the inventory. A trigger on inventory appends a change row in the
// same transaction as every change of a row's sellable count; the Relay, running in the worker,
// folds those rows into the projection by recomputing each touched SKU from the inventory. The
// projection is a hint, seconds behind at most; the order decision is always the inventory's.
package availability

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/marketplace/checkout/db"
)

// Stock hints as the API shows them.
const (
	InStock    = "IN_STOCK"
	LowStock   = "LOW_STOCK"
	OutOfStock = "OUT_OF_STOCK"
	// Unknown: the projection has no row for the SKU (never stocked, or the relay has not caught
	// up with its first stock report).
	Unknown = "UNKNOWN"
)

// DefaultLowStockThreshold: at or below this many sellable units a SKU is LOW_STOCK.
const DefaultLowStockThreshold = 3

// Hint classifies a sellable count for shoppers.
func Hint(available int32, known bool, lowStockThreshold int32) string {
	switch {
	case !known:
		return Unknown
	case available <= 0:
		return OutOfStock
	case available <= lowStockThreshold:
		return LowStock
	}
	return InStock
}

// Observer receives the relay's progress; *metrics.Metrics is one.
type Observer interface {
	AvailabilityApplied(events, skus int)
}

type noObserver struct{}

func (noObserver) AvailabilityApplied(int, int) {}

// Relay applies inventory change events to the projection: at least once (a crash before commit
// leaves the events in place), exactly once in effect (events are consumed in the transaction that
// applies them, and applying is a recomputation from the truth), one relay at a time across
// processes (the cursor row is locked per batch with SKIP LOCKED), and restartable from the
// database alone.
type Relay struct {
	pool *pgxpool.Pool
	q    *db.Queries
	obs  Observer
	log  *slog.Logger

	// PollInterval is how long an idle relay sleeps before looking again.
	PollInterval time.Duration
	// BatchSize is how many change events one transaction consumes.
	BatchSize int32
	// Paused, when set and true, makes the relay apply nothing (ops have turned the cart's stock
	// hints off); the change events wait, and the relay catches up once it is false again.
	Paused func(ctx context.Context) bool
}

// Defaults of the relay.
const (
	DefaultPollInterval = 200 * time.Millisecond
	DefaultBatchSize    = 1000
)

// NewRelay returns a relay with the default poll interval and batch size; obs and log may be nil.
func NewRelay(pool *pgxpool.Pool, obs Observer, log *slog.Logger) *Relay {
	if obs == nil {
		obs = noObserver{}
	}
	if log == nil {
		log = slog.Default()
	}
	return &Relay{pool: pool, q: db.New(pool), obs: obs, log: log,
		PollInterval: DefaultPollInterval, BatchSize: DefaultBatchSize}
}

// BatchResult is what one batch applied. Busy means another relay held the cursor; Paused, that
// the relay is paused.
type BatchResult struct {
	Applied     int
	SKUs        int
	LastEventID int64
	Busy        bool
	Paused      bool
}

// Step applies one batch of change events in one transaction. With nothing to apply it costs one
// index probe and no transaction; paused, nothing.
func (r *Relay) Step(ctx context.Context) (BatchResult, error) {
	var res BatchResult
	if r.Paused != nil && r.Paused(ctx) {
		return BatchResult{Paused: true}, nil
	}
	if waiting, err := r.q.HasInventoryChanges(ctx); err != nil || !waiting {
		return res, err
	}
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		q := r.q.WithTx(tx)
		if _, err := q.LockRelayCursor(ctx); db.NotFound(err) {
			res.Busy = true
			return nil
		} else if err != nil {
			return err
		}
		row, err := q.ApplyInventoryChanges(ctx, r.batchSize())
		if db.NotFound(err) {
			return nil // another relay applied them between the probe and the lock
		}
		if err != nil {
			return err
		}
		res = BatchResult{Applied: int(row.Applied), SKUs: int(row.Skus), LastEventID: row.LastEventID}
		return nil
	})
	if err != nil {
		return BatchResult{}, err
	}
	if res.Applied > 0 {
		r.obs.AvailabilityApplied(res.Applied, res.SKUs)
	}
	return res, nil
}

// Drain applies batches until no change event is left (or another relay holds the cursor).
func (r *Relay) Drain(ctx context.Context) (applied int, err error) {
	for {
		res, err := r.Step(ctx)
		applied += res.Applied
		if err != nil || res.Busy || res.Paused || res.Applied < int(r.batchSize()) {
			return applied, err
		}
	}
}

// Run is the worker loop: it drains, sleeps PollInterval when there is nothing to do, and keeps
// going after database errors (logged, retried after a pause) until ctx ends.
func (r *Relay) Run(ctx context.Context) error {
	interval := r.PollInterval
	if interval <= 0 {
		interval = DefaultPollInterval
	}
	backoff := interval
	for {
		_, err := r.Drain(ctx)
		wait := interval
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			r.log.Error("availability relay batch failed", "error", err)
			backoff = min(backoff*2, 10*time.Second)
			wait = backoff
		default:
			backoff = interval
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

func (r *Relay) batchSize() int32 {
	if r.BatchSize <= 0 {
		return DefaultBatchSize
	}
	return r.BatchSize
}

// Backlog is the relay's lag: change events waiting and the age of the oldest.
func (r *Relay) Backlog(ctx context.Context) (pending int64, oldest time.Duration, err error) {
	row, err := r.q.RelayBacklog(ctx)
	if err != nil {
		return 0, 0, err
	}
	return row.Pending, time.Duration(row.OldestSeconds * float64(time.Second)), nil
}

// Sellable reads the truth for the checkout preview: sellable units per SKU summed over warehouses,
// from the inventory table itself. SKUs without any inventory row are absent from the map.
func Sellable(ctx context.Context, q *db.Queries, skuIDs []int64) (map[int64]int32, error) {
	rows, err := q.SellableBySKU(ctx, skuIDs)
	if err != nil {
		return nil, err
	}
	out := make(map[int64]int32, len(rows))
	for _, r := range rows {
		out[r.SkuID] = r.Available
	}
	return out, nil
}
