// Package inventory is the stock engine: reserve at order time, confirm, release, sweep expired
// holds, apply sellers' stock reports and reconcile. Its rules are the conditional statements in
// internal/stockstore/queries/inventory.sql, the area's store; this package chooses warehouses, orders the locks and runs the
// transactions around them.
package inventory

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/inventory/internal/stockstore"
)

// Reservation statuses, as stored.
const (
	StatusActive    = "ACTIVE"
	StatusConfirmed = "CONFIRMED"
	StatusReleased  = "RELEASED"
)

// Engine runs the inventory rules on one PostgreSQL database.
type Engine struct {
	pool    *pgxpool.Pool
	q       *stockstore.Queries
	metrics Observer
	// comb combines concurrent reservations into shared transactions; nil: each order its own.
	comb *combiner[reserveJob, reserved]
	// confirmComb does the same for confirms.
	confirmComb *combiner[struct{}, ConfirmResult]
}

// Observer receives the outcomes the engine reports as metrics; nil means none.
type Observer interface {
	ReserveResult(result string)
}

type noObserver struct{}

func (noObserver) ReserveResult(string) {}

// New returns an engine on pool. Without options it combines concurrent reservations and
// concurrent confirms, with up to DefaultBatchesInFlight batches of each in flight (see
// combiner.go); WithCombining(0) and WithConfirmCombining(0) turn them off.
func New(pool *pgxpool.Pool, obs Observer, opts ...Option) *Engine {
	if obs == nil {
		obs = noObserver{}
	}
	e := &Engine{pool: pool, q: stockstore.New(db.Traced(pool)), metrics: obs}
	WithCombining(DefaultBatchesInFlight)(e)
	WithConfirmCombining(DefaultBatchesInFlight)(e)
	for _, o := range opts {
		o(e)
	}
	return e
}

// Line is one SKU of an order and the units wanted.
type Line struct {
	SKUID    int64 `json:"skuId"`
	Quantity int32 `json:"quantity"`
}

// Location is a point on the map, for the nearest-warehouse rule.
type Location struct {
	Lat float64 `json:"lat"`
	Lon float64 `json:"lon"`
}

// ReserveRequest asks for all of an order's lines, or none.
type ReserveRequest struct {
	OrderID int64
	Lines   []Line
	ShipTo  Location
	Hold    time.Duration
}

// Allocation is the part of a line one warehouse holds for the order.
type Allocation struct {
	ReservationID int64  `json:"reservationId"`
	SKUID         int64  `json:"skuId"`
	WarehouseID   int32  `json:"warehouseId"`
	Quantity      int32  `json:"quantity"`
	Status        string `json:"status"`
}

// Reservation is what an order holds.
type Reservation struct {
	OrderID     int64        `json:"orderId"`
	Allocations []Allocation `json:"allocations"`
	ExpiresAt   time.Time    `json:"expiresAt"`
}

// ShortLine names a line that cannot be served: the units requested and those available.
type ShortLine struct {
	SKUID     int64 `json:"skuId"`
	Requested int32 `json:"requested"`
	Available int32 `json:"available"`
}

// OutOfStockError refuses a reservation and names every short line.
type OutOfStockError struct {
	Lines []ShortLine
}

func (e *OutOfStockError) Error() string {
	return fmt.Sprintf("out of stock: %d line(s) short", len(e.Lines))
}

// Sentinel errors of the engine.
var (
	// ErrInvalidRequest: the request itself is wrong (no lines, quantity not positive, ...).
	ErrInvalidRequest = errors.New("invalid inventory request")
	// ErrNoReservation: the order holds no reservation at all.
	ErrNoReservation = errors.New("order has no reservation")
	// ErrContention: the stock moved under every attempt; the caller may retry.
	ErrContention = errors.New("inventory contention: retry")
)

// NotActiveError refuses a confirm: some of the order's reservation is no longer ACTIVE
// (released by expiry, a seller shortfall or a cancel), so the order cannot be fulfilled.
type NotActiveError struct {
	OrderID  int64
	Released int
}

func (e *NotActiveError) Error() string {
	return fmt.Sprintf("order %d: %d reservation(s) already released", e.OrderID, e.Released)
}

// maxReserveAttempts bounds re-planning when the stock moves between reading it and reserving.
const maxReserveAttempts = 8

// Reserve holds every line of the order in one transaction, or none. A repeat for the same order
// returns what the order already holds and changes nothing.
func (e *Engine) Reserve(ctx context.Context, req ReserveRequest) (Reservation, error) {
	lines, err := normalise(req)
	if err != nil {
		e.metrics.ReserveResult("invalid")
		return Reservation{}, err
	}
	for attempt := 0; attempt < maxReserveAttempts; attempt++ {
		var res Reservation
		var short *OutOfStockError
		var done bool
		if attempt == 0 && e.comb != nil {
			// done=false without an error: the batch failed as a whole; reserve on our own.
			res, short, done, err = e.reserveCombined(ctx, req, lines)
		} else {
			res, short, done, err = e.reserveOnce(ctx, req, lines)
		}
		switch {
		case err != nil:
			e.metrics.ReserveResult("error")
			return Reservation{}, err
		case short != nil:
			e.metrics.ReserveResult("out_of_stock")
			return Reservation{}, short
		case done:
			e.metrics.ReserveResult("reserved")
			return res, nil
		}
	}
	e.metrics.ReserveResult("contention")
	return Reservation{}, ErrContention
}

// reserveOnce runs reserve_order, which chooses the warehouses and reserves in one statement.
// done=false means the stock moved between its choice and its reservation; the caller tries again.
func (e *Engine) reserveOnce(ctx context.Context, req ReserveRequest, lines []Line) (res Reservation, short *OutOfStockError, done bool, err error) {
	p := stockstore.ReserveOrderParams{OrderID: req.OrderID, Lat: req.ShipTo.Lat, Lon: req.ShipTo.Lon,
		HoldSeconds: req.Hold.Seconds()}
	for _, l := range lines {
		p.SkuIds = append(p.SkuIds, l.SKUID)
		p.Quantities = append(p.Quantities, l.Quantity)
	}
	rows, err := e.q.ReserveOrder(ctx, p)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == stockMovedCode {
		return res, nil, false, nil
	}
	if err != nil {
		return res, nil, false, err
	}
	res.OrderID = req.OrderID
	for _, r := range rows {
		if r.Kind == "short" {
			if short == nil {
				short = &OutOfStockError{}
			}
			short.Lines = append(short.Lines, ShortLine{SKUID: r.SkuID, Requested: r.Quantity, Available: r.Available})
			continue
		}
		res.Allocations = append(res.Allocations, Allocation{ReservationID: r.ReservationID, SKUID: r.SkuID,
			WarehouseID: r.WarehouseID, Quantity: r.Quantity, Status: r.Status})
		res.ExpiresAt = r.ExpiresAt
	}
	if short != nil {
		return Reservation{}, short, false, nil
	}
	if err := covers(lines, res.Allocations); err != nil {
		return Reservation{}, nil, false, err
	}
	return res, nil, true, nil
}

// covers checks that the allocations add up to every line exactly: a reservation is never less
// (or more) than the order asked for.
func covers(lines []Line, allocs []Allocation) error {
	got := map[int64]int64{}
	for _, a := range allocs {
		got[a.SKUID] += int64(a.Quantity)
	}
	for _, l := range lines {
		if got[l.SKUID] != int64(l.Quantity) {
			return fmt.Errorf("reservation of sku %d holds %d units, the order asked for %d", l.SKUID, got[l.SKUID], l.Quantity)
		}
	}
	if len(got) != len(lines) {
		return fmt.Errorf("reservation holds %d SKUs, the order asked for %d", len(got), len(lines))
	}
	return nil
}

// stockMovedCode is the SQLSTATE reserve_order raises when a chosen allocation no longer fits.
const stockMovedCode = "CK001"

// normalise validates a request and merges repeated SKUs into one line.
func normalise(req ReserveRequest) ([]Line, error) {
	if req.OrderID <= 0 || len(req.Lines) == 0 || req.Hold <= 0 {
		return nil, fmt.Errorf("%w: order id, lines and hold are required", ErrInvalidRequest)
	}
	sum := map[int64]int64{}
	for _, l := range req.Lines {
		if l.Quantity <= 0 || l.SKUID <= 0 {
			return nil, fmt.Errorf("%w: sku %d quantity %d", ErrInvalidRequest, l.SKUID, l.Quantity)
		}
		sum[l.SKUID] += int64(l.Quantity)
	}
	lines := make([]Line, 0, len(sum))
	for sku, q := range sum {
		if q > math.MaxInt32 {
			return nil, fmt.Errorf("%w: sku %d quantity too large", ErrInvalidRequest, sku)
		}
		lines = append(lines, Line{SKUID: sku, Quantity: int32(q)})
	}
	sort.Slice(lines, func(i, j int) bool { return lines[i].SKUID < lines[j].SKUID })
	return lines, nil
}

func fromRows(orderID int64, rows []stockstore.ReservationsOfOrderRow) Reservation {
	res := Reservation{OrderID: orderID}
	for _, r := range rows {
		res.Allocations = append(res.Allocations, Allocation{ReservationID: r.ID, SKUID: r.SkuID,
			WarehouseID: r.WarehouseID, Quantity: r.Quantity, Status: r.Status})
		res.ExpiresAt = r.ExpiresAt
	}
	return res
}

// Get returns what the order holds, in any status.
func (e *Engine) Get(ctx context.Context, orderID int64) (Reservation, error) {
	rows, err := e.q.ReservationsOfOrder(ctx, orderID)
	if err != nil {
		return Reservation{}, err
	}
	if len(rows) == 0 {
		return Reservation{}, ErrNoReservation
	}
	return fromRows(orderID, rows), nil
}

// ConfirmResult says what a confirm changed.
type ConfirmResult struct {
	Confirmed int  `json:"confirmed"`
	Already   bool `json:"already"`
}

// Confirm moves all of the order's reservations ACTIVE → CONFIRMED, or none: when any of them was
// already released, the rest are released too (nothing stays stranded) and a *NotActiveError
// says the order cannot be fulfilled. A repeat after success changes nothing. With confirm
// combining on, concurrent confirms of a SKU share one transaction (confirmbatch.go), each order
// still decided on its own.
func (e *Engine) Confirm(ctx context.Context, orderID int64) (ConfirmResult, error) {
	if e.confirmComb != nil {
		if e.confirmComb.goAlone() {
			// Nothing to combine with (low load): confirm at once, without reading the order's SKUs.
			defer e.confirmComb.endAlone()
			return e.confirmOnce(ctx, orderID, e.confirmComb.sentAlone)
		}
		res, fallback, err := e.confirmCombined(ctx, orderID)
		if !fallback {
			return res, err
		}
	}
	return e.confirmOnce(ctx, orderID, nil)
}

// confirmOnce is one order's confirm in a transaction of its own. takesRows, when not nil, is
// called once the order is found to have ACTIVE reservations, before their inventory rows are taken.
func (e *Engine) confirmOnce(ctx context.Context, orderID int64, takesRows func()) (ConfirmResult, error) {
	var out ConfirmResult
	err := e.inTx(ctx, func(q *stockstore.Queries) error {
		rows, err := q.LockReservationsOfOrder(ctx, orderID)
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			return ErrNoReservation
		}
		var active []stockstore.LockReservationsOfOrderRow
		released := 0
		for _, r := range rows {
			switch r.Status {
			case StatusActive:
				active = append(active, r)
			case StatusReleased:
				released++
			}
		}
		if len(active) > 0 && takesRows != nil {
			takesRows()
		}
		if released > 0 {
			if len(active) > 0 {
				if err := releaseLocked(ctx, q, active); err != nil {
					return err
				}
			}
			return &NotActiveError{OrderID: orderID, Released: released}
		}
		if len(active) == 0 {
			out.Already = true
			return nil
		}
		skus, whs, ids := keys(active)
		if err := q.LockInventoryRows(ctx, skus, whs); err != nil {
			return err
		}
		done, err := q.ConfirmReservations(ctx, ids)
		if err != nil {
			return err
		}
		var units, want int32
		for _, d := range done {
			units += d.Qty
		}
		for _, a := range active {
			want += a.Quantity
		}
		if units != want {
			return fmt.Errorf("confirm order %d: moved %d of %d units", orderID, units, want)
		}
		out.Confirmed = len(active)
		return nil
	})
	return out, err
}

// Release gives back whatever the order still holds ACTIVE. It returns how many reservations it
// released; a repeat releases none.
func (e *Engine) Release(ctx context.Context, orderID int64) (int, error) {
	n := 0
	err := e.inTx(ctx, func(q *stockstore.Queries) error {
		rows, err := q.LockReservationsOfOrder(ctx, orderID)
		if err != nil {
			return err
		}
		var active []stockstore.LockReservationsOfOrderRow
		for _, r := range rows {
			if r.Status == StatusActive {
				active = append(active, r)
			}
		}
		if len(active) == 0 {
			return nil
		}
		n = len(active)
		return releaseLocked(ctx, q, active)
	})
	return n, err
}

// Expiry is what a hold's expiry released. Until is set when the order still holds stock that
// has not expired (its shopper extended the hold, or the database's clock is behind the caller's):
// the hold runs on to that time, which is Left from now by the database's clock.
type Expiry struct {
	Released int           `json:"released"`
	Until    *time.Time    `json:"until,omitempty"`
	Left     time.Duration `json:"left,omitempty"`
}

// ReleaseExpired is the hold's expiry: it releases the order's ACTIVE reservations that have
// expired and keeps the ones an extension moved past now. Both sides are decided under the
// reservations' row locks by the database's clock, so an extension and the expiry never both
// win: the extension moves only unexpired rows (orders.sql ExtendOrderHold).
func (e *Engine) ReleaseExpired(ctx context.Context, orderID int64) (Expiry, error) {
	var out Expiry
	err := e.inTx(ctx, func(q *stockstore.Queries) error {
		rows, err := q.LockReservationsOfOrder(ctx, orderID)
		if err != nil {
			return err
		}
		now, err := q.Now(ctx)
		if err != nil {
			return err
		}
		var expired []stockstore.LockReservationsOfOrderRow
		for _, r := range rows {
			switch {
			case r.Status != StatusActive:
			case r.ExpiresAt.After(now):
				if out.Until == nil || r.ExpiresAt.Before(*out.Until) {
					until := r.ExpiresAt
					out.Until = &until
				}
			default:
				expired = append(expired, r)
			}
		}
		if out.Until != nil {
			out.Left = out.Until.Sub(now)
		}
		if len(expired) == 0 {
			return nil
		}
		out.Released = len(expired)
		return releaseLocked(ctx, q, expired)
	})
	return out, err
}

// releaseLocked releases reservation rows the transaction already holds.
func releaseLocked(ctx context.Context, q *stockstore.Queries, rows []stockstore.LockReservationsOfOrderRow) error {
	skus, whs, ids := keys(rows)
	if err := q.LockInventoryRows(ctx, skus, whs); err != nil {
		return err
	}
	_, err := q.ReleaseReservations(ctx, ids)
	return err
}

func keys(rows []stockstore.LockReservationsOfOrderRow) (skus []int64, whs []int32, ids []int64) {
	for _, r := range rows {
		skus = append(skus, r.SkuID)
		whs = append(whs, r.WarehouseID)
		ids = append(ids, r.ID)
	}
	return skus, whs, ids
}

// inTx runs fn in a transaction. An error from fn that is a *NotActiveError still commits,
// because the work fn did before refusing (releasing what was left) must stay done.
func (e *Engine) inTx(ctx context.Context, fn func(q *stockstore.Queries) error) error {
	// A write whose answer is only its error goes with the next statement, BEGIN with the first and
	// COMMIT with the last writes (db.InTx): a confirm's lock of the inventory rows with the confirm.
	// A NotActiveError commits what fn wrote.
	var refused error
	if err := db.InTx(ctx, e.pool, func(p db.DBTX) error {
		ferr := fn(stockstore.New(p))
		if notActive := (*NotActiveError)(nil); errors.As(ferr, &notActive) {
			refused = ferr
			return nil
		}
		return ferr
	}); err != nil {
		return err
	}
	return refused
}

// Restock puts an order's CONFIRMED units back on the shelf (CONFIRMED → RELEASED, on_hand += q):
// the compensation of a confirm whose order is cancelled before its goods leave. It returns how
// many reservations it moved; a repeat moves none.
func (e *Engine) Restock(ctx context.Context, orderID int64) (int, error) {
	n := 0
	err := e.inTx(ctx, func(q *stockstore.Queries) error {
		rows, err := q.LockReservationsOfOrder(ctx, orderID)
		if err != nil {
			return err
		}
		var confirmed []stockstore.LockReservationsOfOrderRow
		for _, r := range rows {
			if r.Status == StatusConfirmed {
				confirmed = append(confirmed, r)
			}
		}
		if len(confirmed) == 0 {
			return nil
		}
		skus, whs, ids := keys(confirmed)
		if err := q.LockInventoryRows(ctx, skus, whs); err != nil {
			return err
		}
		if _, err := q.UnconfirmReservations(ctx, ids); err != nil {
			return err
		}
		n = len(confirmed)
		return nil
	})
	return n, err
}
