package workflows

import (
	"errors"

	"go.temporal.io/sdk/workflow"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/order"
	"github.com/marketplace/checkout/payment"
	"github.com/marketplace/checkout/pricing"
)

type compensation struct {
	name string
	kind int
	run  func(ctx workflow.Context) error
}

// Kinds of compensation. Stock is given back before money: releasing never depends on the
// payment provider, so a provider outage cannot keep stock locked.
const (
	compensateStock = iota
	compensatePayment
)

func (w *orderFlow) push(name string, run func(workflow.Context) error, kind int) {
	w.compensate = append(w.compensate, compensation{name: name, kind: kind, run: run})
}

// fail ends the order and gives back what was done, in reverse, on a disconnected context.
// answer, when given, is the shopper's answer (the order failed before it was placed).
//
// The order's row decides first: its conditional transition (open → FAILED or CANCELLED) says
// whether this run ends the order. Only then is anything given back, so a run that takes a failing
// path for an order that is no longer its to end — a reset run of an order already CONFIRMED —
// never restocks sold units nor refunds their money. An order another actor ended FAILED or
// CANCELLED first (its workflow taken for gone) still gets back what this run did; giving back is
// idempotent.
func (w *orderFlow) fail(ctx workflow.Context, code problem.Code, answer *PlaceOrderResult) {
	w.phase = phaseFailing
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	status := order.Ends(code)
	w.st.FailureCode = code
	w.holdAt = nil // the order gives its stock back itself: no hold child is started for it
	if answer != nil && answer.Outcome == OutcomeUnavailable {
		// A dependency is failing and compensation may itself wait: the shopper hears first.
		answer.OrderID, answer.Status = w.st.OrderID, status
		w.answer(dctx, answer)
	}
	// A refusal of the order as it was placed is recorded by the transaction that ends the order,
	// when this run ends it; the shopper hears it once the stock is back.
	var refusal *activities.RecordOutcomeInput
	if answer != nil && w.placed == nil {
		answer.OrderID, answer.Status = w.st.OrderID, status
		refusal = w.outcomeInput(answer)
	}
	var done activities.Finished
	refused := false // the refusal is recorded
	if w.mustStep(dctx, stepFinish, ordersA.FinishAnswered, &done, activities.FinishInput{
		TransitionInput: activities.TransitionInput{OrderID: w.st.OrderID, To: status, Code: code},
		Answer:          w.unrecorded, Refusal: refusal}) == nil {
		w.unrecorded = nil
		refused = done.Changed && refusal != nil
	}
	if !done.Changed && done.Status != "" && !done.Status.Open() {
		// Someone else ended the order first: the row's word stands.
		status = done.Status
		w.st.FailureCode = done.FailureCode
		if status == order.StatusConfirmed {
			w.compensate, w.events = nil, nil
			if answer != nil && w.placed == nil {
				// Answered from the order as it stands, never recorded as this run's refusal.
				w.placed = &PlaceOrderResult{Outcome: OutcomeReplay, OrderID: w.st.OrderID}
			}
			w.note(dctx, "order already confirmed", "this run's "+string(code)+" gives nothing back: the order is sold")
			w.setStatus(dctx, status, "")
			return
		}
	}
	// Stock first: giving it back never depends on the payment provider. Then the shopper hears
	// (a decline answers with the stock already back), then the money goes back.
	w.compensateKind(dctx, compensateStock)
	switch {
	case refused && w.placed == nil:
		w.placed = answer
	case answer != nil:
		answer.OrderID, answer.Status = w.st.OrderID, status
		w.answer(dctx, answer)
	}
	reversible := w.has(compensatePayment)
	w.compensateKind(dctx, compensatePayment)
	if reversible && (moneyMaybeHeld(w.st.PaymentStatus) || len(w.events) > 0) {
		w.events = nil
		// The provider's word came while the order was being failed: an authorization the reversal
		// did not find yet. It is reversed too. (One that comes after the workflow closed is
		// reversed by the payment reconciler, which its webhook starts.)
		_ = w.reversePayment(dctx)
	}
	w.compensate = nil
	w.setStatus(dctx, status, string(w.st.FailureCode))
	w.reverseLateMoney(dctx)
}

// reverseLateMoney reverses the payment once more when a payment event came while the order was
// being failed or closing: an authorization the provider made after the order's reversal looked.
// Reverse asks the provider first and is safe to repeat. (An event after the workflow closed goes
// to the payment reconciler, which the webhook starts.)
func (w *orderFlow) reverseLateMoney(ctx workflow.Context) {
	if len(w.events) == 0 || w.st.OrderID == 0 || (w.st.Status != order.StatusFailed && w.st.Status != order.StatusCancelled) {
		return
	}
	w.events = nil
	w.note(ctx, "payment event after the order gave up", "reversing what the provider holds")
	_ = w.reversePayment(ctx)
}

func (w *orderFlow) has(kind int) bool {
	for _, c := range w.compensate {
		if c.kind == kind {
			return true
		}
	}
	return false
}

func moneyMaybeHeld(status payment.Status) bool {
	return status == payment.StatusAuthorized || status == payment.StatusCaptured ||
		status == payment.StatusRequiresAction
}

// compensateKind runs the compensations of one kind, last registered first.
func (w *orderFlow) compensateKind(ctx workflow.Context, kind int) {
	for i := len(w.compensate) - 1; i >= 0; i-- {
		if c := w.compensate[i]; c.kind == kind {
			_ = c.run(ctx)
		}
	}
}

// releaseStock is the reservation's compensation: the order releases its stock itself (its hold
// child, if it runs, is asked to stop when the order's workflow closes, and finds nothing left).
func (w *orderFlow) releaseStock(ctx workflow.Context) error {
	return w.mustStep(ctx, stepRelease, stockA.Release, nil, w.st.OrderID)
}

// restock puts confirmed units back; it changes nothing when nothing was confirmed.
func (w *orderFlow) restock(ctx workflow.Context) error {
	return w.mustStep(ctx, stepRestock, stockA.Restock, nil, w.st.OrderID)
}

func (w *orderFlow) reversePayment(ctx workflow.Context) error {
	var p activities.PaymentResult
	if err := w.mustStep(ctx, stepReverse, paymentsA.Reverse, &p, w.st.OrderID); err != nil {
		return err
	}
	w.unmirrored = false // Reverse mirrored what the provider holds now
	if p.Status != payment.StatusNotFound {
		w.onPayment(ctx, p.Status, "compensation")
	}
	return nil
}

// failAfterStep ends the order after a step after the answer failed for good.
func (w *orderFlow) failAfterStep(ctx workflow.Context, err error, code problem.Code) {
	switch {
	case errors.Is(err, errParkedCancel):
		code = problem.CancelledBySupport
	case errors.Is(err, errParkedRefund):
		code = problem.RefundedBySupport
	case errors.Is(err, errParkedGiveUp):
		code = problem.AttentionExpired
	case activities.FailedWith(err, problem.PaymentAuthorizationExpired):
		code = problem.AuthorizationExpired
	case stockGone(err):
		code = problem.StockReleased
		if w.expired {
			code = problem.HoldExpired
		}
	}
	w.fail(ctx, code, nil)
}

// refuseBeforeOrder answers a request refused before any order row exists (prices changed, an
// empty or invalid cart, a coupon that does not apply, an unknown address, too many open orders)
// with the refusal's code, read by activities.Refusal whichever release's step raised it.
func (w *orderFlow) refuseBeforeOrder(ctx workflow.Context, err error) {
	refusal := activities.Refusal(err)
	switch {
	case refusal == nil:
		// Not a refusal: the database failed and retries ran out. Nothing was written, so no key
		// is recorded; the shopper may repeat the same request.
		w.st.Status = order.StatusFailed
		w.placed = &PlaceOrderResult{Outcome: OutcomeUnavailable, Message: "the order could not be placed now; try again"}
	case refusal.Code == problem.PriceChanged:
		d, _ := activities.DetailsOf[pricing.PriceChangedDetails](refusal)
		w.answer(ctx, &PlaceOrderResult{Outcome: OutcomePriceChanged, PriceVersion: d.PriceVersion})
	case refusal.Code == problem.TooManyOpenOrders:
		// Answered, never recorded: the key stays free for this request once the shopper has
		// fewer open orders (as "try again" above is never recorded).
		d, _ := activities.DetailsOf[activities.TooManyOpenOrdersDetails](refusal)
		w.placed = &PlaceOrderResult{Outcome: OutcomeRejected, RejectCode: refusal.Code, Message: refusal.Message,
			OpenOrderLimit: d.Limit, NextHoldEnd: d.NextHoldEnd}
	default:
		w.answer(ctx, &PlaceOrderResult{Outcome: OutcomeRejected, RejectCode: refusal.Code, Message: refusal.Message,
			Details: activities.RawDetails(refusal)})
	}
}

// answer releases the place-order update with the shopper's answer and records it under the key.
// The answer leaves with this workflow task; the record is retried as a step is (a repeat after
// the workflow closed must find it, and while it is retried the workflow stays open, so a repeat
// still attaches to it). Only a database down for the whole retry window leaves it unrecorded; a
// repeat is then answered from the order as it stands. "Try again" is never recorded.
func (w *orderFlow) answer(ctx workflow.Context, res *PlaceOrderResult) {
	if w.placed != nil {
		return
	}
	w.placed = res
	if res.Outcome == OutcomeUnavailable {
		return
	}
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	_ = w.attempt(dctx, ordersA.RecordOutcome, nil, *w.outcomeInput(res))
}

// answerLater releases the place-order update with the shopper's answer, leaving its record to
// the transaction that ends the order (FinishAnswered, CaptureFinish) when the order is decided in
// this workflow task, as an order paid at once is. Until the workflow closes, a repeat of the key
// attaches to it and is answered by the update; the record is written before the order first
// waits for anything (flushWrites) and before the workflow closes, so a repeat after the close
// finds it.
func (w *orderFlow) answerLater(res *PlaceOrderResult) {
	if w.placed != nil {
		return
	}
	w.placed = res
	w.unrecorded = w.outcomeInput(res)
}

// outcomeInput is the record of an answer under the request's key.
func (w *orderFlow) outcomeInput(res *PlaceOrderResult) *activities.RecordOutcomeInput {
	return &activities.RecordOutcomeInput{UserID: w.in.UserID, IdempotencyKey: w.in.IdempotencyKey,
		RequestHash: w.in.RequestHash, OrderID: w.st.OrderID, Outcome: res}
}

// flushWrites writes what was left to ride in the order's end, when the order is about to wait
// (or close) first: the recorded answer, and the authorization's mirror (ResolvePayment asks the
// provider and mirrors its intent, with when the authorization lapses). Each is cleared before it
// runs, so a step retried on the server, which waits too, does not write it again.
func (w *orderFlow) flushWrites(ctx workflow.Context) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	if rec := w.unrecorded; rec != nil {
		w.unrecorded = nil
		_ = w.attempt(dctx, ordersA.RecordOutcome, nil, *rec)
	}
	if w.unmirrored {
		w.unmirrored = false
		_ = w.attempt(dctx, paymentsA.ResolvePayment, nil, w.st.OrderID)
	}
}

// recordSupport records a support action the order acts on: its staff_actions row and the order's
// timeline entry naming the person (one activity, written once), and the workflow's own timeline.
// The UI's Cancel (the workflow's cancel request) names nobody Temporal verified: it is noted as
// such.
func (w *orderFlow) recordSupport(ctx workflow.Context, req SupportRequest, step string) {
	lctx := workflow.WithLocalActivityOptions(ctx, quickStepOptions)
	if req.Actor == nil {
		detail := map[string]any{"action": req.Action, "reason": req.Reason, "via": "temporal cancel request"}
		if step != "" {
			detail["step"] = step
		}
		_ = workflow.ExecuteLocalActivity(lctx, ordersA.Timeline,
			activities.TimelineInput{OrderID: w.st.OrderID, Kind: "support_action", Detail: detail}).Get(ctx, nil)
		w.note(ctx, "support "+req.Action, req.Reason+" (the workflow's cancel request from Temporal: no person named)")
		return
	}
	info := workflow.GetInfo(ctx).WorkflowExecution
	_ = workflow.ExecuteLocalActivity(lctx, ordersA.StaffAction, activities.StaffActionInput{OrderID: w.st.OrderID,
		Action: req.Action, Reason: req.Reason, Step: step, Actor: *req.Actor, WorkflowID: info.ID, RunID: info.RunID,
		Seq: w.staffActions}).Get(ctx, nil)
	w.staffActions++
	w.noteBy(ctx, "support "+req.Action, req.Reason, req.Actor)
}
