package inventory

import (
	"context"
	"sort"
	"time"

	"github.com/marketplace/checkout/inventory/internal/stockstore"
)

// SweepResult is what one sweep released.
type SweepResult struct {
	Released int `json:"released"`
	Units    int `json:"units"`
	Batches  int `json:"batches"`
	// Orders are the orders whose reservations were released (the first maxSweepOrders of them).
	Orders []int64 `json:"orders"`
	// OldestAgeSeconds is how long past its expiry the oldest released reservation was.
	OldestAgeSeconds float64 `json:"oldestAgeSeconds"`
}

// Sweep releases expired ACTIVE reservations in batches of batchSize until a batch comes back
// short. Sweepers running at once share the work through SKIP LOCKED; none releases a
// reservation twice, because the release is conditional on ACTIVE.
func (e *Engine) Sweep(ctx context.Context, batchSize int32, maxBatches int) (SweepResult, error) {
	var out SweepResult
	orders := map[int64]bool{}
	for out.Batches < maxBatches {
		var claimed int
		err := e.inTx(ctx, func(q *stockstore.Queries) error {
			rows, err := q.ClaimExpiredReservations(ctx, batchSize)
			if err != nil || len(rows) == 0 {
				return err
			}
			claimed = len(rows)
			now := time.Now()
			ids := make([]int64, len(rows))
			for i, r := range rows {
				ids[i] = r.ID
				out.OldestAgeSeconds = max(out.OldestAgeSeconds, now.Sub(r.ExpiresAt).Seconds())
			}
			skus, whs := rowKeys(rows)
			if err := q.LockInventoryRows(ctx, skus, whs); err != nil {
				return err
			}
			released, err := q.ReleaseReservations(ctx, ids)
			if err != nil {
				return err
			}
			for _, r := range released {
				out.Released++
				out.Units += int(r.Quantity)
				orders[r.OrderID] = true
			}
			return nil
		})
		if err != nil {
			return out, err
		}
		if claimed == 0 {
			break
		}
		out.Batches++
		if claimed < int(batchSize) {
			break
		}
	}
	for id := range orders {
		out.Orders = append(out.Orders, id)
	}
	sort.Slice(out.Orders, func(i, j int) bool { return out.Orders[i] < out.Orders[j] })
	if len(out.Orders) > maxSweepOrders {
		out.Orders = out.Orders[:maxSweepOrders]
	}
	return out, nil
}

// maxSweepOrders bounds the order ids a sweep reports, so that a large backlog's result stays a
// small activity payload.
const maxSweepOrders = 100

// rowKeys lists the distinct inventory rows of claimed reservations.
func rowKeys(rows []stockstore.ClaimExpiredReservationsRow) (skus []int64, whs []int32) {
	type key struct {
		sku int64
		wh  int32
	}
	seen := map[key]bool{}
	for _, r := range rows {
		k := key{r.SkuID, r.WarehouseID}
		if !seen[k] {
			seen[k] = true
			skus = append(skus, r.SkuID)
			whs = append(whs, r.WarehouseID)
		}
	}
	return skus, whs
}

// Lag is the sweeper's backlog: expired reservations still ACTIVE and the age of the oldest.
func (e *Engine) Lag(ctx context.Context) (expired int64, oldest time.Duration, err error) {
	row, err := e.q.SweeperLag(ctx)
	if err != nil {
		return 0, 0, err
	}
	return row.Expired, time.Duration(row.LagSeconds * float64(time.Second)), nil
}

// ActiveReservations counts reservations still ACTIVE.
func (e *Engine) ActiveReservations(ctx context.Context) (int64, error) {
	return e.q.CountActiveReservations(ctx)
}
