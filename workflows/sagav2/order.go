package sagav2

import (
	"errors"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/internal/money"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/pricing"
)

// OrderInput is one POST /orders: who, with which Idempotency-Key, and what they confirmed.
type OrderInput struct {
	UserID             int64         `json:"userId"`
	IdempotencyKey     string        `json:"idempotencyKey"`
	RequestHash        string        `json:"requestHash"`
	PriceVersion       string        `json:"priceVersion"`
	AddressID          int64         `json:"addressId"`
	PaymentMethodToken string        `json:"paymentMethodToken"`
	HoldTTL            time.Duration `json:"holdTtl"`
	Provider           string        `json:"provider"`
	// StepRetryWindow bounds the retries of each step after the answer; when it runs out the
	// order waits for support. Zero means the default (2 minutes).
	StepRetryWindow time.Duration `json:"stepRetryWindow,omitempty"`
}

// PlaceOrderResult is the outcome of placing the order, as soon as reserve and authorize are
// done; the API renders it (and renders the same one for every repeat of the key).
type PlaceOrderResult struct {
	Outcome       string                `json:"outcome"`
	OrderID       int64                 `json:"orderId,omitempty"`
	Status        string                `json:"status,omitempty"`
	Payment       *PaymentView          `json:"payment,omitempty"`
	HoldExpiresAt *time.Time            `json:"holdExpiresAt,omitempty"`
	Short         []inventory.ShortLine `json:"short,omitempty"`
	PriceVersion  string                `json:"priceVersion,omitempty"`
	RejectCode    string                `json:"rejectCode,omitempty"`
	Message       string                `json:"message,omitempty"`
}

// PaymentView is the payment as the shopper sees it.
type PaymentView struct {
	Status      string `json:"status"`
	RedirectURL string `json:"redirectUrl,omitempty"`
}

// PaymentSignal is the provider's word on the payment: from its signed webhook, or from the
// payment reconciler that asked it.
type PaymentSignal struct {
	EventID  string `json:"eventId"`
	IntentID string `json:"intentId"`
	Status   string `json:"status"`
	// Source says who learnt it ("webhook" when empty).
	Source string `json:"source,omitempty"`
}

// ShortfallSignal says a seller's lower count took some of the order's reserved stock.
type ShortfallSignal struct {
	SKUID       int64 `json:"skuId"`
	WarehouseID int32 `json:"warehouseId"`
}

// SupportRequest is what support staff send from the Temporal UI.
type SupportRequest struct {
	Action string `json:"action"`
	Reason string `json:"reason"`
}

// Support actions.
const (
	ActionRetry  = "retry"
	ActionCancel = "cancel"
	ActionRefund = "refund"
)

// CancelResult answers the shopper's cancel.
type CancelResult struct {
	Status string `json:"status"`
}

// Attention is why an order waits for support.
type Attention struct {
	Step  string    `json:"step"`
	Error string    `json:"error"`
	Since time.Time `json:"since"`
}

// TimelineEntry is one thing that happened to the order.
type TimelineEntry struct {
	At     time.Time `json:"at"`
	Event  string    `json:"event"`
	Detail string    `json:"detail,omitempty"`
}

// OrderState is what the `status` query answers and the UI's details show.
type OrderState struct {
	OrderID        int64                  `json:"orderId"`
	CustomerID     int64                  `json:"customerId"`
	Status         string                 `json:"status"`
	FailureCode    string                 `json:"failureCode,omitempty"`
	PaymentStatus  string                 `json:"paymentStatus"`
	IntentID       string                 `json:"intentId,omitempty"`
	RedirectURL    string                 `json:"redirectUrl,omitempty"`
	Items          []pricing.Item         `json:"items,omitempty"`
	TotalMinor     int64                  `json:"totalMinor"`
	Currency       string                 `json:"currency,omitempty"`
	Allocations    []inventory.Allocation `json:"allocations,omitempty"`
	HoldExpiresAt  *time.Time             `json:"holdExpiresAt,omitempty"`
	NeedsAttention bool                   `json:"needsAttention"`
	Attention      *Attention             `json:"attention,omitempty"`
	Timeline       []TimelineEntry        `json:"timeline"`
}

// Activity references: methods on nil receivers name the registered activities.
var (
	ordersA   *activities.Orders
	paymentsA *activities.Payments
	stockA    *activities.Inventory
)

// holdGrace is how long after the hold's expiry the order stops waiting for its hold child (lost
// or terminated by hand) and expires on its own.
const holdGrace = 30 * time.Second

// maxTimeline bounds the timeline kept in the workflow's state.
const maxTimeline = 50

type orderFlow struct {
	in     OrderInput
	st     OrderState
	placed *PlaceOrderResult

	paid, declined, expired bool
	shortfall               bool
	cancel                  string // failure code of a requested cancel
	finished                bool

	support []SupportRequest
	parked  bool

	hold workflow.ChildWorkflowFuture
	// holdAt is the reservation's expiry while the hold child has not started yet (see ensureHold).
	holdAt *time.Time
	// lazy: the hold child starts when the order first waits, and search attributes are written
	// once per workflow task (see yield); false only for runs begun before that change.
	lazy        bool
	searchDirty bool
	// quick: steps run their short first try (see runStep).
	quick      bool
	compensate []compensation
	searched   searchState
}

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

// errParkedCancel and errParkedRefund end a parked step when support chose to stop the order.
var (
	errParkedCancel = errors.New("support cancelled the order")
	errParkedRefund = errors.New("support refunded the order")
)

// OrderWorkflow is the checkout saga of one order: price check, order row, reserve, authorize,
// then wait for the payment (3-D Secure), the hold's expiry, a cancel or a seller shortfall;
// confirm, capture, done. Whatever stops it midway is compensated in reverse — payment reversed,
// stock released — on a disconnected context, so compensation runs even after cancellation.
func OrderWorkflow(ctx workflow.Context, in OrderInput) (OrderState, error) {
	w := &orderFlow{in: in, st: OrderState{CustomerID: in.UserID, PaymentStatus: "PENDING"}}
	w.lazy = workflow.GetVersion(ctx, lazyChange, workflow.DefaultVersion, 1) == 1
	if err := w.registerHandlers(ctx); err != nil {
		return w.st, err
	}
	w.run(ctx)
	w.flushSearch(ctx)
	w.finished = true
	err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
	if err != nil && !temporal.IsCanceledError(err) {
		return w.st, err
	}
	return w.st, nil
}

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
				return temporal.NewApplicationError("this Idempotency-Key was used with a different request",
					ErrTypeIdempotencyKeyReused)
			}
			return nil
		}}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateCancel,
		func(ctx workflow.Context) (CancelResult, error) {
			if w.cancel == "" {
				w.cancel = FailCancelledByShopper
			}
			if err := workflow.Await(ctx, func() bool { return w.finished || isFinal(w.st.Status) }); err != nil {
				return CancelResult{}, err
			}
			return CancelResult{Status: w.st.Status}, nil
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context) error {
			if w.placed == nil || w.st.OrderID == 0 || !w.cancellable() {
				return temporal.NewApplicationError("the order can no longer be cancelled", ErrTypeNotCancellable, w.st.Status)
			}
			return nil
		}}); err != nil {
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
	workflow.Go(ctx, func(ctx workflow.Context) {
		ch := workflow.GetSignalChannel(ctx, SignalPaymentResult)
		for {
			var s PaymentSignal
			ch.Receive(ctx, &s)
			source := s.Source
			if source == "" {
				source = "webhook"
			}
			w.onPayment(s.Status, source+" "+s.EventID)
		}
	})
	workflow.Go(ctx, func(ctx workflow.Context) {
		ch := workflow.GetSignalChannel(ctx, SignalHoldExpired)
		for {
			var released int
			ch.Receive(ctx, &released)
			w.expired = true
			w.note(ctx, "hold expired", fmt.Sprintf("%d reservation(s) released by the hold", released))
		}
	})
	workflow.Go(ctx, func(ctx workflow.Context) {
		ch := workflow.GetSignalChannel(ctx, SignalStockShortfall)
		for {
			var s ShortfallSignal
			ch.Receive(ctx, &s)
			w.shortfall = true
			w.note(ctx, "stock shortfall", fmt.Sprintf("seller count took SKU %d in warehouse %d", s.SKUID, s.WarehouseID))
		}
	})
	workflow.Go(ctx, func(ctx workflow.Context) {
		ch := workflow.GetSignalChannel(ctx, SupportAction)
		for {
			var req SupportRequest
			ch.Receive(ctx, &req)
			if err := w.validSupport(req); err != nil {
				w.note(ctx, "support action ignored", err.Error())
				continue
			}
			w.support = append(w.support, req)
		}
	})
	return nil
}

func (w *orderFlow) validSupport(req SupportRequest) error {
	switch req.Action {
	case ActionRetry, ActionCancel, ActionRefund:
	default:
		return temporal.NewApplicationError(`action must be "retry", "cancel" or "refund"`, ErrTypeInvalidSupportAction)
	}
	if strings.TrimSpace(req.Reason) == "" {
		return temporal.NewApplicationError("a reason is required", ErrTypeInvalidSupportAction)
	}
	if isFinal(w.st.Status) || w.finished {
		return temporal.NewApplicationError("the order is already "+w.st.Status, ErrTypeInvalidSupportAction)
	}
	if req.Action != ActionCancel && !w.parked {
		return temporal.NewApplicationError(req.Action+" applies to an order that needs attention; this one is "+
			w.st.Status, ErrTypeInvalidSupportAction)
	}
	return nil
}

func (w *orderFlow) cancellable() bool {
	// An order already being failed (its answer may be out while it compensates) is not.
	return !isFinal(w.st.Status) && !w.paid && (!w.lazy || w.st.FailureCode == "")
}

func isFinal(status string) bool {
	return status == StatusConfirmed || status == StatusFailed || status == StatusCancelled
}

func (w *orderFlow) onPayment(status, source string) {
	switch status {
	case "AUTHORIZED", "CAPTURED":
		w.paid = true
	case "DECLINED":
		w.declined = true
	}
	w.st.PaymentStatus = status
	w.st.Timeline = appendTimeline(w.st.Timeline, TimelineEntry{Event: "payment " + strings.ToLower(status), Detail: source})
}

// run is the saga. Every path ends in a final status written to the order row.
func (w *orderFlow) run(ctx workflow.Context) {
	lctx := workflow.WithLocalActivityOptions(ctx, placeOptions)

	// 1. Price check: the cart priced now must match the priceVersion the shopper confirmed.
	var quote pricing.Quote
	err := workflow.ExecuteLocalActivity(lctx, ordersA.CheckPrices,
		activities.CheckPricesInput{UserID: w.in.UserID, IdempotencyKey: w.in.IdempotencyKey,
			PriceVersion: w.in.PriceVersion}).Get(ctx, &quote)
	if err != nil {
		w.refuseBeforeOrder(ctx, err)
		return
	}
	w.st.Items, w.st.TotalMinor, w.st.Currency = quote.Items, quote.TotalMinor, quote.Currency

	// 2. The order row, under the unique (user, Idempotency-Key).
	var created activities.CreatedOrder
	err = workflow.ExecuteLocalActivity(lctx, ordersA.CreateOrder, activities.CreateOrderInput{
		UserID: w.in.UserID, IdempotencyKey: w.in.IdempotencyKey, RequestHash: w.in.RequestHash,
		WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID, RunID: workflow.GetInfo(ctx).WorkflowExecution.RunID,
		AddressID: w.in.AddressID, Quote: quote,
		Provider: w.in.Provider}).Get(ctx, &created)
	if err != nil {
		w.refuseBeforeOrder(ctx, err)
		return
	}
	w.st.OrderID = created.OrderID
	if created.Existing {
		// An earlier, closed run of this request made the order and answered it; its answer is
		// recorded under the key, and this run must not touch the order.
		w.placed = &PlaceOrderResult{Outcome: OutcomeReplay, OrderID: created.OrderID}
		return
	}
	w.setStatus(ctx, StatusPendingPayment, "order created")

	// 3. Reserve every line or none.
	lines := make([]inventory.Line, len(quote.Items))
	for i, it := range quote.Items {
		lines[i] = inventory.Line{SKUID: it.SKUID, Quantity: it.Quantity}
	}
	var res inventory.Reservation
	err = workflow.ExecuteLocalActivity(lctx, stockA.Reserve, activities.ReserveInput{OrderID: created.OrderID,
		Lines: lines, ShipTo: created.ShipTo, Hold: w.in.HoldTTL}).Get(ctx, &res)
	if err != nil {
		var appErr *temporal.ApplicationError
		if errors.As(err, &appErr) && appErr.Type() == activities.ErrTypeOutOfStock {
			var short []inventory.ShortLine
			_ = appErr.Details(&short)
			w.fail(ctx, FailOutOfStock, &PlaceOrderResult{Outcome: OutcomeOutOfStock, Short: short})
			return
		}
		// The database failed and retries ran out; the reservation may still have committed, so
		// it is released like any other.
		w.push("release stock", w.releaseStock, compensateStock)
		w.fail(ctx, FailUnavailable, &PlaceOrderResult{Outcome: OutcomeUnavailable})
		return
	}
	w.push("release stock", w.releaseStock, compensateStock)
	w.st.Allocations = res.Allocations
	for _, a := range res.Allocations {
		if a.Status == inventory.StatusReleased {
			// This order's stock was already given back (a reset run of an order whose hold ended).
			w.fail(ctx, FailStockReleased, &PlaceOrderResult{Outcome: OutcomeOutOfStock})
			return
		}
	}
	expires := res.ExpiresAt
	w.st.HoldExpiresAt = &expires
	if w.lazy {
		w.holdAt = &expires
	} else {
		w.startHold(ctx, expires) // a run begun before the lazy hold child
	}
	_ = workflow.ExecuteLocalActivity(lctx, ordersA.SetHold, activities.SetHoldInput{OrderID: created.OrderID,
		ExpiresAt: expires}).Get(ctx, nil)
	w.note(ctx, "reserved", allocationText(res.Allocations))

	// 4. Authorize the total, with the order's own idempotency key. Its compensation is
	// registered first: an authorization whose answer was lost is still reversed.
	w.push("reverse payment", w.reversePayment, compensatePayment)
	pay, err := w.authorize(ctx, lctx)
	if err != nil {
		w.fail(ctx, FailPaymentUnavailable, &PlaceOrderResult{Outcome: OutcomePaymentUnavailable})
		return
	}
	w.st.IntentID, w.st.RedirectURL = pay.IntentID, pay.RedirectURL
	w.onPayment(pay.Status, "authorize")
	if w.declined {
		w.fail(ctx, FailPaymentDeclined, &PlaceOrderResult{Outcome: OutcomePaymentDeclined})
		return
	}
	w.updateDetails(ctx)

	// 5. Answer the shopper.
	w.answer(ctx, &PlaceOrderResult{Outcome: OutcomeCreated, OrderID: w.st.OrderID, Status: StatusPendingPayment,
		Payment: &PaymentView{Status: pay.Status, RedirectURL: pay.RedirectURL}, HoldExpiresAt: w.st.HoldExpiresAt})

	// 6. Wait for the payment, the hold's expiry, a cancel or a shortfall.
	if stop := w.awaitOutcome(ctx); stop != "" {
		w.fail(ctx, stop, nil)
		return
	}

	// 7. Confirm the stock, capture the money, done.
	err = w.step(ctx, "confirm", func(ctx workflow.Context) error {
		return workflow.ExecuteLocalActivity(w.stepCtx(ctx), stockA.Confirm, w.st.OrderID).Get(ctx, nil)
	})
	if err != nil {
		w.failAfterStep(ctx, err, FailStockReleased)
		return
	}
	w.holdAt = nil // nothing left to hold
	w.push("restock", w.restock, compensateStock)
	w.note(ctx, "stock confirmed", "")
	err = w.step(ctx, "capture", func(ctx workflow.Context) error {
		var p activities.PaymentResult
		if err := workflow.ExecuteLocalActivity(w.stepCtx(ctx), paymentsA.Capture, w.st.OrderID).Get(ctx, &p); err != nil {
			return err
		}
		w.onPayment(p.Status, "capture")
		return nil
	})
	if err != nil {
		w.failAfterStep(ctx, err, FailPaymentDeclined)
		return
	}
	err = w.step(ctx, "complete", func(ctx workflow.Context) error {
		return workflow.ExecuteLocalActivity(w.stepCtx(ctx), ordersA.Transition, activities.TransitionInput{
			OrderID: w.st.OrderID, To: StatusConfirmed}).Get(ctx, nil)
	})
	if err != nil {
		w.failAfterStep(ctx, err, FailPaymentDeclined)
		return
	}
	w.compensate = nil
	w.setStatus(ctx, StatusConfirmed, "payment captured, stock confirmed")
	w.settleHold(ctx)
}

// authorize asks the provider for the money. A timeout is never guessed at: the provider is asked
// with the same key what happened, and a key it never saw is simply authorized again.
func (w *orderFlow) authorize(ctx, lctx workflow.Context) (activities.PaymentResult, error) {
	in := activities.AuthorizeInput{OrderID: w.st.OrderID, AmountMinor: w.st.TotalMinor, Currency: w.st.Currency,
		Token: w.in.PaymentMethodToken}
	var pay activities.PaymentResult
	for attempt := 0; attempt < 3; attempt++ {
		err := workflow.ExecuteLocalActivity(lctx, paymentsA.Authorize, in).Get(ctx, &pay)
		if err == nil {
			return pay, nil
		}
		if !activities.FailedWith(err, problem.PaymentOutcomeUnknown) {
			return pay, err
		}
		w.st.PaymentStatus = activities.PaymentUnknown
		w.note(ctx, "payment outcome unknown", "asking the provider")
		w.yield(ctx)
		if err := workflow.ExecuteLocalActivity(lctx, paymentsA.ResolvePayment, w.st.OrderID).Get(ctx, &pay); err != nil {
			// The provider cannot be asked now: answer UNKNOWN and keep asking while waiting.
			return activities.PaymentResult{Status: activities.PaymentUnknown}, nil
		}
		if pay.Status != activities.PaymentNotFound {
			return pay, nil
		}
	}
	return activities.PaymentResult{Status: activities.PaymentUnknown}, nil
}

// awaitOutcome waits until the payment is decided or the order must stop, and returns the
// failure code when it must stop.
func (w *orderFlow) awaitOutcome(ctx workflow.Context) string {
	deadline := w.st.HoldExpiresAt.Add(holdGrace)
	for {
		wait := deadline.Sub(workflow.Now(ctx))
		if w.st.PaymentStatus == activities.PaymentUnknown && wait > 10*time.Second {
			wait = 10 * time.Second
		}
		decided := func() bool {
			return w.paid || w.declined || w.expired || w.shortfall || w.cancel != "" || len(w.support) > 0
		}
		ok, err := true, error(nil)
		if !decided() {
			// Only wait (a durable timer) when there is something to wait for: an order paid at
			// once goes straight on.
			w.yield(ctx)
			ok, err = workflow.AwaitWithTimeout(ctx, max(wait, 0), decided)
		}
		if err != nil { // the workflow itself was cancelled (from the UI)
			if w.cancel == "" {
				w.cancel = FailCancelledBySupport
			}
		}
		for len(w.support) > 0 {
			req := w.support[0]
			w.support = w.support[1:]
			w.recordSupport(ctx, req, "")
			if req.Action == ActionCancel || req.Action == ActionRefund {
				w.cancel = FailCancelledBySupport
			}
		}
		switch {
		case w.cancel != "":
			return w.cancel
		case w.shortfall:
			return FailStockShortfall
		case w.expired:
			return FailHoldExpired
		case w.declined:
			return FailPaymentDeclined
		case w.paid:
			return ""
		}
		if !ok && !workflow.Now(ctx).Before(deadline) {
			w.expired = true
			w.note(ctx, "hold expired", "no word from the hold child; expiring here")
			return FailHoldExpired
		}
		if w.st.PaymentStatus == activities.PaymentUnknown {
			var pay activities.PaymentResult
			rctx := workflow.WithLocalActivityOptions(ctx, placeOptions)
			if err := workflow.ExecuteLocalActivity(rctx, paymentsA.ResolvePayment, w.st.OrderID).Get(ctx, &pay); err == nil &&
				pay.Status != activities.PaymentNotFound {
				w.st.IntentID = pay.IntentID
				w.onPayment(pay.Status, "provider asked")
			}
		}
	}
}

// step runs a step after the shopper's answer. When it fails for a reason retries cannot fix
// quickly (its retries are spent), the order is parked in NEEDS_ATTENTION with the step and the
// error, and waits for support: retry runs the step again, cancel and refund stop the order. A
// parked step also retries on its own every ParkRetryEvery, so an outage that ends needs nobody.
// Business refusals (a released reservation, a refused capture) return at once.
func (w *orderFlow) step(ctx workflow.Context, name string, run func(workflow.Context) error) error {
	return w.runStep(ctx, name, run, false)
}

// mustStep is step for a compensation: it cannot be skipped, so every support action is a retry.
func (w *orderFlow) mustStep(ctx workflow.Context, name string, run func(workflow.Context) error) error {
	return w.runStep(ctx, name, run, true)
}

// try runs a step's work once through: a short first try, whose retries stay inside this
// workflow task, then, if it failed, the step's longer retries. Those wait on durable timers, so
// the order is about to wait: it yields first (the hold child starts if the order holds stock, the
// search attributes are written). Runs begun before that change go straight to the long retries.
func (w *orderFlow) try(ctx workflow.Context, run func(workflow.Context) error) error {
	if w.lazy {
		w.quick = true
		err := run(ctx)
		w.quick = false
		if err == nil || isBusinessRefusal(err) {
			return err
		}
		w.yield(ctx)
	}
	return run(ctx)
}

func (w *orderFlow) runStep(ctx workflow.Context, name string, run func(workflow.Context) error, must bool) error {
	for {
		err := w.try(ctx, run)
		if err == nil || isBusinessRefusal(err) {
			return err
		}
		w.park(ctx, name, err)
		req := w.awaitSupport(ctx)
		if must && req.Action != ActionRetry {
			req = SupportRequest{Action: ActionRetry, Reason: req.Reason + " (giving stock and money back cannot be skipped: retrying)"}
		}
		w.recordSupport(ctx, req, name)
		w.unpark(ctx)
		switch req.Action {
		case ActionCancel:
			return errParkedCancel
		case ActionRefund:
			return errParkedRefund
		}
	}
}

// ParkRetryEvery is how long a parked step waits for support before it tries again by itself.
const ParkRetryEvery = 5 * time.Minute

func (w *orderFlow) awaitSupport(ctx workflow.Context) SupportRequest {
	w.yield(ctx)
	ok, err := workflow.AwaitWithTimeout(ctx, ParkRetryEvery, func() bool { return len(w.support) > 0 })
	switch {
	case err != nil:
		// The workflow was cancelled from the UI while parked: that is a cancel.
		return SupportRequest{Action: ActionCancel, Reason: "workflow cancelled"}
	case !ok:
		return SupportRequest{Action: ActionRetry, Reason: "automatic retry after " + ParkRetryEvery.String()}
	}
	req := w.support[0]
	w.support = w.support[1:]
	return req
}

func (w *orderFlow) park(ctx workflow.Context, step string, cause error) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	w.parked = true
	w.st.NeedsAttention = true
	w.st.Attention = &Attention{Step: step, Error: errorText(cause), Since: workflow.Now(ctx)}
	lctx := workflow.WithLocalActivityOptions(dctx, w.stepOptions())
	_ = workflow.ExecuteLocalActivity(lctx, ordersA.Park, activities.ParkInput{OrderID: w.st.OrderID, Step: step,
		Error: w.st.Attention.Error}).Get(dctx, nil)
	w.setStatus(dctx, StatusNeedsAttention, step+" failed: "+w.st.Attention.Error)
	workflow.GetLogger(ctx).Warn("order needs attention", "order_id", w.st.OrderID, "step", step, "error", cause)
}

func (w *orderFlow) unpark(ctx workflow.Context) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	w.parked = false
	w.st.NeedsAttention = false
	w.st.Attention = nil
	lctx := workflow.WithLocalActivityOptions(dctx, w.stepOptions())
	_ = workflow.ExecuteLocalActivity(lctx, ordersA.Resume, w.st.OrderID).Get(dctx, nil)
	w.setStatus(dctx, StatusPendingPayment, "resumed by support")
}

func (w *orderFlow) recordSupport(ctx workflow.Context, req SupportRequest, step string) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	detail := map[string]any{"action": req.Action, "reason": req.Reason}
	if step != "" {
		detail["step"] = step
	}
	lctx := workflow.WithLocalActivityOptions(dctx, w.stepOptions())
	_ = workflow.ExecuteLocalActivity(lctx, ordersA.Timeline, activities.TimelineInput{OrderID: w.st.OrderID,
		Kind: "support_action", Detail: detail}).Get(dctx, nil)
	w.note(ctx, "support "+req.Action, req.Reason)
}

// failAfterStep ends the order after a step after the answer failed for good.
func (w *orderFlow) failAfterStep(ctx workflow.Context, err error, code string) {
	switch {
	case errors.Is(err, errParkedCancel):
		code = FailCancelledBySupport
	case errors.Is(err, errParkedRefund):
		code = FailRefundedBySupport
	case activities.FailedWith(err, problem.ReservationNotActive):
		code = FailStockReleased
		if w.expired {
			code = FailHoldExpired
		}
	}
	w.fail(ctx, code, nil)
}

// fail compensates what was done, in reverse, on a disconnected context, and writes the final
// status. answer, when given, is the shopper's answer (the order failed before it was placed).
func (w *orderFlow) fail(ctx workflow.Context, code string, answer *PlaceOrderResult) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	status := StatusFailed
	if code == FailCancelledByShopper || code == FailCancelledBySupport || code == FailRefundedBySupport {
		status = StatusCancelled
	}
	w.st.FailureCode = code
	if answer != nil && answer.Outcome == OutcomeUnavailable {
		// A dependency is failing and compensation may itself wait: the shopper hears first.
		answer.OrderID, answer.Status = w.st.OrderID, status
		w.answer(dctx, answer)
	}
	if w.lazy && w.hold == nil {
		// No hold child to start now: the stock is given back here, directly (and if that has to
		// wait, the order parks; the reservation sweeper is the backstop).
		w.holdAt = nil
	}
	// Stock first: giving it back never depends on the payment provider. Then the shopper hears
	// (a decline answers with the stock already back), then the money goes back.
	w.compensateKind(dctx, compensateStock)
	if answer != nil {
		answer.OrderID, answer.Status = w.st.OrderID, status
		w.answer(dctx, answer)
	}
	w.compensateKind(dctx, compensatePayment)
	w.compensate = nil
	_ = w.mustStep(dctx, "finish", func(ctx workflow.Context) error {
		return workflow.ExecuteLocalActivity(w.stepCtx(ctx), ordersA.Transition, activities.TransitionInput{
			OrderID: w.st.OrderID, To: status, Code: code}).Get(ctx, nil)
	})
	w.setStatus(dctx, status, code)
}

// compensateKind runs the compensations of one kind, last registered first.
func (w *orderFlow) compensateKind(ctx workflow.Context, kind int) {
	for i := len(w.compensate) - 1; i >= 0; i-- {
		if c := w.compensate[i]; c.kind == kind {
			_ = w.mustStep(ctx, c.name, c.run)
		}
	}
}

// refuseBeforeOrder answers a request refused before any order row exists (prices changed, empty
// cart, unknown address).
func (w *orderFlow) refuseBeforeOrder(ctx workflow.Context, err error) {
	res := &PlaceOrderResult{Outcome: OutcomeRejected, Message: errorText(err)}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		switch appErr.Type() {
		case activities.ErrTypePriceChanged:
			var d activities.PriceChangedDetails
			_ = appErr.Details(&d)
			res = &PlaceOrderResult{Outcome: OutcomePriceChanged, PriceVersion: d.PriceVersion}
		case activities.ErrTypeCartEmpty:
			res.RejectCode, res.Message = "CART_EMPTY", "the cart is empty"
		case activities.ErrTypeCartInvalid:
			res.RejectCode, res.Message = "CART_INVALID", appErr.Message()
		case activities.ErrTypeAddressNotFound:
			res.RejectCode, res.Message = "ADDRESS_NOT_FOUND", "unknown address"
		case activities.ErrTypeKeyReused:
			res.RejectCode, res.Message = "IDEMPOTENCY_KEY_REUSED", appErr.Message()
		}
	}
	if res.Outcome == OutcomeRejected && res.RejectCode == "" {
		// Not a refusal: the database failed and retries ran out. Nothing was written, so no key
		// is recorded; the shopper may repeat the same request.
		w.st.Status = StatusFailed
		w.answerUnavailable(ctx)
		return
	}
	w.answer(ctx, res)
}

// answerUnavailable answers "try again" without recording it under the key: no order exists, and
// a repeat of the request starts afresh.
func (w *orderFlow) answerUnavailable(ctx workflow.Context) {
	if w.placed == nil {
		w.placed = &PlaceOrderResult{Outcome: OutcomeUnavailable, Message: "the order could not be placed now; try again"}
	}
}

// answer records the shopper's answer under the key and releases the place-order update.
func (w *orderFlow) answer(ctx workflow.Context, res *PlaceOrderResult) {
	if w.placed != nil {
		return
	}
	if res.Outcome == OutcomeUnavailable {
		// A failure of ours, not an answer to the request: not recorded under the key, so that a
		// repeat is answered from the order as it stands.
		w.placed = res
		return
	}
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	record := activities.RecordOutcomeInput{UserID: w.in.UserID, IdempotencyKey: w.in.IdempotencyKey,
		RequestHash: w.in.RequestHash, OrderID: w.st.OrderID, Outcome: res}
	if w.lazy {
		// The answer leaves with this workflow task. It is recorded as a step is run, with the
		// step's retries: a repeat after the workflow closed must find it, and while the record
		// is retried the workflow stays open, so a repeat still attaches to it and gets w.placed.
		// (Only a database down for the whole retry window leaves it unrecorded; a repeat is then
		// answered from the order as it stands.)
		w.placed = res
		_ = w.try(dctx, func(ctx workflow.Context) error {
			return workflow.ExecuteLocalActivity(w.stepCtx(ctx), ordersA.RecordOutcome, record).Get(ctx, nil)
		})
		return
	}
	lctx := workflow.WithLocalActivityOptions(dctx, placeOptions)
	_ = workflow.ExecuteLocalActivity(lctx, ordersA.RecordOutcome, record).Get(dctx, nil)
	w.placed = res
}

func (w *orderFlow) push(name string, run func(workflow.Context) error, kind int) {
	w.compensate = append(w.compensate, compensation{name: name, kind: kind, run: run})
}

// lazyChange marks the change from starting the hold child right after the reservation and
// upserting search attributes at every change, to starting the child when the order first waits
// and upserting once per workflow task (workflow.GetVersion keeps older runs replaying).
const lazyChange = "lazy-hold-child-and-attributes"

// yield is called where the order is about to wait for something other than a local activity,
// so that what others see of it is current while it waits: the hold child runs if the order holds
// stock, and the search attributes say what the order is. Every change made since the last wait
// goes out in the same workflow task completion, so writing them here rather than at each change
// hides nothing from the outside and costs one upsert instead of several.
func (w *orderFlow) yield(ctx workflow.Context) {
	w.ensureHold(ctx)
	w.flushSearch(ctx)
}

// ensureHold starts the hold-expiry child, once, if the order holds stock. It is called whenever
// the order is about to wait (for the payment, for support, on an unknown payment outcome), not
// for an order decided in its first workflow task: such an order never waits on its hold, and a
// child started and stopped at once would cost two workflows' writes per order. In the rare case
// that the first task is interrupted after the reservation (a worker crash, a terminate from the
// UI), the reservation still ends at its expiry: the reservation sweeper releases it.
func (w *orderFlow) ensureHold(ctx workflow.Context) {
	if w.hold == nil && w.holdAt != nil {
		w.startHold(ctx, *w.holdAt)
	}
}

// startHold starts the hold-expiry child. It is abandoned when this workflow closes, so stock is
// released on time even if support terminates the order.
func (w *orderFlow) startHold(ctx workflow.Context, expires time.Time) {
	// Disconnected: cancelling the order must not cancel its hold (the hold releases on its own).
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	cctx := workflow.WithChildOptions(dctx, workflow.ChildWorkflowOptions{
		WorkflowID:            HoldWorkflowID(w.st.OrderID),
		ParentClosePolicy:     enumspb.PARENT_CLOSE_POLICY_ABANDON,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY,
		StaticSummary:         fmt.Sprintf("Stock hold of order %d until %s", w.st.OrderID, expires.UTC().Format(time.RFC3339)),
	})
	w.hold = workflow.ExecuteChildWorkflow(cctx, HoldWorkflow, HoldInput{OrderID: w.st.OrderID, ExpiresAt: expires,
		ParentWorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID})
}

// releaseStock is the reservation's compensation: the hold child releases it; if the child is
// gone (terminated by hand) the release runs here.
func (w *orderFlow) releaseStock(ctx workflow.Context) error {
	if w.hold != nil {
		w.flushSearch(ctx)
		var exec workflow.Execution
		if err := w.hold.GetChildWorkflowExecution().Get(ctx, &exec); err == nil {
			if err := workflow.SignalExternalWorkflow(ctx, exec.ID, exec.RunID, SignalHoldRelease, nil).Get(ctx, nil); err == nil {
				var res HoldResult
				if err := w.hold.Get(ctx, &res); err == nil {
					return nil
				}
			}
		}
	}
	if err := workflow.ExecuteLocalActivity(w.stepCtx(ctx), stockA.Release, w.st.OrderID).Get(ctx, nil); err != nil {
		return err
	}
	w.holdAt = nil // released: nothing left to hold
	return nil
}

func (w *orderFlow) reversePayment(ctx workflow.Context) error {
	var p activities.PaymentResult
	if err := workflow.ExecuteLocalActivity(w.stepCtx(ctx), paymentsA.Reverse, w.st.OrderID).Get(ctx, &p); err != nil {
		return err
	}
	if p.Status != activities.PaymentNotFound {
		w.onPayment(p.Status, "compensation")
	}
	return nil
}

func (w *orderFlow) restock(ctx workflow.Context) error {
	return workflow.ExecuteLocalActivity(w.stepCtx(ctx), stockA.Restock, w.st.OrderID).Get(ctx, nil)
}

// settleHold tells the hold child the order is confirmed, so it stops waiting.
func (w *orderFlow) settleHold(ctx workflow.Context) {
	if w.hold == nil {
		return
	}
	w.flushSearch(ctx)
	var exec workflow.Execution
	if err := w.hold.GetChildWorkflowExecution().Get(ctx, &exec); err != nil {
		return
	}
	_ = workflow.SignalExternalWorkflow(ctx, exec.ID, exec.RunID, SignalHoldSettled, nil).Get(ctx, nil)
}

// setStatus keeps the order's status, its search attributes and the UI's details current.
func (w *orderFlow) setStatus(ctx workflow.Context, status, detail string) {
	w.st.Status = status
	w.st.Timeline = appendTimeline(w.st.Timeline, TimelineEntry{At: workflow.Now(ctx), Event: strings.ToLower(status), Detail: detail})
	w.updateDetails(ctx)
}

func (w *orderFlow) note(ctx workflow.Context, event, detail string) {
	w.st.Timeline = appendTimeline(w.st.Timeline, TimelineEntry{At: workflow.Now(ctx), Event: event, Detail: detail})
	w.updateDetails(ctx)
}

func (w *orderFlow) updateDetails(ctx workflow.Context) {
	if w.st.OrderID == 0 {
		return
	}
	// Search attributes change only when their values do: each upsert is an event in the history
	// and a write to the visibility store.
	w.searchDirty = true
	if !w.lazy {
		w.flushSearch(ctx)
	}
	workflow.SetCurrentDetails(ctx, details(w.st))
}

// flushSearch writes the search attributes if they changed since they were last written.
func (w *orderFlow) flushSearch(ctx workflow.Context) {
	if !w.searchDirty || w.st.OrderID == 0 {
		return
	}
	w.searchDirty = false
	attrs := searchState{w.st.OrderID, w.st.Status, w.st.PaymentStatus, w.st.NeedsAttention}
	if attrs == w.searched {
		return
	}
	w.searched = attrs
	_ = workflow.UpsertTypedSearchAttributes(ctx,
		AttrOrderID.ValueSet(w.st.OrderID),
		AttrCustomerID.ValueSet(w.st.CustomerID),
		AttrOrderStatus.ValueSet(w.st.Status),
		AttrPaymentStatus.ValueSet(w.st.PaymentStatus),
		AttrNeedsAttention.ValueSet(w.st.NeedsAttention))
}

// searchState is what the order's search attributes last said.
type searchState struct {
	orderID        int64
	status         string
	paymentStatus  string
	needsAttention bool
}

// details is the markdown the Temporal UI shows for the order: readable without decoding payloads.
func details(st OrderState) string {
	var b strings.Builder
	add := func(format string, args ...any) { b.WriteString(fmt.Sprintf(format, args...)) }
	add("**Order %d** · customer %d · **%s**", st.OrderID, st.CustomerID, st.Status)
	if st.FailureCode != "" {
		add(" (%s)", st.FailureCode)
	}
	add("\n\nPayment: **%s**", st.PaymentStatus)
	if st.IntentID != "" {
		add(" · intent `%s`", st.IntentID)
	}
	add("\n\nTotal: %s %s", money.Format(st.TotalMinor), st.Currency)
	if st.HoldExpiresAt != nil {
		add(" · hold expires %s", st.HoldExpiresAt.UTC().Format(time.RFC3339))
	}
	b.WriteString("\n\n| SKU | title | qty | unit price |\n|---|---|---|---|\n")
	for _, it := range st.Items {
		add("| %d | %s | %d | %s |\n", it.SKUID, strings.ReplaceAll(it.Title, "|", "/"), it.Quantity, money.Format(it.UnitPriceMinor))
	}
	if len(st.Allocations) > 0 {
		add("\nWarehouses: %s\n", allocationText(st.Allocations))
	}
	if st.Attention != nil {
		add("\n**Needs attention**: step `%s` failed: %s. Send signal or update `support-action` "+
			"with `{\"action\": \"retry\" | \"cancel\" | \"refund\", \"reason\": \"...\"}`.\n", st.Attention.Step, st.Attention.Error)
	}
	return b.String()
}

func allocationText(as []inventory.Allocation) string {
	parts := make([]string, len(as))
	for i, a := range as {
		parts[i] = fmt.Sprintf("%d× SKU %d from warehouse %d", a.Quantity, a.SKUID, a.WarehouseID)
	}
	return strings.Join(parts, ", ")
}

func appendTimeline(tl []TimelineEntry, e TimelineEntry) []TimelineEntry {
	tl = append(tl, e)
	if len(tl) > maxTimeline {
		tl = tl[len(tl)-maxTimeline:]
	}
	return tl
}

// isBusinessRefusal tells refusals (retrying cannot help, the order must take another path) from
// failures (retrying later may help: park and ask support).
func isBusinessRefusal(err error) bool {
	return activities.FailedWith(err, problem.ReservationNotActive) || activities.FailedWith(err, problem.NoReservation) ||
		errors.Is(err, errParkedCancel) || errors.Is(err, errParkedRefund)
}

func errorText(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Message()
	}
	if err == nil {
		return ""
	}
	return err.Error()
}

// Activity options. Placing the order is on the shopper's critical path: local activities, short
// timeouts, few quick retries. Later steps retry longer but still bounded, so a dependency that
// stays down parks the order for support instead of hiding the problem.
var (
	placeOptions = workflow.LocalActivityOptions{
		StartToCloseTimeout:    5 * time.Second,
		ScheduleToCloseTimeout: 20 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, BackoffCoefficient: 2,
			MaximumInterval: 2 * time.Second, MaximumAttempts: 4},
	}
	// quickStepOptions are a step's first try: a few quick attempts, retried in the worker
	// within the workflow task (no durable timer between them).
	quickStepOptions = workflow.LocalActivityOptions{
		StartToCloseTimeout:    5 * time.Second,
		ScheduleToCloseTimeout: 8 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, BackoffCoefficient: 2,
			MaximumInterval: time.Second, MaximumAttempts: 3},
	}
	defaultStepOptions = workflow.LocalActivityOptions{
		StartToCloseTimeout:    10 * time.Second,
		ScheduleToCloseTimeout: DefaultStepRetryWindow,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2,
			MaximumInterval: 20 * time.Second, MaximumAttempts: 8},
	}
)

// DefaultStepRetryWindow is how long a step after the answer retries before support is asked.
const DefaultStepRetryWindow = 2 * time.Minute

// stepCtx is ctx with the local activity options of a step's current try.
func (w *orderFlow) stepCtx(ctx workflow.Context) workflow.Context {
	return workflow.WithLocalActivityOptions(ctx, w.stepOptions())
}

func (w *orderFlow) stepOptions() workflow.LocalActivityOptions {
	if w.quick {
		return quickStepOptions
	}
	o := defaultStepOptions
	if d := w.in.StepRetryWindow; d > 0 {
		o.ScheduleToCloseTimeout = d
		o.StartToCloseTimeout = min(o.StartToCloseTimeout, d)
		rp := *o.RetryPolicy
		rp.MaximumInterval = min(rp.MaximumInterval, max(d/4, time.Second))
		o.RetryPolicy = &rp
	}
	return o
}
