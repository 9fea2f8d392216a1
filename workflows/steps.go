package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/order"
)

// Steps after the shopper's answer, as support sees them in the UI. The capture also confirms the
// order (one transaction after the provider's capture); builds before saga-8 had a step of its own
// for that, "complete".
const (
	stepConfirm = "confirm"
	stepCapture = "capture"
	stepFinish  = "finish"
	stepRelease = "release stock"
	stepRestock = "restock"
	stepReverse = "reverse payment"
)

// parking is a step waiting in NEEDS_ATTENTION.
type parking struct {
	step string
	// must: a compensation, which support can only retry (giving back cannot be skipped).
	must bool
}

// errParkedCancel and errParkedRefund end a parked step when support chose to stop the order;
// errParkedGiveUp when the order waited for support past its deadline.
var (
	errParkedCancel = errors.New("support cancelled the order")
	errParkedRefund = errors.New("support refunded the order")
	errParkedGiveUp = errors.New("the order waited for support past its deadline")
)

// actionGiveUp is the saga's own stop of a parked step at its deadline; support cannot send it.
const actionGiveUp = "give up"

// step runs one activity of the saga after the shopper's answer, until it is done or support
// stops the order:
//
//  1. a short first try as a local activity, its retries inside this workflow task — the common
//     case, which costs no round trip to the server;
//  2. then, if that failed for a reason retrying may fix, the same activity as a regular activity
//     whose retries the server runs for STEP_RETRY_WINDOW: the order waits without its history
//     growing with each attempt;
//  3. then the order is parked in NEEDS_ATTENTION: the activity goes on retrying on the server
//     (backoff up to ParkRetryEvery), so an outage that ends needs nobody, while support may
//     retry, cancel or refund at any time. A refusal no retry can change (a capture the provider
//     refuses) is parked once, with its code, and waits for support alone.
//
// Parking adds the same few events however long the order waits. Refusals the saga answers by
// taking another path (a reservation no longer active) return at once.
func (w *orderFlow) step(ctx workflow.Context, name string, activity, result any, args ...any) error {
	return w.runStep(ctx, name, false, activity, result, args...)
}

// mustStep is step for a compensation: every support action is a retry.
func (w *orderFlow) mustStep(ctx workflow.Context, name string, activity, result any, args ...any) error {
	return w.runStep(ctx, name, true, activity, result, args...)
}

func (w *orderFlow) runStep(ctx workflow.Context, name string, must bool, activity, result any, args ...any) error {
	err := w.attempt(ctx, activity, result, args...)
	for {
		if err == nil || isBusinessRefusal(err) {
			return err
		}
		req, perr := w.parkUntil(ctx, name, must, err, activity, result, args...)
		if req.Action == "" {
			// The step's own retries succeeded while parked (nil), or it was refused meanwhile:
			// parked again, with the refusal's code.
			err = perr
			continue
		}
		switch req.Action {
		case ActionCancel:
			return errParkedCancel
		case ActionRefund:
			return errParkedRefund
		case actionGiveUp:
			return errParkedGiveUp
		}
		err = w.attempt(ctx, activity, result, args...)
		if err == nil {
			w.unpark(ctx)
		}
	}
}

// attempt is a step's first try and then its durable retries.
func (w *orderFlow) attempt(ctx workflow.Context, activity, result any, args ...any) error {
	err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, quickStepOptions), activity,
		args...).Get(ctx, result)
	if err == nil || isNonRetryable(err) {
		return err
	}
	// The order is about to wait on the server: what others see of it must be current first.
	w.yield(ctx)
	return workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, w.durableOptions()), activity,
		args...).Get(ctx, result)
}

// parkUntil parks the order on a failed step and waits until the step succeeds by its own retries
// (empty request, nil error), turns out refused (empty request, the refusal), support acts (the
// request; the step's retries are stopped first), or the order's deadlines pass: escalated after
// the worker's PARKED_ESCALATE_AFTER, given up after its PARKED_GIVE_UP_AFTER (a give-up request),
// both counted from when a step first parked the order. A step giving stock or money back is
// escalated, never given up.
func (w *orderFlow) parkUntil(ctx workflow.Context, name string, must bool, cause error, activity, result any,
	args ...any) (SupportRequest, error) {
	w.park(ctx, name, must, cause)
	// A step waits on the order's own context, so that a cancel from the UI is support's cancel; a
	// compensation cannot be cancelled, and waits on its own.
	wctx := w.root
	if must {
		wctx = ctx
	}
	dctx, stopDeadlines := workflow.WithCancel(ctx)
	defer stopDeadlines()
	escalate, giveUp := w.deadlines(dctx, must)
	for {
		var retries workflow.Future
		rctx, stopRetries := workflow.WithCancel(ctx)
		if !isNonRetryable(cause) {
			retries = workflow.ExecuteActivity(workflow.WithActivityOptions(rctx, parkedRetryOptions), activity, args...)
		}
		w.yield(ctx)
		var err error
		for {
			err = workflow.Await(wctx, func() bool {
				return len(w.support) > 0 || ready(retries) || ready(escalate) || ready(giveUp)
			})
			if !ready(escalate) {
				break
			}
			escalate = nil
			w.escalate(ctx, must)
			w.yield(ctx)
			if err != nil || len(w.support) > 0 || ready(retries) || ready(giveUp) {
				break
			}
		}
		var req SupportRequest
		switch {
		case len(w.support) > 0:
			req, w.support = w.support[0], w.support[1:]
		case err != nil && !ready(retries):
			req = SupportRequest{Action: ActionCancel, Reason: "workflow cancelled"}
		case ready(giveUp) && !ready(retries):
			req = SupportRequest{Action: actionGiveUp, Reason: fmt.Sprintf("waited for support since %s, past its deadline: "+
				"given up before the payment's authorization expires", w.parkedAt.UTC().Format(time.RFC3339))}
		}
		if must && req.Action != "" && req.Action != ActionRetry {
			req = SupportRequest{Action: ActionRetry, Reason: req.Reason + " (giving stock and money back cannot be skipped: retrying)",
				Actor: req.Actor}
		}
		if retries != nil {
			stopRetries()
			// An attempt under way may still finish: its outcome counts (a capture that went
			// through is refunded by a cancel's compensation, a confirm restocked).
			rerr := retries.Get(ctx, result)
			switch {
			case rerr == nil:
				if req.Action != "" && req.Action != actionGiveUp {
					w.recordSupport(ctx, req, name)
				}
				w.unpark(ctx)
				if req.Action == ActionCancel || req.Action == ActionRefund {
					return req, nil
				}
				return SupportRequest{}, nil
			case req.Action == "" && isNonRetryable(rerr):
				return SupportRequest{}, rerr // refused while retrying on its own: parked again, with its code
			case req.Action == "":
				continue // its retries gave up after their window: they start again, still parked
			}
		}
		if req.Action == actionGiveUp {
			w.note(ctx, "given up", req.Reason)
		} else {
			w.recordSupport(ctx, req, name)
		}
		if req.Action != ActionRetry {
			w.unpark(ctx)
		}
		return req, nil
	}
}

func ready(f workflow.Future) bool { return f != nil && f.IsReady() }

// deadlines are the timers of a parked order's escalation (nil once escalated) and give-up (nil
// for a step giving stock or money back), from when a step first parked it.
func (w *orderFlow) deadlines(ctx workflow.Context, must bool) (escalate, giveUp workflow.Future) {
	escalateAfter, giveUpAfter := w.parkedWindows()
	now := workflow.Now(ctx)
	if w.escalation == nil {
		escalate = workflow.NewTimer(ctx, max(w.parkedAt.Add(escalateAfter).Sub(now), 0))
	}
	if !must {
		giveUp = workflow.NewTimer(ctx, max(w.parkedAt.Add(giveUpAfter).Sub(now), 0))
	}
	return escalate, giveUp
}

// parkedWindows are the order's PARKED_ESCALATE_AFTER and PARKED_GIVE_UP_AFTER, as the worker that
// placed it had them (takeSaga), or the defaults for an order whose step named none.
func (w *orderFlow) parkedWindows() (escalateAfter, giveUpAfter time.Duration) {
	if w.saga.ParkedEscalateAfter > 0 && w.saga.ParkedGiveUpAfter > w.saga.ParkedEscalateAfter {
		return w.saga.ParkedEscalateAfter, w.saga.ParkedGiveUpAfter
	}
	return DefaultParkedEscalateAfter, DefaultParkedGiveUpAfter
}

// DefaultParkedEscalateAfter and DefaultParkedGiveUpAfter are a parked order's deadlines when the
// worker that placed it named none (its step's result carries none).
const (
	DefaultParkedEscalateAfter = 24 * time.Hour
	DefaultParkedGiveUpAfter   = 6 * 24 * time.Hour
)

// escalate marks the parked order escalated: support sees it (the Escalated search attribute, its
// attention's escalatedAt and givesUpAt) and so does the CheckoutOrdersEscalated alert.
func (w *orderFlow) escalate(ctx workflow.Context, must bool) {
	esc := &order.Escalation{At: workflow.Now(ctx)}
	if !must {
		_, giveUpAfter := w.parkedWindows()
		at := w.parkedAt.Add(giveUpAfter)
		esc.GivesUpAt = &at
	}
	w.escalation = esc
	if w.st.Attention != nil {
		w.st.Attention.EscalatedAt, w.st.Attention.GivesUpAt = &esc.At, esc.GivesUpAt
	}
	_ = workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, quickStepOptions), ordersA.Escalate,
		activities.EscalateInput{OrderID: w.st.OrderID, GivesUpAt: esc.GivesUpAt}).Get(ctx, nil)
	detail := "waiting for support since " + w.parkedAt.UTC().Format(time.RFC3339)
	if esc.GivesUpAt != nil {
		detail += "; given up at " + esc.GivesUpAt.UTC().Format(time.RFC3339) + " unless support acts"
	}
	w.note(ctx, "escalated", detail)
	workflow.GetLogger(ctx).Warn("parked order escalated", "order_id", w.st.OrderID, "gives_up_at", esc.GivesUpAt)
}

// ParkRetryEvery is the longest a parked step waits between its own retries.
const ParkRetryEvery = 5 * time.Minute

func (w *orderFlow) park(ctx workflow.Context, step string, must bool, cause error) {
	w.parked = &parking{step: step, must: must}
	w.st.NeedsAttention = true
	w.st.Attention = &Attention{Step: step, Error: errorText(cause), Since: workflow.Now(ctx)}
	if w.parkedAt.IsZero() {
		w.parkedAt = w.st.Attention.Since
	}
	if isNonRetryable(cause) {
		w.st.Attention.Code = failureCode(cause)
	}
	if e := w.escalation; e != nil {
		w.st.Attention.EscalatedAt, w.st.Attention.GivesUpAt = &e.At, e.GivesUpAt
	}
	_ = workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, quickStepOptions), ordersA.Park,
		activities.ParkInput{OrderID: w.st.OrderID, Step: step, Error: w.st.Attention.Error,
			Escalation: w.escalation}).Get(ctx, nil)
	w.setStatus(ctx, order.StatusNeedsAttention, step+" failed: "+w.st.Attention.Error)
	workflow.GetLogger(ctx).Warn("order needs attention", "order_id", w.st.OrderID, "step", step, "error", cause)
}

func (w *orderFlow) unpark(ctx workflow.Context) {
	if w.parked == nil {
		return
	}
	w.parked = nil
	w.st.NeedsAttention = false
	w.st.Attention = nil
	_ = workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, quickStepOptions), ordersA.Resume,
		w.st.OrderID).Get(ctx, nil)
	w.setStatus(ctx, order.StatusPendingPayment, "resumed")
}

// isBusinessRefusal tells refusals that send the saga another way (a reservation no longer
// active: the order fails) from failures a step waits out.
func isBusinessRefusal(err error) bool {
	return stockGone(err) || errors.Is(err, errParkedCancel) || errors.Is(err, errParkedRefund) ||
		errors.Is(err, errParkedGiveUp) || activities.FailedWith(err, problem.PaymentAuthorizationExpired)
}

// stockGone: the order's reservation was released meanwhile, or it holds none.
func stockGone(err error) bool {
	return activities.FailedWith(err, problem.ReservationNotActive) || activities.FailedWith(err, problem.NoReservation)
}

// isNonRetryable: no retry can change the answer.
func isNonRetryable(err error) bool {
	var appErr *temporal.ApplicationError
	return asAppError(err, &appErr) && appErr.NonRetryable()
}

func asAppError(err error, target **temporal.ApplicationError) bool { return errors.As(err, target) }

// failureCode is the code of a failure no retry changes (internal/problem), whichever name its
// step raised it under; the type of one that carries no code.
func failureCode(err error) string {
	if code := activities.FailureCode(err); code != "" {
		return string(code)
	}
	var appErr *temporal.ApplicationError
	if asAppError(err, &appErr) {
		return appErr.Type()
	}
	return ""
}

func errorText(err error) string {
	var appErr *temporal.ApplicationError
	if asAppError(err, &appErr) {
		return appErr.Message()
	}
	if err == nil {
		return ""
	}
	return err.Error()
}

// Activity options. Placing the order is on the shopper's critical path: local activities, short
// timeouts, few quick retries. Later steps retry longer on the server but still bounded, so a
// dependency that stays down parks the order for support instead of hiding the problem.
var (
	placeOptions = workflow.LocalActivityOptions{
		StartToCloseTimeout:    5 * time.Second,
		ScheduleToCloseTimeout: 20 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, BackoffCoefficient: 2,
			MaximumInterval: 2 * time.Second, MaximumAttempts: 4},
	}
	// placeStoreOptions are placing steps that only write the checkout's own database (prices,
	// the order row, the reservation). They ride out a database that restarts or fails over while
	// the shopper waits — attempts a second apart, inside the API's wait for the answer — rather
	// than give up an order whose row is already written and spend its key.
	placeStoreOptions = workflow.LocalActivityOptions{
		StartToCloseTimeout:    5 * time.Second,
		ScheduleToCloseTimeout: 20 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, BackoffCoefficient: 2,
			MaximumInterval: time.Second},
	}
	// quickStepOptions are a step's first try: a few quick attempts, retried in the worker within
	// the workflow task.
	quickStepOptions = workflow.LocalActivityOptions{
		StartToCloseTimeout:    5 * time.Second,
		ScheduleToCloseTimeout: 8 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, BackoffCoefficient: 2,
			MaximumInterval: time.Second, MaximumAttempts: 3},
	}
	// parkedRetryOptions retry a parked step on the server until it succeeds or support acts.
	parkedRetryOptions = workflow.ActivityOptions{
		StartToCloseTimeout:    10 * time.Second,
		ScheduleToCloseTimeout: 7 * 24 * time.Hour,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2,
			MaximumInterval: ParkRetryEvery},
		WaitForCancellation: true,
	}
)

// DefaultStepRetryWindow is how long a step after the answer retries before support is asked.
const DefaultStepRetryWindow = 2 * time.Minute

// durableOptions are a step's retries on the server, for the step retry window.
func (w *orderFlow) durableOptions() workflow.ActivityOptions {
	window := w.saga.StepRetryWindow
	if window <= 0 {
		window = DefaultStepRetryWindow
	}
	return workflow.ActivityOptions{
		StartToCloseTimeout:    min(10*time.Second, window),
		ScheduleToCloseTimeout: window,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2,
			MaximumInterval: min(20*time.Second, max(window/4, time.Second))},
	}
}

// unknownOptions settle an unknown payment outcome: the server asks again with backoff until the
// hold would expire.
func unknownOptions(until time.Duration) workflow.ActivityOptions {
	return workflow.ActivityOptions{
		StartToCloseTimeout:    10 * time.Second,
		ScheduleToCloseTimeout: max(until, 10*time.Second),
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: 2 * time.Second, BackoffCoefficient: 2,
			MaximumInterval: time.Minute, NonRetryableErrorTypes: activities.TypesOf(problem.PaymentRefused)},
	}
}

// settleOptions are unknownOptions for SettleUnknown, which may authorize: its cancel reaches it by
// its heartbeat, and the order waits for it to end (WaitForCancellation) before reversing the
// payment, so that nothing it authorizes comes after the reversal.
func settleOptions(until time.Duration) workflow.ActivityOptions {
	o := unknownOptions(until)
	o.HeartbeatTimeout = o.StartToCloseTimeout
	o.WaitForCancellation = true
	return o
}
