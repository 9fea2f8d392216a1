package workflows

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/internal/money"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/internal/staff"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/order"
)

// LineCancelInput cancels Units of one line (the order's SKU) of a CONFIRMED order, after payment.
// RequestID makes the request idempotent: the same (order, request id) is one cancellation, and
// names one workflow (LineCancelWorkflowID). Support pastes it as JSON in the UI's start form.
type LineCancelInput struct {
	OrderID int64 `json:"orderId"`
	SKUID   int64 `json:"skuId"`
	Units   int32 `json:"units"`
	// Reason is one of inventory.CancelReasons; it decides whether the units go back on the shelf.
	Reason    string `json:"reason"`
	RequestID string `json:"requestId"`
	// Actor is the verified person who asks: the API's codec endpoint writes it into the input for
	// the signed-in staff member (whatever was typed there), the ops API from the bearer token. A
	// request without one changes nothing.
	Actor *staff.Actor `json:"actor,omitempty"`
	// RequestedBy is read and never trusted: the APIs of saga-6 and earlier wrote who asked here,
	// as anyone starting the workflow could. Who asked is the actor.
	RequestedBy string `json:"requestedBy,omitempty"`
}

// Where a line cancellation stands.
const (
	LineCancelRecorded = "RECORDED" // the units left the line; the refund is under way
	LineCancelRefunded = "REFUNDED" // the money is back; stock and the announcement follow
	LineCancelDone     = "DONE"
	// LineCancelNeedsAttention: a step waits for support, as an order's does.
	LineCancelNeedsAttention = string(order.StatusNeedsAttention)
)

// LineCancelState is what the line cancellation's `status` query answers, and its result.
type LineCancelState struct {
	Request        LineCancelInput     `json:"request"`
	CancellationID int64               `json:"cancellationId,omitempty"`
	Status         string              `json:"status,omitempty"`
	RefundMinor    int64               `json:"refundMinor"`
	Currency       string              `json:"currency,omitempty"`
	Restock        bool                `json:"restock"`
	Allocations    []inventory.UnitsAt `json:"allocations,omitempty"`
	LineQuantity   int32               `json:"lineQuantity,omitempty"`
	LineCancelled  int32               `json:"lineCancelled,omitempty"`
	NeedsAttention bool                `json:"needsAttention"`
	Attention      *Attention          `json:"attention,omitempty"`
	Timeline       []TimelineEntry     `json:"timeline"`
}

// Steps of a line cancellation after it is recorded, as support sees them.
const (
	stepRefund   = "refund"
	stepAnnounce = "announce"
)

// LineCancelWorkflow cancels units of one line of a confirmed order, in an order that never keeps
// money without goods and never refunds twice: (1) record the cancellation on the line and its
// reservations (the units leave the order; a conditional statement, so concurrent requests never
// cancel more than the line has), (2) refund those units' price at the provider as a partial
// refund under the request's own key, (3) put the units back on the shelf when the reason says
// they never left it, (4) the timeline entry and the outbox event for the shopper and the seller.
// Once recorded, the steps run on a disconnected context and retry until done: a cancel from the
// UI cannot leave money kept for goods that will not ship. A refund the provider refuses waits for
// support (NeedsAttention) instead of being dropped.
//
// The input is read strictly (unknown fields refused), since support types it in the UI; bad input
// fails the workflow with VALIDATION_FAILED before anything is changed.
func LineCancelWorkflow(ctx workflow.Context, raw json.RawMessage) (LineCancelState, error) {
	w := &lineCancel{}
	if err := workflow.SetQueryHandler(ctx, QueryStatus, func() (LineCancelState, error) { return w.st, nil }); err != nil {
		return w.st, err
	}
	in, err := readLineCancel(raw)
	w.st.Request = in
	if err != nil {
		return w.st, err
	}
	if err := w.registerSupport(ctx); err != nil {
		return w.st, err
	}
	_ = workflow.UpsertTypedSearchAttributes(ctx, AttrOrderID.ValueSet(in.OrderID), AttrNeedsAttention.ValueSet(false))

	// A cancel from the UI does not stop a cancellation: once recorded, its money must go back.
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	actx := workflow.WithActivityOptions(dctx, lineCancelOptions)
	var rec activities.LineCancel
	info := workflow.GetInfo(ctx).WorkflowExecution
	err = workflow.ExecuteActivity(actx, ordersA.RecordLineCancel, activities.LineCancelRequest{OrderID: in.OrderID,
		SKUID: in.SKUID, Units: in.Units, Reason: in.Reason, RequestID: in.RequestID, RequestedBy: in.Actor.String(),
		Actor: in.Actor, WorkflowID: info.ID, RunID: info.RunID}).Get(ctx, &rec)
	if err != nil {
		w.note(ctx, "refused", errorText(err))
		return w.st, err
	}
	w.recorded(ctx, rec)

	if !rec.Refunded {
		w.untilDone(actx, stepRefund, paymentsA.RefundLineCancel, nil)
	}
	w.st.Status = LineCancelRefunded
	w.note(actx, "refunded", money.FormatIn(rec.AmountMinor, rec.Currency)+" "+rec.Currency)

	if rec.Restock && !rec.Restocked {
		var n int32
		w.untilDone(actx, stepRestock, stockA.RestockLineCancel, &n)
		w.note(ctx, "restocked", fmt.Sprintf("%d units back on the shelf", n))
	}
	var done activities.LineCancel
	w.untilDone(actx, stepAnnounce, ordersA.AnnounceLineCancel, &done)
	w.st.LineQuantity, w.st.LineCancelled = done.LineQuantity, done.LineCancelled
	w.st.Status = LineCancelDone
	w.note(ctx, "done", "shopper and seller told (outbox event "+activities.EventOrderLineCancelled+")")
	err = workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
	if err != nil && !temporal.IsCanceledError(err) {
		return w.st, err
	}
	return w.st, nil
}

type lineCancel struct {
	st      LineCancelState
	support []SupportRequest
	// parked: a step waits for support.
	parked bool
	// staffActions counts the staff actions recorded by this run: the request is the first.
	staffActions int
}

// readLineCancel reads the workflow's input strictly and checks it.
func readLineCancel(raw json.RawMessage) (LineCancelInput, error) {
	var in LineCancelInput
	dec := json.NewDecoder(bytes.NewReader(raw)) //workflowcheck:ignore (decoding JSON is deterministic)
	dec.DisallowUnknownFields()
	err := dec.Decode(&in) //workflowcheck:ignore
	if err != nil {
		return in, invalidLineCancel("input is not a line cancellation: " + err.Error())
	}
	var problems []string
	if in.OrderID <= 0 {
		problems = append(problems, "orderId must be a positive order id")
	}
	if in.SKUID <= 0 {
		problems = append(problems, "skuId must be the SKU id of the order's line")
	}
	if in.Units <= 0 {
		problems = append(problems, "units must be at least 1")
	}
	if !inventory.ValidCancelReason(in.Reason) {
		problems = append(problems, `reason must be one of "`+strings.Join(inventory.CancelReasons, `", "`)+`"`)
	}
	if id := strings.TrimSpace(in.RequestID); id == "" || len(in.RequestID) > 255 {
		problems = append(problems, "requestId must be 1 to 255 characters (one per cancellation: a repeat with the same id changes nothing)")
	}
	if err := in.Actor.Check(); err != nil {
		problems = append(problems, err.Error())
	}
	if len(problems) > 0 {
		return in, invalidLineCancel(strings.Join(problems, "; "))
	}
	return in, nil
}

// invalidLineCancel refuses an input that is not a cancellation the workflow can run (bad JSON, an
// unknown field, a missing id, units not positive, an unknown reason) with VALIDATION_FAILED.
// Nothing was changed.
func invalidLineCancel(msg string) error {
	return activities.RefusalError(problem.New(problem.ValidationFailed,
		"invalid line cancellation: "+msg+"; nothing was changed"))
}

func (w *lineCancel) recorded(ctx workflow.Context, rec activities.LineCancel) {
	w.st.CancellationID, w.st.Status = rec.ID, LineCancelRecorded
	w.st.RefundMinor, w.st.Currency, w.st.Restock, w.st.Allocations = rec.AmountMinor, rec.Currency, rec.Restock, rec.Allocations
	w.st.LineQuantity, w.st.LineCancelled = rec.LineQuantity, rec.LineCancelled
	detail := fmt.Sprintf("%d× SKU %d (%s), line now %d of %d cancelled", w.st.Request.Units, w.st.Request.SKUID,
		w.st.Request.Reason, rec.LineCancelled, rec.LineQuantity)
	if rec.Repeat {
		detail = "already recorded under this request id: " + detail
	}
	w.noteBy(ctx, "recorded", detail, w.st.Request.Actor)
}

// untilDone runs a step of the recorded cancellation until it is done. PostgreSQL or the provider
// being down is retried by the server; a refusal no retry can change (the provider refuses the
// refund) parks the cancellation for support, whose `retry` runs the step again.
func (w *lineCancel) untilDone(ctx workflow.Context, step string, activity, result any) {
	for {
		err := workflow.ExecuteActivity(ctx, activity, w.st.CancellationID).Get(ctx, result)
		if err == nil {
			w.unpark(ctx)
			return
		}
		w.park(ctx, step, err)
		_ = workflow.Await(ctx, func() bool { return len(w.support) > 0 })
		req := w.support[0]
		w.support = w.support[1:]
		w.recordSupport(ctx, req, step)
	}
}

// recordSupport records support's retry: its staff_actions row and the order's timeline entry
// naming the person, once, and the cancellation's own timeline.
func (w *lineCancel) recordSupport(ctx workflow.Context, req SupportRequest, step string) {
	w.staffActions++
	info := workflow.GetInfo(ctx).WorkflowExecution
	_ = workflow.ExecuteActivity(ctx, ordersA.StaffAction, activities.StaffActionInput{OrderID: w.st.Request.OrderID,
		LineCancellationID: w.st.CancellationID, Action: req.Action, Reason: req.Reason, Step: step, Actor: *req.Actor,
		WorkflowID: info.ID, RunID: info.RunID, Seq: w.staffActions}).Get(ctx, nil)
	w.noteBy(ctx, "support "+req.Action, req.Reason, req.Actor)
}

func (w *lineCancel) park(ctx workflow.Context, step string, cause error) {
	w.parked, w.st.NeedsAttention = true, true
	w.st.Attention = &Attention{Step: step, Error: errorText(cause), Code: failureCode(cause), Since: workflow.Now(ctx)}
	_ = workflow.ExecuteActivity(ctx, ordersA.LineCancelAttention, activities.LineCancelAttentionInput{
		CancellationID: w.st.CancellationID, Step: step, Error: w.st.Attention.Error, Code: w.st.Attention.Code}).Get(ctx, nil)
	_ = workflow.UpsertTypedSearchAttributes(ctx, AttrNeedsAttention.ValueSet(true))
	w.note(ctx, "needs attention", step+" failed: "+w.st.Attention.Error)
	workflow.GetLogger(ctx).Warn("line cancellation needs attention", "order_id", w.st.Request.OrderID, "step", step,
		"error", cause)
}

func (w *lineCancel) unpark(ctx workflow.Context) {
	if !w.parked {
		return
	}
	w.parked, w.st.NeedsAttention, w.st.Attention = false, false, nil
	_ = workflow.ExecuteActivity(ctx, ordersA.LineCancelAttention,
		activities.LineCancelAttentionInput{CancellationID: w.st.CancellationID}).Get(ctx, nil)
	_ = workflow.UpsertTypedSearchAttributes(ctx, AttrNeedsAttention.ValueSet(false))
}

// registerSupport takes support's `retry` (signal or update) while a step waits for it; anything
// else is refused with the reason and changes nothing.
func (w *lineCancel) registerSupport(ctx workflow.Context) error {
	valid := func(req SupportRequest) error {
		refuse := func(msg string) error {
			return temporal.NewApplicationError(msg, string(problem.InvalidSupportAction), w.st.Status)
		}
		switch err := req.Actor.Check(); {
		case err != nil:
			return refuse(err.Error())
		case req.Action != ActionRetry:
			return refuse(`a line cancellation takes only "retry": its units have left the order and their money must go back`)
		case strings.TrimSpace(req.Reason) == "":
			return refuse("a reason is required")
		case !w.parked:
			return refuse("nothing waits for support: the cancellation is " + strings.ToLower(w.st.Status))
		}
		return nil
	}
	err := workflow.SetUpdateHandlerWithOptions(ctx, SupportAction,
		func(ctx workflow.Context, req SupportRequest) (LineCancelState, error) {
			w.support = append(w.support, req)
			return w.st, nil
		}, workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, req SupportRequest) error { return valid(req) }})
	if err != nil {
		return err
	}
	onSignal(ctx, SupportAction, func(req SupportRequest) {
		if err := valid(req); err != nil {
			w.noteBy(ctx, "support action ignored", errorText(err), req.Actor)
			return
		}
		w.support = append(w.support, req)
	}, signalIgnored(ctx, SupportAction, w.note))
	return nil
}

func (w *lineCancel) note(ctx workflow.Context, event, detail string) {
	w.noteBy(ctx, event, detail, nil)
}

// noteBy is note of what a staff member did, naming the person.
func (w *lineCancel) noteBy(ctx workflow.Context, event, detail string, actor *staff.Actor) {
	w.st.Timeline = appendTimeline(w.st.Timeline, TimelineEntry{At: workflow.Now(ctx), Event: event, Detail: detail,
		Actor: actor})
	workflow.SetCurrentDetails(ctx, lineCancelDetails(w.st))
}

// lineCancelDetails is the markdown the UI shows for the cancellation.
func lineCancelDetails(st LineCancelState) string {
	var b strings.Builder
	r := st.Request
	status := st.Status
	if status == "" {
		status = "REFUSED"
	}
	b.WriteString(fmt.Sprintf("**Line cancellation** · order %d · SKU %d · %d units · %s · **%s**", r.OrderID, r.SKUID, r.Units,
		markdownText(r.Reason), status))
	if r.Actor != nil {
		b.WriteString(" · asked by " + markdownText(r.Actor.String()))
	}
	if st.CancellationID != 0 {
		b.WriteString(fmt.Sprintf("\n\nRefund: %s %s · stock back on the shelf: %t · line: %d of %d units cancelled",
			money.FormatIn(st.RefundMinor, st.Currency), st.Currency, st.Restock, st.LineCancelled, st.LineQuantity))
	}
	if a := st.Attention; a != nil {
		b.WriteString(fmt.Sprintf("\n\n**Needs attention**: step `%s` failed: %s.", a.Step, markdownText(a.Error)))
		b.WriteString(" Once the cause is fixed (at the provider, for a refused refund), send signal or update `support-action` with " +
			"`{\"action\": \"retry\", \"reason\": \"...\"}`.\n")
	}
	return b.String()
}

// lineCancelOptions retry a step until it is done (PostgreSQL or the provider down: backoff up
// to ParkRetryEvery); a refusal no retry can change comes back at once.
var lineCancelOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 30 * time.Second,
	RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2,
		MaximumInterval: ParkRetryEvery},
}
