package sagav1

import (
	"time"

	"go.temporal.io/sdk/temporal"
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

	// Releasing stock must not give up: retry until it is done.
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2,
			MaximumInterval: time.Minute},
	})
	if err := workflow.ExecuteLocalActivity(lctx, stockA.Release, in.OrderID).Get(ctx, &res.Released); err != nil {
		return res, err
	}
	if res.Ended == "expired" && in.ParentWorkflowID != "" {
		// The order may be gone (terminated, or finished): then nobody needs telling.
		_ = workflow.SignalExternalWorkflow(ctx, in.ParentWorkflowID, "", SignalHoldExpired, res.Released).Get(ctx, nil)
	}
	return res, nil
}
