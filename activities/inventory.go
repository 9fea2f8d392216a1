// Package activities holds the Temporal activities: each a method on a struct that carries its
// dependencies, each idempotent, each turning business refusals into non-retryable application
// errors of an exported type.
package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/order"
)

// Inventory exposes the inventory engine's operations as activities.
type Inventory struct {
	Engine *inventory.Engine
	// Pool reads where an order ships to.
	Pool *pgxpool.Pool
	// Jobs receives the figures of the scheduled sweeps and reconciliations; nil means none.
	Jobs JobObserver
}

// ReserveInput is what an order asks the inventory for.
type ReserveInput struct {
	OrderID int64            `json:"orderId"`
	Lines   []inventory.Line `json:"lines"`
	// ShipTo is where the order ships to, as orders of earlier releases carried it. Orders now
	// leave it out: Reserve reads the order's address, so coordinates stay out of the history.
	ShipTo inventory.Location `json:"shipTo,omitzero"`
	Hold   time.Duration      `json:"hold"`
}

// Reserve holds every line of the order or none. Out of stock is refused with OUT_OF_STOCK, the
// short lines its details' items.
func (a *Inventory) Reserve(ctx context.Context, in ReserveInput) (inventory.Reservation, error) {
	if in.ShipTo == (inventory.Location{}) {
		to, err := order.DataOf(a.Pool).OrderShipTo(ctx, in.OrderID)
		if err != nil {
			return inventory.Reservation{}, fmt.Errorf("reading where order %d ships to: %w", in.OrderID, err)
		}
		in.ShipTo = inventory.Location{Lat: to.Lat, Lon: to.Lon}
	}
	res, err := a.Engine.Reserve(ctx, inventory.ReserveRequest{OrderID: in.OrderID, Lines: in.Lines,
		ShipTo: in.ShipTo, Hold: in.Hold})
	return res, asApplicationError(err, "reserving the stock of order %d", in.OrderID)
}

// Confirm moves the order's reservations to CONFIRMED; RESERVATION_NOT_ACTIVE when any was released.
func (a *Inventory) Confirm(ctx context.Context, orderID int64) (inventory.ConfirmResult, error) {
	res, err := a.Engine.Confirm(ctx, orderID)
	return res, asApplicationError(err, "confirming the stock of order %d", orderID)
}

// Release gives back whatever the order still holds; it is safe to run any number of times.
func (a *Inventory) Release(ctx context.Context, orderID int64) (int, error) {
	n, err := a.Engine.Release(ctx, orderID)
	return n, asApplicationError(err, "releasing the stock of order %d", orderID)
}

// SweepInput sizes one sweep.
type SweepInput struct {
	BatchSize  int32 `json:"batchSize"`
	MaxBatches int   `json:"maxBatches"`
}

// Sweep releases expired reservations in SKIP LOCKED batches until none are left.
func (a *Inventory) Sweep(ctx context.Context, in SweepInput) (inventory.SweepResult, error) {
	if in.BatchSize <= 0 {
		in.BatchSize = 500
	}
	if in.MaxBatches <= 0 {
		in.MaxBatches = 1000
	}
	res, err := a.Engine.Sweep(ctx, in.BatchSize, in.MaxBatches)
	if a.Jobs != nil {
		a.Jobs.SweepDone(res.Released, time.Duration(res.OldestAgeSeconds*float64(time.Second)), err)
	}
	return res, failed(err, "sweeping expired reservations")
}

// Reconcile repairs rows whose reserved differs from their ACTIVE reservations.
func (a *Inventory) Reconcile(ctx context.Context) ([]inventory.Drift, error) {
	drifts, err := a.Engine.Reconcile(ctx)
	if a.Jobs != nil {
		a.Jobs.ReconcileDone(len(drifts), err)
	}
	return drifts, failed(err, "reconciling reserved stock")
}

// asApplicationError raises the inventory's refusals and the failures the saga acts on
// (RESERVATION_NOT_ACTIVE, NO_RESERVATION, INVALID_INVENTORY_REQUEST) as application errors of their
// codes, and says what the step was doing when any other failure stopped it.
func asApplicationError(err error, doing string, args ...any) error {
	if err == nil {
		return nil
	}
	var oos *inventory.OutOfStockError
	var notActive *inventory.NotActiveError
	switch {
	case errors.As(err, &oos):
		return RefusalError(problem.Wrap(err, problem.OutOfStock, err.Error()).WithDetails(OutOfStockDetails{Items: oos.Lines}))
	case errors.As(err, &notActive):
		return failure(problem.ReservationNotActive, err.Error(), err)
	case errors.Is(err, inventory.ErrNoReservation):
		return failure(problem.NoReservation, err.Error(), err)
	case errors.Is(err, inventory.ErrInvalidRequest):
		return failure(problem.InvalidInventoryRequest, err.Error(), err)
	}
	return failed(err, doing, args...)
}

// Restock puts a confirmed order's units back (its cancellation after confirm).
func (a *Inventory) Restock(ctx context.Context, orderID int64) (int, error) {
	n, err := a.Engine.Restock(ctx, orderID)
	return n, asApplicationError(err, "restocking order %d", orderID)
}
