package inventory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/inventory/internal/stockstore"
)

// Why units of a confirmed order's line are cancelled after payment.
const (
	// CancelDamaged: the unit was damaged in the warehouse.
	CancelDamaged = "damaged"
	// CancelLost: the unit cannot be found.
	CancelLost = "lost"
	// CancelSellerCannotShip: the seller cannot ship the unit (no courier, listing error, ...);
	// nothing happened to the unit itself.
	CancelSellerCannotShip = "seller_cannot_ship"
)

// CancelReasons are the reasons a line cancellation may give.
var CancelReasons = []string{CancelDamaged, CancelLost, CancelSellerCannotShip}

// ValidCancelReason says whether reason is one of CancelReasons.
func ValidCancelReason(reason string) bool {
	for _, r := range CancelReasons {
		if r == reason {
			return true
		}
	}
	return false
}

// ReturnsToShelf is the stock rule of a line cancellation: a unit the seller cannot ship never
// left the seller's shelf, so the confirm's decrement is undone and it is sellable again. A
// damaged or lost unit did leave sellable stock: it is not put back, and the seller's next count
// decides what is on the shelf.
func ReturnsToShelf(reason string) bool { return reason == CancelSellerCannotShip }

// UnitsAt is a number of units of one warehouse.
type UnitsAt struct {
	WarehouseID int32 `json:"warehouseId"`
	Units       int32 `json:"units"`
}

// CancelConfirmedUnits records, in the caller's transaction, that units of an order's line left
// the order: they are taken from the line's CONFIRMED reservations in warehouse order, each by a
// conditional UPDATE. The units stay counted as sold (they left the shelf at confirm) until
// RestockCancelled puts them back. The caller has already taken the units off the order's line
// under its row lock, so concurrent cancellations of the line reach here one at a time.
func CancelConfirmedUnits(ctx context.Context, tx db.DBTX, orderID, skuID int64, units int32) ([]UnitsAt, error) {
	q := stockstore.New(tx)
	rows, err := q.LockConfirmedReservationsOfLine(ctx, orderID, skuID)
	if err != nil {
		return nil, err
	}
	var out []UnitsAt
	left := units
	for _, r := range rows {
		n := min(left, r.Quantity-r.CancelledQuantity)
		if n <= 0 {
			continue
		}
		changed, err := q.CancelReservedUnits(ctx, n, r.ID)
		if err != nil {
			return nil, err
		}
		if changed != 1 {
			return nil, fmt.Errorf("%w: reservation %d changed under its lock", ErrInvalidRequest, r.ID)
		}
		out = append(out, UnitsAt{WarehouseID: r.WarehouseID, Units: n})
		if left -= n; left == 0 {
			return out, nil
		}
	}
	return nil, fmt.Errorf("%w: the CONFIRMED reservations of order %d, SKU %d cover %d units fewer than the line",
		ErrInvalidRequest, orderID, skuID, left)
}

// RestockCancelled puts the units of line cancellation id back on the shelf (on_hand += units in
// each warehouse they were taken from), once: a repeat, or a cancellation whose reason keeps the
// units off the shelf, changes nothing. It returns the units put back. Lock order as everywhere:
// reservation rows, then inventory rows in (sku, warehouse) order.
func (e *Engine) RestockCancelled(ctx context.Context, id int64) (int32, error) {
	var put int32
	err := e.inTx(ctx, func(q *stockstore.Queries) error {
		c, err := q.ClaimLineCancellationRestock(ctx, id)
		if db.NotFound(err) {
			return nil // already put back, or no such cancellation
		}
		if err != nil {
			return err
		}
		if !ReturnsToShelf(c.Reason) {
			return errKeepOffShelf
		}
		var at []UnitsAt
		if err := json.Unmarshal(c.Allocations, &at); err != nil {
			return fmt.Errorf("line cancellation %d: allocations: %w", id, err)
		}
		skus, whs := make([]int64, len(at)), make([]int32, len(at))
		for i, a := range at {
			n, err := q.RestockCancelledUnits(ctx, stockstore.RestockCancelledUnitsParams{Units: a.Units, OrderID: c.OrderID,
				SkuID: c.SkuID, WarehouseID: a.WarehouseID})
			if err != nil {
				return err
			}
			if n != 1 {
				return fmt.Errorf("%w: line cancellation %d: warehouse %d has no such cancelled units", ErrInvalidRequest,
					id, a.WarehouseID)
			}
			skus[i], whs[i] = c.SkuID, a.WarehouseID
		}
		if err := q.LockInventoryRows(ctx, skus, whs); err != nil {
			return err
		}
		for _, a := range at {
			if _, err := q.PutUnitsBack(ctx, a.Units, c.SkuID, a.WarehouseID); err != nil {
				return err
			}
			put += a.Units
		}
		return nil
	})
	if errors.Is(err, errKeepOffShelf) {
		return 0, nil
	}
	return put, err
}

// errKeepOffShelf rolls back the claim of a cancellation whose units stay off the shelf.
var errKeepOffShelf = errors.New("the reason keeps the units off the shelf")
