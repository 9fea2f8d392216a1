package inventory

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/marketplace/checkout/inventory/internal/stockstore"
)

// Combining concurrent reservations (group commit inside the process).
//
// With synchronous commit, a transaction that reserved on a row holds that row until its own
// commit record is flushed, so one hot row serves one flush at a time, whatever the concurrency.
// The combiner sends the orders that wait while a batch is in flight as the next batch: one
// transaction (reserve_orders) that pays one flush and one lock acquisition for all of them.
// There is no timer: an order that finds a free slot and no batch in flight on its SKUs is sent
// at once, so low load adds no wait.
//
// The rules of dispatch:
//   - at most maxInFlight batches are in flight at once (each holds one connection);
//   - batches in flight never share a SKU: an order waits while any of its SKUs is in a batch in
//     flight, so all orders of a hot SKU gather behind its batch and go together in the next one,
//     and batches never wait on each other's rows;
//   - a batch takes every waiting order it may, in arrival order, up to maxBatchOrders, at most
//     one per order id (a second call for the same order waits for the next batch, where it finds
//     the first one's reservation);
//   - each SKU is first come, first served: an order that must wait holds back the later orders
//     that share a SKU with it, so an order of several SKUs is never overtaken for ever.
//
// A caller whose context ends while its order waits leaves with nothing reserved. One whose context
// ends while its batch is in flight returns ctx.Err() and the batch may still reserve for the
// order, exactly as when a direct reserve_order's commit races a cancel: the saga's next Reserve
// of the same order returns that reservation (idempotent by order id), its compensation releases
// it, and otherwise the hold expires and the sweeper gives the units back.

// DefaultBatchesInFlight is how many combined batches may be in flight at once when combining is
// on (New's default).
const DefaultBatchesInFlight = 8

// maxBatchOrders bounds one batch, so that one statement's work under the row locks stays short.
const maxBatchOrders = 256

// batchTimeout bounds one batch statement. A batch serves many callers, so it does not run on any
// one caller's context.
const batchTimeout = 30 * time.Second

// BatchObserver receives the number of orders of each combined batch; an Observer may implement it.
type BatchObserver interface {
	ReserveBatch(orders int)
}

// BatchFailureObserver is told of each combined batch that failed as a whole (rolled back by a
// lock timeout, a deadlock, a lost connection), whose orders then go again each on its own; an
// Observer may implement it. A batch never fails in normal work: a failure means a row was held
// elsewhere for seconds, or the lock order is broken.
type BatchFailureObserver interface {
	ReserveBatchFailed(orders int, err error)
}

// Option configures an Engine.
type Option func(*Engine)

// WithCombining turns combining of concurrent reservations on, with at most maxInFlight batches in
// flight at once, or off (maxInFlight <= 0: every order its own reserve_order transaction).
func WithCombining(maxInFlight int) Option {
	return func(e *Engine) {
		e.comb = nil
		if maxInFlight > 0 {
			e.comb = newCombiner(e, maxInFlight)
		}
	}
}

type combiner struct {
	e           *Engine
	batchObs    BatchObserver
	failObs     BatchFailureObserver
	maxInFlight int

	mu       sync.Mutex
	queue    []*pending     // waiting orders, in arrival order
	busy     map[int64]bool // SKUs of the batches in flight
	inFlight int
}

// pending is one caller's order waiting for its batch.
type pending struct {
	ctx   context.Context
	req   ReserveRequest
	lines []Line
	done  chan outcome // buffered: the batch never waits for a caller that left
	// solo: the order was in a batch that failed as a whole; it now goes in a batch of its own.
	solo bool
}

// outcome is one order's result in a batch. fallback means the batch failed as a whole (and was
// rolled back): the caller reserves the order on its own instead.
type outcome struct {
	res      Reservation
	short    *OutOfStockError
	err      error
	fallback bool
}

func newCombiner(e *Engine, maxInFlight int) *combiner {
	c := &combiner{e: e, maxInFlight: maxInFlight, busy: map[int64]bool{}}
	if b, ok := e.metrics.(BatchObserver); ok {
		c.batchObs = b
	}
	if f, ok := e.metrics.(BatchFailureObserver); ok {
		c.failObs = f
	}
	return c
}

// reserve queues the order and waits for its batch. done=false with no error and no short means
// the caller should reserve the order directly.
func (c *combiner) reserve(ctx context.Context, req ReserveRequest, lines []Line) (Reservation, *OutOfStockError, bool, error) {
	p := &pending{ctx: ctx, req: req, lines: lines, done: make(chan outcome, 1)}
	c.mu.Lock()
	c.queue = append(c.queue, p)
	batches := c.dispatch()
	c.mu.Unlock()
	var own []*pending
	for _, b := range batches {
		if slices.Contains(b, p) {
			own = b
			continue
		}
		go c.runFrom(b)
	}
	switch {
	case len(own) == 1:
		// This caller's order goes now and alone (low load): run it here, on the caller's context
		// as the direct path does, rather than hand it to another goroutine.
		for _, b := range c.finish(own, c.run(ctx, own)) {
			go c.runFrom(b)
		}
	case own != nil:
		// A batch of several callers does not run on any one caller's context: a caller that
		// gives up must not hold the others back, nor wait for their batch.
		go c.runFrom(own)
	}
	select {
	case o := <-p.done:
		switch {
		case o.fallback:
			return Reservation{}, nil, false, nil
		case o.err != nil:
			return Reservation{}, nil, false, o.err
		case o.short != nil:
			return Reservation{}, o.short, false, nil
		}
		return o.res, nil, true, nil
	case <-ctx.Done():
		return Reservation{}, nil, false, ctx.Err()
	}
}

// dispatch forms batches from the waiting orders while slots are free. c.mu is held.
func (c *combiner) dispatch() [][]*pending {
	var out [][]*pending
	for c.inFlight < c.maxInFlight {
		b := c.take()
		if len(b) == 0 {
			break
		}
		c.inFlight++
		out = append(out, b)
	}
	return out
}

// take removes the next batch from the queue and marks its SKUs busy; callers that left are
// dropped. Each SKU is served first come, first served: once an order is passed over, no later
// order that shares a SKU with it may go before it, so an order of several SKUs that are busy by
// turns cannot be overtaken for ever. c.mu is held.
func (c *combiner) take() []*pending {
	var batch, rest []*pending
	orders := map[int64]bool{}
	mine := map[int64]bool{}    // SKUs this batch takes
	waiting := map[int64]bool{} // SKUs of orders passed over in this scan
	for i, p := range c.queue {
		if err := p.ctx.Err(); err != nil {
			p.done <- outcome{err: err}
			continue
		}
		if len(batch) >= maxBatchOrders || orders[p.req.OrderID] || c.blocked(p, mine) || behind(p, waiting) ||
			(p.solo && len(batch) > 0) {
			for _, l := range p.lines {
				waiting[l.SKUID] = true
			}
			rest = append(rest, p)
			continue
		}
		if p.solo {
			batch = append(batch, p)
			for _, l := range p.lines {
				mine[l.SKUID] = true
			}
			rest = append(rest, c.queue[i+1:]...)
			break
		}
		orders[p.req.OrderID] = true
		for _, l := range p.lines {
			mine[l.SKUID] = true
		}
		batch = append(batch, p)
	}
	c.queue = rest
	for sku := range mine {
		c.busy[sku] = true
	}
	return batch
}

// behind says whether the order shares a SKU with an order passed over before it.
func behind(p *pending, waiting map[int64]bool) bool {
	for _, l := range p.lines {
		if waiting[l.SKUID] {
			return true
		}
	}
	return false
}

// blocked says whether one of the order's SKUs is in another batch in flight. c.mu is held.
func (c *combiner) blocked(p *pending, mine map[int64]bool) bool {
	for _, l := range p.lines {
		if c.busy[l.SKUID] && !mine[l.SKUID] {
			return true
		}
	}
	return false
}

// runFrom runs batch, then, while the queue yields more, the next batch in the same goroutine.
func (c *combiner) runFrom(batch []*pending) {
	for batch != nil {
		next := c.finish(batch, c.run(context.Background(), batch))
		batch = nil
		if len(next) > 0 {
			batch = next[0]
			for _, b := range next[1:] {
				go c.runFrom(b)
			}
		}
	}
}

// finish frees the slot and the SKUs of a batch that ran, puts the orders of a batch that failed
// back at the head of the queue, each to go alone, and returns the batches that can go now.
func (c *combiner) finish(batch, requeue []*pending) [][]*pending {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range batch {
		for _, l := range p.lines {
			delete(c.busy, l.SKUID)
		}
	}
	c.inFlight--
	if len(requeue) > 0 {
		for _, p := range requeue {
			p.solo = true
		}
		c.queue = append(slices.Clone(requeue), c.queue...)
	}
	return c.dispatch()
}

// run reserves one batch in one transaction and hands each caller its order's result. When a
// batch of several orders fails as a whole (rolled back: a row held elsewhere past the batch's
// lock timeout, a broken connection), it hands nobody anything and returns the orders, to be
// queued again each alone: through the combiner, so that at most its slots' connections wait on
// a held row and only the orders of that row's SKU wait behind them, while the others go on.
func (c *combiner) run(ctx context.Context, batch []*pending) (requeue []*pending) {
	if c.batchObs != nil {
		c.batchObs.ReserveBatch(len(batch))
	}
	caller := ctx
	ctx, cancel := context.WithTimeout(ctx, batchTimeout)
	defer cancel()
	if len(batch) == 1 {
		// Alone: reserve_order (with its single-line fast path) costs less than the batch statement.
		b := batch[0]
		res, short, done, err := c.e.reserveOnce(ctx, b.req, b.lines)
		if err != nil && caller.Err() == nil {
			c.failed(1, err)
		}
		if err != nil || (!done && short == nil) {
			b.done <- outcome{fallback: true}
			return nil
		}
		b.done <- outcome{res: res, short: short}
		return nil
	}
	var p stockstore.ReserveOrdersParams
	index := make(map[int64]int, len(batch))
	for i, b := range batch {
		index[b.req.OrderID] = i
		p.OrderIds = append(p.OrderIds, b.req.OrderID)
		p.Lats = append(p.Lats, b.req.ShipTo.Lat)
		p.Lons = append(p.Lons, b.req.ShipTo.Lon)
		p.HoldSeconds = append(p.HoldSeconds, b.req.Hold.Seconds())
		for _, ln := range b.lines {
			p.LineOrders = append(p.LineOrders, int32(i+1))
			p.SkuIds = append(p.SkuIds, ln.SKUID)
			p.Quantities = append(p.Quantities, ln.Quantity)
		}
	}
	// One statement writes several orders' stock events: it carries no one caller's trace.
	rows, err := stockstore.New(c.e.pool).ReserveOrders(ctx, p)
	if err != nil {
		c.failed(len(batch), err)
		// Rolled back as a whole (or, if the commit's answer was lost, committed: reserving the
		// order again finds its reservation by order id).
		return batch
	}
	out := make([]outcome, len(batch))
	seen := make([]bool, len(batch))
	for _, r := range rows {
		i, ok := index[r.OrderID]
		if !ok {
			continue
		}
		seen[i] = true
		o := &out[i]
		if r.Kind == "short" {
			if o.short == nil {
				o.short = &OutOfStockError{}
			}
			o.short.Lines = append(o.short.Lines, ShortLine{SKUID: r.SkuID, Requested: r.Quantity, Available: r.Available})
			continue
		}
		o.res.OrderID = r.OrderID
		o.res.Allocations = append(o.res.Allocations, Allocation{ReservationID: r.ReservationID, SKUID: r.SkuID,
			WarehouseID: r.WarehouseID, Quantity: r.Quantity, Status: r.Status})
		o.res.ExpiresAt = r.ExpiresAt
	}
	for i, b := range batch {
		switch {
		case !seen[i]:
			out[i] = outcome{err: fmt.Errorf("reserve order %d: no result in its batch", b.req.OrderID)}
		case out[i].short != nil:
			out[i].res = Reservation{}
		default:
			if err := covers(b.lines, out[i].res.Allocations); err != nil {
				out[i] = outcome{err: err}
			}
		}
		b.done <- out[i]
	}
	return nil
}

// failed reports a batch that failed as a whole.
func (c *combiner) failed(orders int, err error) {
	if c.failObs != nil {
		c.failObs.ReserveBatchFailed(orders, err)
	}
}
