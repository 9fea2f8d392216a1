package inventory

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/inventory/internal/stockstore"
)

// SKU is a catalog entry: a seller's item, its list price and how many one order may take.
// PriceVersion moves with every price or currency change.
type SKU struct {
	ID           int64
	SellerID     int64
	Code         string
	Title        string
	PriceMinor   int64
	Currency     string
	MaxPerOrder  int32
	PriceVersion int64
}

// SKUs reads the catalog entries of ids that exist, in id order.
func SKUs(ctx context.Context, conn db.DBTX, ids []int64) ([]SKU, error) {
	rows, err := stockstore.New(conn).SKUsByIDs(ctx, ids)
	out := make([]SKU, len(rows))
	for i, r := range rows {
		out[i] = SKU{ID: r.ID, SellerID: r.SellerID, Code: r.Code, Title: r.Title, PriceMinor: r.PriceMinor,
			Currency: r.Currency, MaxPerOrder: r.MaxPerOrder, PriceVersion: r.PriceVersion}
	}
	return out, err
}

// SellerSKUs maps the seller's own codes that exist to their SKU ids.
func SellerSKUs(ctx context.Context, conn db.DBTX, sellerID int64, codes []string) (map[string]int64, error) {
	rows, err := stockstore.New(conn).SKUsBySellerCodes(ctx, sellerID, codes)
	out := make(map[string]int64, len(rows))
	for _, r := range rows {
		out[r.Code] = r.ID
	}
	return out, err
}

// SellerExists says whether the seller is registered.
func SellerExists(ctx context.Context, conn db.DBTX, sellerID int64) (bool, error) {
	return stockstore.New(conn).SellerExists(ctx, sellerID)
}

// UpsertSKU writes the seller's catalog entry keyed by (SellerID, Code): its ID, and whether it
// was created (not updated). The given ID and PriceVersion are ignored.
func UpsertSKU(ctx context.Context, conn db.DBTX, s SKU) (id int64, created bool, err error) {
	r, err := stockstore.New(conn).UpsertSKU(ctx, stockstore.UpsertSKUParams{SellerID: s.SellerID, Code: s.Code,
		Title: s.Title, PriceMinor: s.PriceMinor, Currency: s.Currency, MaxPerOrder: s.MaxPerOrder})
	return r.ID, r.Created, err
}

// ExistingWarehouses lists those of ids that name a warehouse.
func ExistingWarehouses(ctx context.Context, conn db.DBTX, ids []int32) ([]int32, error) {
	return stockstore.New(conn).ExistingWarehouses(ctx, ids)
}

// ReservationOf reads what the order holds, in any status (no allocations: nothing).
func ReservationOf(ctx context.Context, conn db.DBTX, orderID int64) (Reservation, error) {
	rows, err := stockstore.New(conn).ReservationsOfOrder(ctx, orderID)
	if err != nil {
		return Reservation{}, err
	}
	return fromRows(orderID, rows), nil
}

// QueueReservationOf queues ReservationOf's read on b, a batch of other reads: once b is read,
// *into is what the order holds.
func QueueReservationOf(b *pgx.Batch, orderID int64, into *Reservation) {
	db.QueueRows(b, stockstore.ReservationsOfOrderSQL, []any{orderID}, func(rows []stockstore.ReservationsOfOrderRow) {
		*into = fromRows(orderID, rows)
	})
}

// LockReservations locks the order's reservations in the caller's transaction tx, in the lock
// order of the inventory's rules, and counts the ACTIVE ones.
func LockReservations(ctx context.Context, tx db.DBTX, orderID int64) (active int, err error) {
	rows, err := stockstore.New(tx).LockReservationsOfOrder(ctx, orderID)
	for _, r := range rows {
		if r.Status == StatusActive {
			active++
		}
	}
	return active, err
}
