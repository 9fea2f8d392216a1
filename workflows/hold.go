package workflows

import (
	"time"

	"github.com/marketplace/checkout/workflows/sagav2"
	"go.temporal.io/sdk/workflow"
)

// HoldInput is the hold of one order's reservation.
type HoldInput struct {
	OrderID          int64     `json:"orderId"`
	ExpiresAt        time.Time `json:"expiresAt"`
	ParentWorkflowID string    `json:"parentWorkflowId"`
}

// HoldResult says how the hold ended: "expired" (the timer fired and the stock was released),
// "released" (the order compensated) or "settled" (the order was confirmed).
type HoldResult struct {
	Ended    string `json:"ended"`
	Released int    `json:"released"`
}

// HoldWorkflow owns the lifetime of an order's reservation: a durable timer to the hold's expiry,
// then whatever is still ACTIVE is released and the order is told.
func HoldWorkflow(ctx workflow.Context, in HoldInput) (HoldResult, error) {
	res, err := sagav2.HoldWorkflow(ctx, convert[sagav2.HoldInput](in))
	return convert[HoldResult](res), err
}
