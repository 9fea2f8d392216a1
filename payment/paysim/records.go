package paysim

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/marketplace/checkout/payment"
	"github.com/marketplace/checkout/payment/paysim/simdb"
)

// Records is the simulator's record of the money, as a real provider's dashboard or reporting API
// gives it: every intent it holds per order. The invariant auditor holds it against the product's
// own record (the payments rows).
type Records struct {
	db simdb.DBTX
}

// NewRecords reads the simulator's record from the database behind d.
func NewRecords(d simdb.DBTX) *Records { return &Records{db: d} }

// OrderIntents returns the intents of each of orderIDs that has any, under any key, oldest first.
func (r *Records) OrderIntents(ctx context.Context, orderIDs []int64) (map[int64][]payment.Intent, error) {
	return orderIntents(ctx, r.db, orderIDs)
}

// OrderIntentsIn is OrderIntents read through tx, a transaction on the simulator's database: the
// auditor's snapshot, so that the product's record and the simulator's are seen at one instant.
func (r *Records) OrderIntentsIn(ctx context.Context, tx pgx.Tx, orderIDs []int64) (map[int64][]payment.Intent, error) {
	return orderIntents(ctx, tx, orderIDs)
}

func orderIntents(ctx context.Context, d simdb.DBTX, orderIDs []int64) (map[int64][]payment.Intent, error) {
	rows, err := simdb.New(d).IntentsOfOrders(ctx, orderIDs)
	if err != nil {
		return nil, fmt.Errorf("paysim: intents of %d orders: %w", len(orderIDs), err)
	}
	out := make(map[int64][]payment.Intent, len(rows))
	for _, row := range rows {
		out[row.OrderID] = append(out[row.OrderID], toIntent(row))
	}
	return out, nil
}
