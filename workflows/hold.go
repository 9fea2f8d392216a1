package workflows

import (
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/workflows/sagav2"
)

// HoldInput is the hold of one order's reservation.
type HoldInput struct {
	OrderID          int64     `json:"orderId"`
	ExpiresAt        time.Time `json:"expiresAt"`
	ParentWorkflowID string    `json:"parentWorkflowId"`
	// Saga is the saga version of the order that started the hold (0: an earlier release's).
	Saga int `json:"saga,omitempty"`
}

// HoldResult says how the hold ended: "expired" (the timer fired and the stock was released),
// "released" (the order compensated) or "settled" (the order was confirmed).
type HoldResult struct {
	Ended    string `json:"ended"`
	Released int    `json:"released"`
}

// How a hold ends.
const (
	holdExpired = "expired"
	// holdOrderClosed: the order's workflow closed before the expiry; whatever the order still
	// held is given back.
	holdOrderClosed = "order closed"
)

// holdSaga is the saga version this code starts holds as.
const holdSaga = 3

// HoldExtend moves a hold's expiry: the shopper extended the order's hold, and its reservations
// already carry the new expiry.
type HoldExtend struct {
	ExpiresAt time.Time `json:"expiresAt"`
}

// HoldWorkflow owns the lifetime of an order's reservation. A durable timer runs to the hold's
// expiry, moved when the shopper extends the hold; then whatever is still ACTIVE and expired is
// released and the hold ends: the order learns of the expiry from its child's completion. The
// database's clock decides between an extension and the expiry (inventory ReleaseExpired): stock
// an extension moved past now is kept, and the timer follows it. The order starts the hold with
// parent-close policy request-cancel, so when the order's workflow closes — finished, or
// terminated by support — the hold is asked to stop: it gives back whatever the order still holds
// (nothing, for an order that finished) and, when the order was left open, ends it; stock is never
// stranded. A hold whose order still runs (support reset the order's workflow) keeps holding.
// Holds begun by an earlier release run its code: those of releases before worker versioning by
// the frozen package, later ones on the build that began them, to which they are pinned.
func HoldWorkflow(ctx workflow.Context, in HoldInput) (HoldResult, error) {
	if in.Saga < holdSaga {
		res, err := sagav2.HoldWorkflow(ctx, convert[sagav2.HoldInput](in))
		return convert[HoldResult](res), err
	}
	// Disconnected: a cancel request is news of the order's close, not an order to stop at once.
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	until := in.ExpiresAt
	extend := workflow.GetSignalChannel(ctx, SignalHoldExtend)
	closed := false
	res := HoldResult{Ended: holdExpired}
	var timer workflow.Future
	stopTimer := func() {}
	for {
		if timer == nil {
			var tctx workflow.Context
			tctx, stopTimer = workflow.WithCancel(dctx)
			timer = workflow.NewTimer(tctx, max(until.Sub(workflow.Now(ctx)), 0))
		}
		fired, moved, closing := false, false, false
		sel := workflow.NewSelector(ctx)
		sel.AddFuture(timer, func(workflow.Future) { fired = true })
		sel.AddReceive(extend, func(c workflow.ReceiveChannel, _ bool) {
			var ext HoldExtend
			c.Receive(ctx, &ext)
			moved = ext.ExpiresAt.After(until)
			until = laterOf(until, ext.ExpiresAt)
		})
		if !closed {
			sel.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) { closed, closing = true, true })
		}
		sel.Select(ctx)
		switch {
		case fired:
			timer = nil
		case moved:
			stopTimer()
			timer = nil
			continue
		case closing:
			gone := endIfOrphaned(dctx, in)
			if !gone.Running {
				res = HoldResult{Ended: holdOrderClosed, Released: gone.Released}
				if gone.Ended {
					res.Ended = "order closed unfinished: ended by the hold"
				}
				holdDetails(ctx, in, res)
				return res, nil
			}
			// The order runs on (a reset run): the hold goes on to its expiry.
			continue
		default:
			continue
		}
		// Releasing stock must not give up: a quick try, then retries on the server until done.
		var exp inventory.Expiry
		err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(dctx, quickStepOptions),
			stockA.ReleaseExpired, in.OrderID).Get(dctx, &exp)
		for err != nil {
			err = workflow.ExecuteActivity(workflow.WithActivityOptions(dctx, holdReleaseOptions),
				stockA.ReleaseExpired, in.OrderID).Get(dctx, &exp)
			if isNonRetryable(err) {
				return res, err
			}
		}
		res.Released += exp.Released
		if exp.Until == nil {
			break
		}
		// Extended in the database; its signal may still be on its way.
		until = laterOf(until, *exp.Until)
	}
	// A running order learns of the expiry from this workflow's end. One whose workflow is gone
	// would stay open: the hold ends it.
	if gone := endIfOrphaned(dctx, in); gone.Ended {
		res.Ended = "expired; order ended by the hold"
	}
	holdDetails(ctx, in, res)
	return res, nil
}

func laterOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// endIfOrphaned gives back what the order holds when its workflow is gone (see
// PaymentReconciler.EndIfOrphaned). If it cannot be asked now, the reconcilers are the backstop.
func endIfOrphaned(ctx workflow.Context, in HoldInput) activities.Orphan {
	var gone activities.Orphan
	if in.ParentWorkflowID == "" {
		return activities.Orphan{Running: true}
	}
	if err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, placeOptions), reconA.EndIfOrphaned,
		activities.EndIfOrphanedInput{OrderID: in.OrderID, WorkflowID: in.ParentWorkflowID, By: "hold"}).Get(ctx, &gone); err != nil {
		return activities.Orphan{Running: true}
	}
	return gone
}

func holdDetails(ctx workflow.Context, in HoldInput, res HoldResult) {
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("Hold of order %d ended: %s, %d reservation(s) released",
		in.OrderID, res.Ended, res.Released))
}

// holdReleaseOptions retry a hold's release on the server until it is done.
var holdReleaseOptions = workflow.ActivityOptions{
	StartToCloseTimeout:    10 * time.Second,
	ScheduleToCloseTimeout: 24 * time.Hour,
	RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2,
		MaximumInterval: time.Minute},
}

// yield is called where the order is about to wait for something other than a local activity, so
// that what others see of it is current while it waits: the hold child runs if the order holds
// stock, and the search attributes say what the order is. Every change made since the last wait
// goes out in the same workflow task completion, so writing them here rather than at each change
// hides nothing from the outside and costs one upsert instead of several.
func (w *orderFlow) yield(ctx workflow.Context) {
	w.ensureHold(ctx)
	w.flushSearch(ctx)
}

// ensureHold starts the hold-expiry child, once, if the order holds stock. It is called whenever
// the order is about to wait, never for an order decided in its first workflow task: such an order
// never waits on its hold, and a child started and stopped at once would cost two workflows' writes
// per order. In the rare case that the first task is interrupted after the reservation (a worker
// crash, a terminate from the UI), the reservation still ends at its expiry: the reservation
// sweeper releases it.
func (w *orderFlow) ensureHold(ctx workflow.Context) {
	if w.hold != nil || w.holdAt == nil {
		return
	}
	// Disconnected: cancelling the order must not cancel its hold. When this workflow closes, the
	// hold is asked to stop (and gives back whatever is left, if anything); this is how a
	// confirmed order's hold ends without a signal the order would have to wait for.
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	cctx := workflow.WithChildOptions(dctx, workflow.ChildWorkflowOptions{
		WorkflowID:            HoldWorkflowID(w.st.OrderID),
		ParentClosePolicy:     enumspb.PARENT_CLOSE_POLICY_REQUEST_CANCEL,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY,
		StaticSummary: fmt.Sprintf("Stock hold of order %d until %s", w.st.OrderID,
			w.holdAt.UTC().Format(time.RFC3339)),
	})
	w.hold = workflow.ExecuteChildWorkflow(cctx, HoldWorkflow, HoldInput{OrderID: w.st.OrderID, ExpiresAt: *w.holdAt,
		ParentWorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID, Saga: holdSaga})
}
