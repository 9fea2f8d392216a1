// Package availability keeps the availability projection: sellable units per SKU, read by the cart
// and product pages instead of the inventory. Every change of an inventory row's sellable count
// writes a stock.changed event in its own transaction (a trigger); the relay publishes it to the
// event broker, and the Projector, a durable consumer of those events running in every worker,
// folds them into the projection. The projection is a hint, seconds behind at most; the order
// decision is always the inventory's.
package availability

import (
	"github.com/jackc/pgx/v5"

	"github.com/marketplace/checkout/availability/internal/availabilitystore"
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

// QueueSellable queues the truth for the checkout preview on b, to go with the caller's other reads
// in one round trip: once the batch is read, *dst is the sellable units per SKU summed over
// warehouses, from the inventory table itself (a failed read is the batch's error). SKUs without
// any inventory row are absent from the map.
func QueueSellable(b *pgx.Batch, skuIDs []int64, dst *map[int64]int32) {
	db.QueueRows(b, availabilitystore.SellableBySKUSQL, []any{skuIDs}, func(rows []availabilitystore.SellableBySKURow) {
		*dst = sellableOf(rows)
	})
}

func sellableOf(rows []availabilitystore.SellableBySKURow) map[int64]int32 {
	out := make(map[int64]int32, len(rows))
	for _, r := range rows {
		out[r.SkuID] = r.Available
	}
	return out
}
