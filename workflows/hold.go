package workflows

import (
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/inventory"
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

// How a hold ends.
const (
	holdExpired = "expired"
	// holdOrderClosed: the order's workflow closed before the expiry; whatever the order still
	// held is given back.
	holdOrderClosed = "order closed"
)

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
// Like its order, a hold is pinned to the build that began it.
func HoldWorkflow(ctx workflow.Context, in HoldInput) (HoldResult, error) {
	// Disconnected: a cancel request is news of the order's close, not an order to stop at once.
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	// until is the hold's end as the reservations carry it; wake is when the timer looks, by
	// Temporal's clock (later than until when the database's clock is behind).
	until := in.ExpiresAt
	wake := until
	recheck := holdRecheck
	extend := workflow.GetSignalChannel(ctx, SignalHoldExtend)
	closed := false
	res := HoldResult{Ended: holdExpired}
	var timer workflow.Future
	stopTimer := func() {}
	for {
		if timer == nil {
			var tctx workflow.Context
			tctx, stopTimer = workflow.WithCancel(dctx)
			timer = workflow.NewTimer(tctx, max(wake.Sub(workflow.Now(ctx)), 0))
		}
		fired, moved, closing := false, false, false
		sel := workflow.NewSelector(ctx)
		sel.AddFuture(timer, func(workflow.Future) { fired = true })
		sel.AddReceive(extend, func(c workflow.ReceiveChannel, _ bool) {
			// Without waiting: an extension that does not decode is passed over, and the hold
			// goes on holding to the time it knows.
			var ext HoldExtend
			ok, dropped := receive(c, &ext)
			if dropped > 0 {
				workflow.GetLogger(ctx).Warn("hold extension not decoded, ignored", "order_id", in.OrderID, "count", dropped)
			}
			if !ok {
				return
			}
			moved = ext.ExpiresAt.After(until)
			until = laterOf(until, ext.ExpiresAt)
			wake = laterOf(wake, until)
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
		// The database still holds stock: extended there (its signal may still be on its way), or
		// by its clock, which may be behind Temporal's, not expired yet. The rest is waited by the
		// database's own count of it; a wait shorter than a moment (or a result that does not say)
		// looks again after a growing one, never at once.
		until = laterOf(until, *exp.Until)
		wait := exp.Left
		if wait <= 0 {
			wait = until.Sub(workflow.Now(ctx))
		}
		if wait < recheck {
			wait, recheck = recheck, min(2*recheck, holdRecheckMax)
		} else {
			recheck = holdRecheck
		}
		wake = workflow.Now(ctx).Add(wait)
	}
	// A running order learns of the expiry from this workflow's end. One whose workflow is gone
	// would stay open: the hold ends it.
	if gone := endIfOrphaned(dctx, in); gone.Ended {
		res.Ended = "expired; order ended by the hold"
	}
	holdDetails(ctx, in, res)
	return res, nil
}

// holdRecheck and holdRecheckMax bound how soon the hold looks again when the database says the
// stock is still held but its end has passed by Temporal's clock.
const (
	holdRecheck    = time.Second
	holdRecheckMax = time.Minute
)

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
	w.flushWrites(ctx)
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
		ParentWorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID})
}
