package inventory

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/marketplace/checkout/inventory/internal/stockstore"
)

// Combining concurrent reservations and confirms (group commit inside the process).
//
// With synchronous commit, a transaction that changed a row holds that row until its own commit
// record is flushed, so one hot row serves one flush at a time, whatever the concurrency. Reserve
// and Confirm both change their SKU's inventory row. A combiner sends the orders that wait while a
// batch is in flight as the next batch: one transaction (reserve_orders, confirm_orders) that pays
// one flush and one lock acquisition for all of them. Reserve and Confirm each have a combiner of
// their own. There is no timer: an order that finds a free slot and no batch in flight on its SKUs
// is sent at once, so low load adds no wait.
//
// The rules of dispatch:
//   - at most maxInFlight batches are in flight at once (each holds one connection);
//   - batches in flight never share a SKU: an order waits while any of its SKUs is in a batch in
//     flight, so all orders of a hot SKU gather behind its batch and go together in the next one,
//     and batches never wait on each other's rows (a second batch in flight on a hot SKU would
//     only wait on its row, and split its orders into smaller batches that each pay a flush:
//     measured slower, docs/benchmarks.md);
//   - a batch takes every waiting order it may, in arrival order, up to maxBatchOrders, at most
//     one per order id (a second call for the same order waits for the next batch, where it finds
//     what the first one did);
//   - each SKU is first come, first served: an order that must wait holds back the later orders
//     that share a SKU with it, so an order of several SKUs is never overtaken for ever;
//   - a caller that finds nothing in flight and nothing waiting may instead do its order's work
//     alone, outside any batch, without naming its SKUs (goAlone; Confirm does, sparing the read
//     of the order's SKUs at low load): until it ends, every order that comes waits, whatever its
//     SKUs.
//
// A caller whose context ends while its order waits leaves with nothing done. One whose context
// ends while its batch is in flight returns ctx.Err() and the batch may still do the order's work,
// exactly as when a direct transaction's commit races a cancel: both steps are idempotent by order
// id, so the saga's next call finds what was done. For Reserve, its compensation releases the
// reservation, and otherwise the hold expires and the sweeper gives the units back.

// DefaultBatchesInFlight is how many combined batches of each kind (reserve, confirm) may be in
// flight at once when combining is on (New's default).
const DefaultBatchesInFlight = 8

// maxBatchOrders bounds one batch, so that one statement's work under the row locks stays short.
const maxBatchOrders = 256

// batchTimeout bounds one batch statement. A batch serves many callers, so it does not run on any
// one caller's context.
const batchTimeout = 30 * time.Second

// BatchObserver receives the number of orders of each combined reserve batch; an Observer may
// implement it.
type BatchObserver interface {
	ReserveBatch(orders int)
}

// BatchFailureObserver is told of each combined reserve batch that failed as a whole (rolled back
// by a lock timeout, a deadlock, a lost connection), whose orders then go again each on its own; an
// Observer may implement it. A batch never fails in normal work: a failure means a row was held
// elsewhere for seconds, or the lock order is broken.
type BatchFailureObserver interface {
	ReserveBatchFailed(orders int, err error)
}

// ConfirmBatchObserver is BatchObserver for combined confirm batches.
type ConfirmBatchObserver interface {
	ConfirmBatch(orders int)
}

// ConfirmBatchFailureObserver is BatchFailureObserver for combined confirm batches.
type ConfirmBatchFailureObserver interface {
	ConfirmBatchFailed(orders int, err error)
}

// Option configures an Engine.
type Option func(*Engine)

// WithCombining turns combining of concurrent reservations on, with at most maxInFlight batches in
// flight at once, or off (maxInFlight <= 0: every order its own reserve_order transaction).
func WithCombining(maxInFlight int) Option {
	return func(e *Engine) {
		e.comb = nil
		if maxInFlight > 0 {
			e.comb = newCombiner(maxInFlight, e.runReserveBatch)
			if obs, ok := e.metrics.(BatchObserver); ok {
				e.comb.sent = obs.ReserveBatch
			}
			if obs, ok := e.metrics.(BatchFailureObserver); ok {
				e.comb.failed = obs.ReserveBatchFailed
			}
		}
	}
}

// WithConfirmCombining turns combining of concurrent confirms on, with at most maxInFlight batches
// in flight at once, or off (maxInFlight <= 0: every order its own confirm transaction).
func WithConfirmCombining(maxInFlight int) Option {
	return func(e *Engine) {
		e.confirmComb = nil
		if maxInFlight > 0 {
			e.confirmComb = newCombiner(maxInFlight, e.runConfirmBatch)
			if obs, ok := e.metrics.(ConfirmBatchObserver); ok {
				e.confirmComb.sent = obs.ConfirmBatch
			}
			if obs, ok := e.metrics.(ConfirmBatchFailureObserver); ok {
				e.confirmComb.failed = obs.ConfirmBatchFailed
			}
		}
	}
}

// combiner gathers the orders of one kind of work (J: what an order asks, R: its answer) into
// batches. run does one batch's work and hands each caller its outcome, or, when the batch failed
// as a whole, returns its orders to go again each alone (requeue) and the error.
type combiner[J, R any] struct {
	run         batchRunner[J, R]
	maxInFlight int
	sent        func(orders int)            // told of each batch; may be nil
	failed      func(orders int, err error) // told of each batch that failed; may be nil

	mu       sync.Mutex
	queue    []*pending[J, R] // waiting orders, in arrival order
	busy     map[int64]bool   // SKUs of the batches in flight
	inFlight int
	alone    bool // an order of unknown SKUs is in flight on its own (goAlone): nothing else goes
}

// pending is one caller's order waiting for its batch.
type pending[J, R any] struct {
	ctx   context.Context
	order int64
	skus  []int64 // the SKUs whose rows the order's work takes
	job   J
	done  chan outcome[R] // buffered: the batch never waits for a caller that left
	// solo: the order was in a batch that failed as a whole; it now goes in a batch of its own.
	solo bool
}

// outcome is one order's result in a batch. fallback means the batch failed as a whole (and was
// rolled back): the caller does the order's work on its own instead.
type outcome[R any] struct {
	val      R
	err      error
	fallback bool
}

type batchRunner[J, R any] func(ctx context.Context, batch []*pending[J, R]) (requeue []*pending[J, R], err error)

func newCombiner[J, R any](maxInFlight int, run batchRunner[J, R]) *combiner[J, R] {
	return &combiner[J, R]{run: run, maxInFlight: maxInFlight, busy: map[int64]bool{}}
}

// runBatch runs one batch, bounded by batchTimeout, and reports it to the observers. A failure is
// reported unless it is the caller's own context that ended (a batch of one runs on it).
func (c *combiner[J, R]) runBatch(ctx context.Context, batch []*pending[J, R]) (requeue []*pending[J, R]) {
	if c.sent != nil {
		c.sent(len(batch))
	}
	bctx, cancel := context.WithTimeout(ctx, batchTimeout)
	defer cancel()
	requeue, err := c.run(bctx, batch)
	if err != nil && ctx.Err() == nil && c.failed != nil {
		c.failed(len(batch), err)
	}
	return requeue
}

// submit queues the order and waits for its batch. fallback means the caller should do the
// order's work directly.
func (c *combiner[J, R]) submit(ctx context.Context, order int64, skus []int64, job J) (val R, fallback bool, err error) {
	p := &pending[J, R]{ctx: ctx, order: order, skus: skus, job: job, done: make(chan outcome[R], 1)}
	c.mu.Lock()
	var batches [][]*pending[J, R]
	goes := c.mayGo(p)
	c.queue = append(c.queue, p)
	if goes {
		batches = c.dispatch()
	}
	c.mu.Unlock()
	var own []*pending[J, R]
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
		for _, b := range c.finish(own, c.runBatch(ctx, own)) {
			go c.runFrom(b)
		}
	case own != nil:
		// A batch of several callers does not run on any one caller's context: a caller that
		// gives up must not hold the others back, nor wait for their batch.
		go c.runFrom(own)
	}
	select {
	case o := <-p.done:
		return o.val, o.fallback, o.err
	case <-ctx.Done():
		return val, false, ctx.Err()
	}
}

// goAlone lets the caller do one order's work now, outside any batch, when nothing is in flight or
// waiting, as at low load: the caller need not learn the order's SKUs first. The order takes a slot
// and, its SKUs unknown, holds back every order that comes meanwhile, as a batch holds back the
// orders of its SKUs; they go together once endAlone frees it. ok=false: the caller submits the
// order as usual.
func (c *combiner[J, R]) goAlone() (ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inFlight > 0 || len(c.queue) > 0 {
		return false
	}
	c.inFlight++
	c.alone = true
	return true
}

// endAlone frees the slot goAlone took and sends the orders that waited meanwhile.
func (c *combiner[J, R]) endAlone() {
	c.mu.Lock()
	c.alone = false
	c.inFlight--
	batches := c.dispatch()
	c.mu.Unlock()
	for _, b := range batches {
		go c.runFrom(b)
	}
}

// sentAlone tells the observer of an order that went alone and takes its rows: a batch of one.
func (c *combiner[J, R]) sentAlone() {
	if c.sent != nil {
		c.sent(1)
	}
}

// mayGo says whether an order that arrives could go now, that is whether its arrival needs a
// dispatch. After every dispatch no waiting order could go (dispatch takes batches until none forms
// or no slot is free), and an arrival changes nothing for the orders before it; so only the
// arrival can, and only when a slot is free, none of its SKUs is in a batch in flight and no
// waiting order shares one with it. A waiting order whose caller left counts until a dispatch
// drops it: one comes when the batch or the slot it waits for is freed. This spares a scan of the
// whole queue per arrival while a hot SKU's orders gather behind its batch (at 200 callers on
// one SKU that scan was up to a fifth of the process's CPU). c.mu is held; p is not yet queued.
func (c *combiner[J, R]) mayGo(p *pending[J, R]) bool {
	if c.alone || c.inFlight >= c.maxInFlight || c.blocked(p, nil) {
		return false
	}
	for _, q := range c.queue {
		for _, sku := range q.skus {
			if slices.Contains(p.skus, sku) {
				return false
			}
		}
	}
	return true
}

// dispatch forms batches from the waiting orders while slots are free. c.mu is held.
func (c *combiner[J, R]) dispatch() [][]*pending[J, R] {
	var out [][]*pending[J, R]
	for !c.alone && c.inFlight < c.maxInFlight {
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
func (c *combiner[J, R]) take() []*pending[J, R] {
	var batch, rest []*pending[J, R]
	orders := map[int64]bool{}
	mine := map[int64]bool{}    // SKUs this batch takes
	waiting := map[int64]bool{} // SKUs of orders passed over in this scan
	for i, p := range c.queue {
		if err := p.ctx.Err(); err != nil {
			p.done <- outcome[R]{err: err}
			continue
		}
		if len(batch) >= maxBatchOrders || orders[p.order] || c.blocked(p, mine) || behind(p.skus, waiting) ||
			(p.solo && len(batch) > 0) {
			for _, sku := range p.skus {
				waiting[sku] = true
			}
			rest = append(rest, p)
			continue
		}
		if p.solo {
			batch = append(batch, p)
			for _, sku := range p.skus {
				mine[sku] = true
			}
			rest = append(rest, c.queue[i+1:]...)
			break
		}
		orders[p.order] = true
		for _, sku := range p.skus {
			mine[sku] = true
		}
		batch = append(batch, p)
	}
	c.queue = rest
	for sku := range mine {
		c.busy[sku] = true
	}
	return batch
}

// behind says whether an order of skus shares a SKU with an order passed over before it.
func behind(skus []int64, waiting map[int64]bool) bool {
	for _, sku := range skus {
		if waiting[sku] {
			return true
		}
	}
	return false
}

// blocked says whether one of the order's SKUs is in another batch in flight. c.mu is held.
func (c *combiner[J, R]) blocked(p *pending[J, R], mine map[int64]bool) bool {
	for _, sku := range p.skus {
		if c.busy[sku] && !mine[sku] {
			return true
		}
	}
	return false
}

// runFrom runs batch, then, while the queue yields more, the next batch in the same goroutine.
func (c *combiner[J, R]) runFrom(batch []*pending[J, R]) {
	for batch != nil {
		next := c.finish(batch, c.runBatch(context.Background(), batch))
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
func (c *combiner[J, R]) finish(batch, requeue []*pending[J, R]) [][]*pending[J, R] {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range batch {
		for _, sku := range p.skus {
			delete(c.busy, sku)
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

// reserveJob is what a combined reserve needs of an order; reserved is its answer.
type reserveJob struct {
	req   ReserveRequest
	lines []Line
}

type reserved struct {
	res   Reservation
	short *OutOfStockError
}

// reserveCombined queues the order for a combined reserve and waits for its batch. done=false with
// no error and no short means the caller should reserve the order directly.
func (e *Engine) reserveCombined(ctx context.Context, req ReserveRequest, lines []Line) (Reservation, *OutOfStockError, bool, error) {
	skus := make([]int64, len(lines))
	for i, l := range lines {
		skus[i] = l.SKUID
	}
	o, fallback, err := e.comb.submit(ctx, req.OrderID, skus, reserveJob{req: req, lines: lines})
	switch {
	case err != nil:
		return Reservation{}, nil, false, err
	case fallback:
		return Reservation{}, nil, false, nil
	case o.short != nil:
		return Reservation{}, o.short, false, nil
	}
	return o.res, nil, true, nil
}

// runReserveBatch reserves one batch in one transaction and hands each caller its order's result.
// When a batch of several orders fails as a whole (rolled back: a row held elsewhere past the
// batch's lock timeout, a broken connection), it hands nobody anything and returns the orders, to
// be queued again each alone: through the combiner, so that at most its slots' connections wait on
// a held row and only the orders of that row's SKU wait behind them, while the others go on.
func (e *Engine) runReserveBatch(ctx context.Context, batch []*pending[reserveJob, reserved]) (requeue []*pending[reserveJob, reserved], err error) {
	if len(batch) == 1 {
		// Alone: reserve_order (with its single-line fast path) costs less than the batch statement.
		b := batch[0]
		res, short, done, err := e.reserveOnce(ctx, b.job.req, b.job.lines)
		if err != nil || (!done && short == nil) {
			b.done <- outcome[reserved]{fallback: true}
			return nil, err
		}
		b.done <- outcome[reserved]{val: reserved{res: res, short: short}}
		return nil, nil
	}
	var p stockstore.ReserveOrdersParams
	index := make(map[int64]int, len(batch))
	for i, b := range batch {
		req := b.job.req
		index[req.OrderID] = i
		p.OrderIds = append(p.OrderIds, req.OrderID)
		p.Lats = append(p.Lats, req.ShipTo.Lat)
		p.Lons = append(p.Lons, req.ShipTo.Lon)
		p.HoldSeconds = append(p.HoldSeconds, req.Hold.Seconds())
		for _, ln := range b.job.lines {
			p.LineOrders = append(p.LineOrders, int32(i+1))
			p.SkuIds = append(p.SkuIds, ln.SKUID)
			p.Quantities = append(p.Quantities, ln.Quantity)
		}
	}
	// One statement writes several orders' stock events: it carries no one caller's trace.
	rows, err := stockstore.New(e.pool).ReserveOrders(ctx, p)
	if err != nil {
		// Rolled back as a whole (or, if the commit's answer was lost, committed: reserving the
		// order again finds its reservation by order id).
		return batch, err
	}
	out := make([]outcome[reserved], len(batch))
	seen := make([]bool, len(batch))
	for _, r := range rows {
		i, ok := index[r.OrderID]
		if !ok {
			continue
		}
		seen[i] = true
		o := &out[i].val
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
			out[i] = outcome[reserved]{err: fmt.Errorf("reserve order %d: no result in its batch", b.order)}
		case out[i].val.short != nil:
			out[i].val.res = Reservation{}
		default:
			if err := covers(b.job.lines, out[i].val.res.Allocations); err != nil {
				out[i] = outcome[reserved]{err: err}
			}
		}
		b.done <- out[i]
	}
	return nil, nil
}
