package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/internal/problem"
)

// registerHandlers sets up what the outside sends the order: the shopper's place-order and cancel
// updates, support's action, the provider's word on the payment, a seller's shortfall, and the
// status query. An update is accepted only when the order will act on it; otherwise it is refused
// with the reason and changes nothing.
func (w *orderFlow) registerHandlers(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, QueryStatus, func() (OrderState, error) { return w.st, nil }); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdatePlaceOrder,
		func(ctx workflow.Context, requestHash string) (PlaceOrderResult, error) {
			if err := workflow.Await(ctx, func() bool { return w.placed != nil }); err != nil {
				return PlaceOrderResult{}, err
			}
			return *w.placed, nil
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, requestHash string) error {
			if requestHash != w.in.RequestHash {
				return activities.RefusalError(problem.New(problem.IdempotencyKeyReused,
					"this Idempotency-Key was used with a different request"))
			}
			return nil
		}}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateCancel,
		func(ctx workflow.Context) (CancelResult, error) {
			if w.cancel == "" {
				w.cancel = problem.CancelledByShopper
			}
			if err := workflow.Await(ctx, func() bool { return w.phase == phaseDone || w.st.Status.Final() }); err != nil {
				return CancelResult{}, err
			}
			return CancelResult{Status: w.st.Status}, nil
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context) error {
			if !w.cancellable() {
				return activities.RefusalError(problem.New(problem.OrderNotCancellable,
					"the order can no longer be cancelled").WithDetails(problem.StatusDetails{Status: string(w.st.Status)}))
			}
			return nil
		}}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateExtendHold, w.extendHold,
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context) error { return w.extendable() }}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, SupportAction,
		func(ctx workflow.Context, req SupportRequest) (OrderState, error) {
			w.support = append(w.support, req)
			return w.st, nil
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, req SupportRequest) error {
			return w.validSupport(req)
		}}); err != nil {
		return err
	}
	onSignal(ctx, SignalPaymentResult, func(s PaymentSignal) {
		// Checked with the provider while the order waits for its payment. Once the payment is
		// decided an event changes nothing, but one that comes while the order is being failed
		// may be money the provider took late: the order reverses it before it closes.
		if (w.phase <= phaseWaiting && !w.paid && !w.declined) || w.phase >= phaseFailing {
			w.events = append(w.events, s)
		}
	}, signalIgnored(ctx, SignalPaymentResult, w.note))
	onSignal(ctx, SignalStockShortfall, func(s ShortfallSignal) {
		w.shortfall = true
		w.note(ctx, "stock shortfall", fmt.Sprintf("seller count took SKU %d in warehouse %d", s.SKUID, s.WarehouseID))
	}, signalIgnored(ctx, SignalStockShortfall, w.note))
	onSignal(ctx, SupportAction, func(req SupportRequest) {
		if err := w.validSupport(req); err != nil {
			w.noteBy(ctx, "support action ignored", errorText(err), req.Actor)
			return
		}
		w.support = append(w.support, req)
	}, signalIgnored(ctx, SupportAction, w.note))
	return nil
}

// onSignal handles every signal of a name, in order, with handle. A signal whose payload does not
// decode is never handled: ignored hears of it (see receive).
func onSignal[T any](ctx workflow.Context, name string, handle func(T), ignored func(n int)) {
	workflow.Go(ctx, func(ctx workflow.Context) {
		// The wait for the next signal outlives a cancel of the workflow (the order goes on to
		// compensate, and still hears the provider).
		dctx, _ := workflow.NewDisconnectedContext(ctx)
		ch := workflow.GetSignalChannel(ctx, name)
		for {
			_ = workflow.Await(dctx, func() bool { return ch.Len() > 0 })
			var v T
			ok, dropped := receive(ch, &v)
			if dropped > 0 {
				ignored(dropped)
			}
			if ok {
				handle(v)
			}
		}
	})
}

// receive takes the next signal of ch that decodes into v, without waiting, and says how many it
// passed over that did not. A payload that does not decode — written in clear where the worker
// takes only what a trusted client encrypted, or not the shape v has — is dropped by the SDK as it
// is received (with a log line and its corrupted-signals metric): it is never acted on and never
// fails the workflow task. Counting the channel before and after is how the workflow learns of it,
// to note it; receiving without waiting is what keeps such a signal from blocking whoever waits
// for the next one.
func receive(ch workflow.ReceiveChannel, v any) (ok bool, dropped int) {
	before := ch.Len()
	ok = ch.ReceiveAsync(v)
	dropped = before - ch.Len()
	if ok {
		dropped--
	}
	return ok, dropped
}

// signalIgnored notes signals of a name that did not decode.
func signalIgnored(ctx workflow.Context, name string, note func(workflow.Context, string, string)) func(int) {
	return func(n int) {
		note(ctx, "signal ignored", fmt.Sprintf("%s: %d signal(s) whose payload did not decode (not encrypted by a "+
			"trusted client, or not its shape), not acted on", name, n))
		workflow.GetLogger(ctx).Warn("signal not decoded, ignored", "signal", name, "count", n)
	}
}

// cancellable: the shopper may cancel while the order waits for its payment, not once it is paid
// or already being failed.
func (w *orderFlow) cancellable() bool {
	return w.placed != nil && w.st.OrderID != 0 && w.phase == phaseWaiting && !w.paid &&
		(w.cancel == "" || w.cancel == problem.CancelledByShopper)
}

// ExtendHoldResult answers the shopper's extension: the hold's new end and how many extensions
// are left.
type ExtendHoldResult struct {
	HoldExpiresAt  time.Time `json:"holdExpiresAt"`
	ExtensionsLeft int       `json:"extensionsLeft"`
}

// extendable accepts an extension only while the order waits for its payment with its stock held;
// the window and the count are the worker's settings, which ExtendHold applies in PostgreSQL.
func (w *orderFlow) extendable() error {
	refuse := func(reason problem.Code, msg string) error {
		return activities.RefusalError(activities.HoldRefusal{Reason: reason, Status: string(w.st.Status)}.Problem(msg))
	}
	switch {
	case w.placed == nil || w.st.OrderID == 0 || w.phase != phaseWaiting || w.paid || w.declined ||
		w.cancel != "" || w.shortfall || w.parked != nil:
		return refuse(problem.OrderNotPendingPayment, "the order is not waiting for its payment")
	case w.expired:
		return refuse(problem.HoldExpired, "the hold has already expired")
	case w.extending || w.extensionsUsed:
		return refuse(problem.HoldExtensionUsed, "the hold has been extended as many times as allowed")
	}
	return nil
}

// extendHold moves the hold: the reservations and the order row first (one conditional statement
// that decides), then the hold child's timer, or the order's own when the child is gone.
func (w *orderFlow) extendHold(ctx workflow.Context) (ExtendHoldResult, error) {
	w.extending = true
	defer func() { w.extending = false }()
	var ext activities.ExtendedHold
	err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, placeOptions), ordersA.ExtendHold,
		w.st.OrderID).Get(ctx, &ext)
	if err != nil {
		if activities.RefusedWith(err, problem.HoldExtensionUsed) {
			w.extensionsUsed = true
		}
		return ExtendHoldResult{}, err
	}
	at := ext.ExpiresAt
	w.st.HoldExpiresAt = &at
	w.extensionsUsed = ext.ExtensionsLeft == 0
	w.holdMoved = true
	switch {
	case w.hold == nil:
		w.holdAt = &at
	case !w.holdLost:
		// The child may have ended just now; then the order keeps its own timer (holdLost).
		_ = w.hold.SignalChildWorkflow(ctx, SignalHoldExtend, HoldExtend{ExpiresAt: at}).Get(ctx, nil)
	}
	w.note(ctx, "hold extended", "stock held until "+at.UTC().Format(time.RFC3339))
	return ExtendHoldResult{HoldExpiresAt: at, ExtensionsLeft: ext.ExtensionsLeft}, nil
}

// validSupport accepts a support action only from a named staff member (its actor, which only a
// trusted client fills in), and only where the order will act on it.
func (w *orderFlow) validSupport(req SupportRequest) error {
	refuse := func(msg string) error {
		return temporal.NewApplicationError(msg, string(problem.InvalidSupportAction), w.st.Status)
	}
	if err := req.Actor.Check(); err != nil {
		return refuse(err.Error())
	}
	switch req.Action {
	case ActionRetry, ActionCancel, ActionRefund:
	default:
		return refuse(`action must be "retry", "cancel" or "refund"`)
	}
	if strings.TrimSpace(req.Reason) == "" {
		return refuse("a reason is required")
	}
	switch {
	case w.phase == phaseDone || w.st.Status.Final():
		return refuse("the order is already " + string(w.st.Status))
	case w.parked != nil && w.parked.must && req.Action != ActionRetry:
		return refuse("the order is giving its stock and money back (" + w.parked.step + "), which cannot be skipped: only retry applies")
	case w.parked != nil:
		return nil
	case req.Action == ActionRetry:
		return refuse("retry applies to an order that needs attention; this one is " + string(w.st.Status))
	case w.phase == phasePlacing:
		return refuse("the order is being placed; act once it has been answered")
	case w.phase == phaseWaiting && req.Action == ActionRefund:
		return refuse("nothing has been captured yet: cancel instead")
	case w.phase == phaseWaiting:
		return nil
	case w.phase == phaseSettling:
		return refuse("the order is being confirmed: it completes, or waits for you if a step fails")
	default:
		return refuse("the order is already being ended; its stock and money are being given back")
	}
}
