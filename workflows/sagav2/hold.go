package sagav2

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/marketplace/checkout/activities"
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

// holdRestockChange marks the hold giving back the confirmed stock of an order it ends.
const holdRestockChange = "hold-restock-confirmed"

// HoldWorkflow owns the lifetime of an order's reservation. A durable timer runs to the hold's
// expiry; then whatever is still ACTIVE is released and the order is told. The order's
// compensation asks it to release early; a confirmed order tells it to stop. It outlives an order
// that support terminates, so stock is never stranded.
func HoldWorkflow(ctx workflow.Context, in HoldInput) (HoldResult, error) {
	release := workflow.GetSignalChannel(ctx, SignalHoldRelease)
	settled := workflow.GetSignalChannel(ctx, SignalHoldSettled)
	tctx, stopTimer := workflow.WithCancel(ctx)
	timer := workflow.NewTimer(tctx, max(in.ExpiresAt.Sub(workflow.Now(ctx)), 0))

	var res HoldResult
	sel := workflow.NewSelector(ctx)
	sel.AddFuture(timer, func(workflow.Future) { res.Ended = "expired" })
	sel.AddReceive(release, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil); res.Ended = "released" })
	sel.AddReceive(settled, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil); res.Ended = "settled" })
	sel.Select(ctx)
	stopTimer()
	workflow.SetCurrentDetails(ctx, "Hold of order "+itoa(in.OrderID)+" ended: "+res.Ended)
	if res.Ended == "settled" {
		return res, nil
	}

	// Releasing stock must not give up, not even when this workflow is cancelled: retry until done.
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	lctx := workflow.WithLocalActivityOptions(dctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2,
			MaximumInterval: time.Minute},
	})
	if err := workflow.ExecuteLocalActivity(lctx, stockA.Release, in.OrderID).Get(dctx, &res.Released); err != nil {
		return res, err
	}
	if res.Ended != "expired" || in.ParentWorkflowID == "" {
		return res, nil
	}
	if err := workflow.SignalExternalWorkflow(dctx, in.ParentWorkflowID, "", SignalHoldExpired, res.Released).Get(dctx, nil); err == nil {
		return res, nil
	}
	// The order's workflow is gone (support terminated it): nobody else will end the order, so
	// the hold does — if the order is still open, it fails and its payment is reversed. A
	// finished order is left alone (the transition is conditional).
	var failed bool
	if err := workflow.ExecuteLocalActivity(lctx, ordersA.Transition, activities.TransitionInput{OrderID: in.OrderID,
		To: StatusFailed, Code: FailHoldExpired, Detail: map[string]any{"by": "hold"}}).Get(dctx, &failed); err != nil {
		return res, err
	}
	if failed {
		res.Ended = "expired; order ended by the hold"
		// Stock the order had already confirmed (its workflow stopped between confirm and capture)
		// goes back on the shelf too, before the money goes back.
		if workflow.GetVersion(dctx, holdRestockChange, workflow.DefaultVersion, 1) == 1 {
			if err := workflow.ExecuteLocalActivity(lctx, stockA.Restock, in.OrderID).Get(dctx, nil); err != nil {
				return res, err
			}
		}
		if err := workflow.ExecuteLocalActivity(lctx, paymentsA.Reverse, in.OrderID).Get(dctx, nil); err != nil {
			return res, err
		}
	}
	return res, nil
}
