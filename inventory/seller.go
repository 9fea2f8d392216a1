package inventory

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/inventory/internal/stockstore"
	"github.com/marketplace/checkout/outbox/emit"
)

// Results of one seller stock row.
const (
	StockApplied              = "APPLIED"
	StockStaleIgnored         = "STALE_IGNORED"
	StockAppliedWithShortfall = "APPLIED_WITH_SHORTFALL"
)

// EventOrderStockShortfall is the outbox event of an order that lost reserved stock to a seller's
// lower count; the order fails and its shopper is told.
const EventOrderStockShortfall = "order.stock_shortfall"

// StockUpdate is a seller's absolute count of one SKU in one warehouse, stamped with the time the
// seller's own system took it.
type StockUpdate struct {
	SKUID           int64
	WarehouseID     int32
	Quantity        int32
	SourceUpdatedAt time.Time
}

// StockResult is the outcome of one update.
type StockResult struct {
	Status                string  `json:"status"`
	CancelledReservations int     `json:"cancelledReservations"`
	AffectedOrders        []int64 `json:"affectedOrders,omitempty"`
	// SoldAfterCount is how many units were sold after the report's stamp, taken off its count.
	SoldAfterCount int32 `json:"soldAfterCount,omitempty"`
	// OnHand is what the report set: its count less SoldAfterCount, at least zero.
	OnHand int32 `json:"onHand"`
}

// ShortfallEvent is the outbox payload sent for each order that lost stock.
type ShortfallEvent struct {
	OrderID       int64 `json:"orderId"`
	SellerID      int64 `json:"sellerId"`
	SKUID         int64 `json:"skuId"`
	WarehouseID   int32 `json:"warehouseId"`
	ReleasedUnits int32 `json:"releasedUnits"`
}

// maxShortfallAttempts bounds waiting for reservations that a confirm or release is moving at the
// same moment (they are skipped, not waited for, to keep the lock order).
const maxShortfallAttempts = 20

// ApplySellerStock applies one stock report. It sets on_hand only. A report older than the last
// applied one is ignored. The count is the seller's at its stamp: units we sold (confirmed) after
// that instant were still on its shelf, so on_hand becomes the count less those units, at least
// zero, and a seller whose system lags behind our sales never puts sold units back on sale. A
// count (so reduced) below what is reserved is still applied: the newest ACTIVE reservations of
// the row are released until the rest fits, each affected order gets an outbox event, and the
// shortfall is recorded against the seller.
func (e *Engine) ApplySellerStock(ctx context.Context, sellerID int64, u StockUpdate) (StockResult, error) {
	if u.Quantity < 0 || u.SourceUpdatedAt.IsZero() {
		return StockResult{}, fmt.Errorf("%w: quantity must be >= 0 and sourceUpdatedAt set", ErrInvalidRequest)
	}
	for attempt := 0; attempt < maxShortfallAttempts; attempt++ {
		res, retry, err := e.applyOnce(ctx, sellerID, u)
		if err != nil || !retry {
			return res, err
		}
		select {
		case <-ctx.Done():
			return StockResult{}, ctx.Err()
		case <-time.After(time.Duration(attempt+1) * 5 * time.Millisecond):
		}
	}
	return StockResult{}, ErrContention
}

func (e *Engine) applyOnce(ctx context.Context, sellerID int64, u StockUpdate) (res StockResult, retry bool, err error) {
	tx, err := db.Begin(ctx, e.pool)
	if err != nil {
		return res, false, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit this is a no-op
	q := e.q.WithTx(tx)

	ts := u.SourceUpdatedAt
	created, err := q.CreateInventoryRow(ctx, stockstore.CreateInventoryRowParams{
		SkuID: u.SKUID, WarehouseID: u.WarehouseID, OnHand: u.Quantity, SourceUpdatedAt: &ts})
	if err != nil {
		return res, false, err
	}
	if created == 1 {
		return StockResult{Status: StockApplied, OnHand: u.Quantity}, false, tx.Commit(ctx)
	}
	row, err := q.LockInventoryRow(ctx, u.SKUID, u.WarehouseID)
	if err != nil {
		return res, false, err
	}
	if row.SourceUpdatedAt != nil && !ts.After(*row.SourceUpdatedAt) {
		return StockResult{Status: StockStaleIgnored}, false, nil
	}
	// Read with the row held, so no confirm of it can commit between this and the update below.
	sold, err := q.SoldAfterCount(ctx, u.SKUID, u.WarehouseID, ts)
	if err != nil {
		return res, false, err
	}
	set := stockstore.SetOnHandParams{ReportedQuantity: u.Quantity, SoldAfterReport: sold, SourceUpdatedAt: &ts,
		SkuID: u.SKUID, WarehouseID: u.WarehouseID}
	onHand := max(u.Quantity-sold, 0)
	res = StockResult{Status: StockApplied, SoldAfterCount: sold, OnHand: onHand}
	if onHand >= row.Reserved {
		if _, err := q.SetOnHand(ctx, set); err != nil {
			return res, false, err
		}
		return res, false, tx.Commit(ctx)
	}

	// Below what is reserved: release the newest reservations until the rest fits.
	excess := row.Reserved - onHand
	cands, err := q.NewestActiveReservationsOfRow(ctx, u.SKUID, u.WarehouseID)
	if err != nil {
		return res, false, err
	}
	var ids []int64
	var covered int32
	for _, c := range cands {
		if covered >= excess {
			break
		}
		ids = append(ids, c.ID)
		covered += c.Quantity
	}
	if covered < excess {
		// The rest is locked by a confirm or release in flight; it will settle in a moment.
		return StockResult{}, true, nil
	}
	released, err := q.ReleaseReservations(ctx, ids)
	if err != nil {
		return res, false, err
	}
	if _, err := q.SetOnHand(ctx, set); err != nil {
		return res, false, err
	}
	orders, units, err := announceReleases(ctx, tx, sellerID, u.SKUID, u.WarehouseID, released)
	if err != nil {
		return res, false, err
	}
	if err := q.InsertShortfallEvent(ctx, stockstore.InsertShortfallEventParams{
		SellerID: sellerID, SkuID: u.SKUID, WarehouseID: u.WarehouseID,
		OnHandBefore: row.OnHand, OnHandAfter: onHand, ReservedBefore: row.Reserved,
		ReleasedUnits: units, OrderIds: orders, SourceUpdatedAt: ts,
	}); err != nil {
		return res, false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return res, false, err
	}
	res.Status, res.CancelledReservations, res.AffectedOrders = StockAppliedWithShortfall, len(released), orders
	return res, false, nil
}

// announceReleases writes one outbox event per order that lost reserved stock.
func announceReleases(ctx context.Context, tx db.DBTX, sellerID, skuID int64, warehouseID int32,
	released []stockstore.ReleaseReservationsRow) (orders []int64, units int32, err error) {
	for _, r := range released {
		units += r.Quantity
		orders = append(orders, r.OrderID)
		payload, err := json.Marshal(ShortfallEvent{OrderID: r.OrderID, SellerID: sellerID, SKUID: skuID,
			WarehouseID: warehouseID, ReleasedUnits: r.Quantity})
		if err != nil {
			return nil, 0, err
		}
		if err := emit.Event(ctx, tx, "order", strconv.FormatInt(r.OrderID, 10), EventOrderStockShortfall, payload); err != nil {
			return nil, 0, err
		}
	}
	return orders, units, nil
}

// Drift is one inventory row whose reserved did not match its ACTIVE reservations.
type Drift struct {
	SKUID          int64 `json:"skuId"`
	WarehouseID    int32 `json:"warehouseId"`
	ReservedBefore int32 `json:"reservedBefore"`
	ActiveSum      int32 `json:"activeSum"`
	ReleasedUnits  int32 `json:"releasedUnits"`
}

// DriftedRow is an inventory row whose reserved differs from the sum of its ACTIVE reservations.
type DriftedRow struct {
	SKUID       int64
	WarehouseID int32
	OnHand      int32
	Reserved    int32
	ActiveSum   int32
}

// FindDrift lists the rows where reserved differs from the sum of ACTIVE reservations.
func (e *Engine) FindDrift(ctx context.Context) ([]DriftedRow, error) {
	rows, err := e.q.FindInventoryDrift(ctx)
	out := make([]DriftedRow, len(rows))
	for i, r := range rows {
		out[i] = DriftedRow{SKUID: r.SkuID, WarehouseID: r.WarehouseID, OnHand: r.OnHand, Reserved: r.Reserved,
			ActiveSum: r.ActiveSum}
	}
	return out, err
}

// Reconcile repairs every drifted row and records each repair. reserved is set to the sum of the
// row's ACTIVE reservations; if that sum exceeds on_hand, the newest reservations are released
// first, as a seller shortfall would.
func (e *Engine) Reconcile(ctx context.Context) ([]Drift, error) {
	rows, err := e.q.FindInventoryDrift(ctx)
	if err != nil {
		return nil, err
	}
	var repaired []Drift
	for _, r := range rows {
		d, ok, err := e.repairRow(ctx, r.SkuID, r.WarehouseID)
		if err != nil {
			return repaired, err
		}
		if ok {
			repaired = append(repaired, d)
		}
	}
	return repaired, nil
}

func (e *Engine) repairRow(ctx context.Context, skuID int64, warehouseID int32) (Drift, bool, error) {
	d := Drift{SKUID: skuID, WarehouseID: warehouseID}
	tx, err := db.Begin(ctx, e.pool)
	if err != nil {
		return d, false, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit this is a no-op
	q := e.q.WithTx(tx)
	row, err := q.LockInventoryRow(ctx, skuID, warehouseID)
	if db.NotFound(err) {
		return d, false, nil
	}
	if err != nil {
		return d, false, err
	}
	// Holding the row, no reservation of it can be created; the sum read now is the truth.
	sum, err := q.ActiveSumOfRow(ctx, skuID, warehouseID)
	if err != nil {
		return d, false, err
	}
	if sum == row.Reserved {
		return d, false, nil
	}
	d.ReservedBefore, d.ActiveSum = row.Reserved, sum
	target := sum
	if sum > row.OnHand {
		cands, err := q.NewestActiveReservationsOfRow(ctx, skuID, warehouseID)
		if err != nil {
			return d, false, err
		}
		var ids []int64
		for _, c := range cands {
			if target <= row.OnHand {
				break
			}
			ids = append(ids, c.ID)
			target -= c.Quantity
		}
		if target > row.OnHand {
			return d, false, ErrContention
		}
		released, err := q.MarkReservationsReleased(ctx, ids)
		if err != nil {
			return d, false, err
		}
		rows := make([]stockstore.ReleaseReservationsRow, len(released))
		for i, r := range released {
			rows[i] = stockstore.ReleaseReservationsRow{OrderID: r.OrderID, SkuID: skuID, WarehouseID: warehouseID, Quantity: r.Quantity}
		}
		if _, d.ReleasedUnits, err = announceReleases(ctx, tx, 0, skuID, warehouseID, rows); err != nil {
			return d, false, err
		}
	}
	if err := q.SetReserved(ctx, target, skuID, warehouseID); err != nil {
		return d, false, err
	}
	if err := q.InsertDriftEvent(ctx, stockstore.InsertDriftEventParams{SkuID: skuID, WarehouseID: warehouseID,
		ReservedBefore: row.Reserved, ActiveSum: sum, ReleasedUnits: d.ReleasedUnits}); err != nil {
		return d, false, err
	}
	return d, true, tx.Commit(ctx)
}
