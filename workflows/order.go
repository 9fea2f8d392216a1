package workflows

import (
	"encoding/json"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/internal/staff"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/order"
	"github.com/marketplace/checkout/payment"
	"github.com/marketplace/checkout/pricing"
)

// OrderInput is one POST /orders: who, with which Idempotency-Key, and what they confirmed.
type OrderInput struct {
	UserID         int64  `json:"userId"`
	IdempotencyKey string `json:"idempotencyKey"`
	RequestHash    string `json:"requestHash"`
	PriceVersion   string `json:"priceVersion"`
	AddressID      int64  `json:"addressId"`
	// PaymentMethodToken is carried only by orders placed through earlier releases of the API;
	// the API now keeps the token in PostgreSQL and the Authorize step reads it from there.
	PaymentMethodToken string `json:"paymentMethodToken,omitempty"`
	// HoldTTL, Provider and StepRetryWindow are carried only by orders placed through earlier
	// releases of the API, which read them from its own settings: those orders keep them. An
	// order now runs by the settings of the worker that places it (activities.SagaOptions).
	HoldTTL         time.Duration `json:"holdTtl,omitempty"`
	Provider        string        `json:"provider,omitempty"`
	StepRetryWindow time.Duration `json:"stepRetryWindow,omitempty"`
	// CouponCode is the coupon the shopper applied (empty: none).
	CouponCode string `json:"couponCode,omitempty"`
}

// PlaceOrderResult is the outcome of placing the order, as soon as reserve and authorize are
// done; the API renders it (and renders the same one for every repeat of the key).
type PlaceOrderResult struct {
	Outcome       Outcome               `json:"outcome"`
	OrderID       int64                 `json:"orderId,omitempty"`
	Status        order.Status          `json:"status,omitempty"`
	Payment       *PaymentView          `json:"payment,omitempty"`
	HoldExpiresAt *time.Time            `json:"holdExpiresAt,omitempty"`
	Short         []inventory.ShortLine `json:"short,omitempty"`
	PriceVersion  string                `json:"priceVersion,omitempty"`
	// RejectCode, Message and Details are the refusal of a REJECTED order, as its step raised it.
	RejectCode problem.Code    `json:"rejectCode,omitempty"`
	Message    string          `json:"message,omitempty"`
	Details    json.RawMessage `json:"details,omitempty"`
	// OpenOrderLimit and NextHoldEnd go with TOO_MANY_OPEN_ORDERS: the shopper's cap, and when
	// the first of their open orders ends by itself.
	OpenOrderLimit int        `json:"openOrderLimit,omitempty"`
	NextHoldEnd    *time.Time `json:"nextHoldEnd,omitempty"`
}

// PaymentView is the payment as the shopper sees it.
type PaymentView struct {
	Status      payment.Status `json:"status"`
	RedirectURL string         `json:"redirectUrl,omitempty"`
}

// PaymentSignal is the provider's word on the payment: from its signed webhook, or from the
// payment reconciler that asked it.
type PaymentSignal struct {
	EventID  string         `json:"eventId"`
	IntentID string         `json:"intentId"`
	Status   payment.Status `json:"status"`
	// Source says who learnt it ("webhook" when empty).
	Source string `json:"source,omitempty"`
}

// ShortfallSignal says a seller's lower count took some of the order's reserved stock.
type ShortfallSignal struct {
	SKUID       int64 `json:"skuId"`
	WarehouseID int32 `json:"warehouseId"`
}

// SupportRequest is what support staff send from the Temporal UI. Actor is the verified person who
// sends it: the API's codec endpoint writes it into the payload for the signed-in staff member
// (whatever was typed there), and an action without one is refused (update) or noted and ignored
// (signal).
type SupportRequest struct {
	Action string       `json:"action"`
	Reason string       `json:"reason"`
	Actor  *staff.Actor `json:"actor,omitempty"`
}

// Support actions.
const (
	ActionRetry  = "retry"
	ActionCancel = "cancel"
	ActionRefund = "refund"
)

// CancelResult answers the shopper's cancel.
type CancelResult struct {
	Status order.Status `json:"status"`
}

// Attention is why an order waits for support.
type Attention struct {
	Step  string `json:"step"`
	Error string `json:"error"`
	// Code is the failure's code (internal/problem) when no retry can change it (the step is not
	// retried on its own), also when a release before the codes raised it under a name of its own.
	Code  string    `json:"code,omitempty"`
	Since time.Time `json:"since"`
	// EscalatedAt is set once the order has waited for support past its escalation, and GivesUpAt
	// is then when its saga gives it up (none for a step giving stock or money back).
	EscalatedAt *time.Time `json:"escalatedAt,omitempty"`
	GivesUpAt   *time.Time `json:"givesUpAt,omitempty"`
}

// TimelineEntry is one thing that happened to the order; Actor names the staff member who did it.
type TimelineEntry struct {
	At     time.Time    `json:"at"`
	Event  string       `json:"event"`
	Detail string       `json:"detail,omitempty"`
	Actor  *staff.Actor `json:"actor,omitempty"`
}

// OrderState is what the `status` query answers and the UI's details show.
type OrderState struct {
	OrderID        int64                  `json:"orderId"`
	CustomerID     int64                  `json:"customerId"`
	Status         order.Status           `json:"status"`
	FailureCode    problem.Code           `json:"failureCode,omitempty"`
	PaymentStatus  payment.Status         `json:"paymentStatus"`
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

// OrderWorkflow is the checkout saga of one order: price check, order row, reserve, authorize,
// answer; then wait for the payment (3-D Secure), the hold's expiry, a cancel or a seller
// shortfall; confirm, capture, done. Whatever stops it midway is compensated — stock given back,
// then the payment reversed — on a disconnected context, so compensation runs even after
// cancellation. Every run is pinned to the build that began it (worker versioning), so this code
// runs only the orders it began.
func OrderWorkflow(ctx workflow.Context, in OrderInput) (OrderState, error) {
	w := &orderFlow{root: ctx, in: in, st: OrderState{CustomerID: in.UserID, PaymentStatus: payment.StatusPending}}
	if err := w.registerHandlers(ctx); err != nil {
		return w.st, err
	}
	w.run(ctx)
	w.flushSearch(ctx)
	if w.hold != nil {
		// Close only once the hold child's start is known: the event of its start would otherwise
		// arrive while this workflow completes, and the completion would have to be redone.
		_ = w.hold.GetChildWorkflowExecution().Get(ctx, nil)
	}
	w.flushWrites(ctx)
	w.phase = phaseDone
	err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
	if err != nil && !temporal.IsCanceledError(err) {
		return w.st, err
	}
	// The last look, in the task that completes the workflow: a completion that raced a new
	// event is redone with the event delivered, so none is left unseen.
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	w.reverseLateMoney(dctx)
	return w.st, nil
}

// phase is where the saga stands; handlers accept only what the saga will act on there.
type phase int

const (
	phasePlacing  phase = iota // before the shopper's answer
	phaseWaiting               // answered; waiting for the payment, the hold, a cancel or a shortfall
	phaseSettling              // paid: confirm, capture, complete
	phaseFailing               // giving stock and money back
	phaseDone
)

type orderFlow struct {
	// root is the workflow's own context, which a cancel from the UI cancels; the steps run on
	// disconnected ones.
	root   workflow.Context
	in     OrderInput
	st     OrderState
	placed *PlaceOrderResult
	phase  phase

	paid, declined, expired, shortfall bool
	// events are payment events not yet checked with the provider.
	events  []PaymentSignal
	cancel  problem.Code // why a requested cancel stops the order
	support []SupportRequest
	// parked is the step waiting for support (nil when none); parkedAt when a step first parked
	// the order, from which its deadlines run; escalation once it waited past the first.
	parked     *parking
	parkedAt   time.Time
	escalation *order.Escalation
	// staffActions counts the staff actions recorded by this run (each one's number in it).
	staffActions int

	// hold is the hold-expiry child once started; holdAt the reservation's expiry while stock is
	// held and the child has not started (it starts when the order first waits); holdLost says
	// the child ended without expiring, so the order keeps its own timer.
	hold     workflow.ChildWorkflowFuture
	holdAt   *time.Time
	holdLost bool
	// extending is true while an extension of the hold runs; extensionsUsed once no more are
	// allowed; holdMoved wakes the wait, whose own timer (when the child is gone) follows the hold.
	extending, extensionsUsed, holdMoved bool
	compensate                           []compensation

	searched    searchState
	searchDirty bool

	// saga is the timing the order runs by (see takeSaga).
	saga activities.SagaOptions

	// unrecorded is the answer to the request while it is not yet recorded under the key, and
	// unmirrored says the provider's authorization is not yet on the payments row: both ride in
	// the order's end, or are written before the order first waits (flushWrites).
	unrecorded *activities.RecordOutcomeInput
	unmirrored bool
}

// Activity references: methods on nil receivers name the registered activities.
var (
	ordersA   *activities.Orders
	paymentsA *activities.Payments
	stockA    *activities.Inventory
	reconA    *activities.PaymentReconciler
)

// holdGrace is how long after the hold's expiry an order whose hold child is lost waits before
// it expires on its own.
const holdGrace = 30 * time.Second

// run is the saga. Every path ends in a final status written to the order row.
func (w *orderFlow) run(ctx workflow.Context) {
	lctx := workflow.WithLocalActivityOptions(ctx, placeOptions)
	sctx := workflow.WithLocalActivityOptions(ctx, placeStoreOptions)
	// The input's timing until the order is created (none in a new order's: the defaults).
	w.saga = activities.SagaOptions{HoldTTL: w.in.HoldTTL, StepRetryWindow: w.in.StepRetryWindow, Provider: w.in.Provider}

	// 1. Price check: the cart priced now must match the priceVersion the shopper confirmed.
	var quote pricing.Quote
	err := workflow.ExecuteLocalActivity(sctx, ordersA.CheckPrices,
		activities.CheckPricesInput{UserID: w.in.UserID, IdempotencyKey: w.in.IdempotencyKey,
			PriceVersion: w.in.PriceVersion, CouponCode: w.in.CouponCode}).Get(ctx, &quote)
	if err != nil {
		w.refuseBeforeOrder(ctx, err)
		return
	}
	w.st.Items, w.st.TotalMinor, w.st.Currency = quote.Items, quote.TotalMinor, quote.Currency

	// 2. The order row, under the unique (user, Idempotency-Key).
	var created activities.CreatedOrder
	err = workflow.ExecuteLocalActivity(sctx, ordersA.CreateOrder, activities.CreateOrderInput{
		UserID: w.in.UserID, IdempotencyKey: w.in.IdempotencyKey, RequestHash: w.in.RequestHash,
		WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID, RunID: workflow.GetInfo(ctx).WorkflowExecution.RunID,
		AddressID: w.in.AddressID, Quote: quote}).Get(ctx, &created)
	if err != nil {
		w.refuseBeforeOrder(ctx, err)
		return
	}
	w.st.OrderID = created.OrderID
	w.takeSaga(created.Saga)
	if created.Existing {
		// The order is finished: an earlier, closed run of this request made and answered it, or
		// this run's first task did before its worker died. Its answer is recorded under the key
		// (or read from the order), and this run must not touch the order.
		w.placed = &PlaceOrderResult{Outcome: OutcomeReplay, OrderID: created.OrderID}
		return
	}
	w.setStatus(ctx, order.StatusPendingPayment, "order created")

	// 3. Reserve every line or none. The release is registered first: a reservation whose answer
	// was lost may still have committed.
	lines := make([]inventory.Line, len(quote.Items))
	for i, it := range quote.Items {
		lines[i] = inventory.Line{SKUID: it.SKUID, Quantity: it.Quantity}
	}
	w.push("release stock", w.releaseStock, compensateStock)
	var res inventory.Reservation
	err = workflow.ExecuteLocalActivity(sctx, stockA.Reserve, activities.ReserveInput{OrderID: created.OrderID,
		Lines: lines, Hold: w.saga.HoldTTL}).Get(ctx, &res)
	if err != nil {
		if refusal := activities.Refusal(err); refusal != nil && refusal.Code == problem.OutOfStock {
			d, _ := activities.DetailsOf[activities.OutOfStockDetails](refusal)
			w.fail(ctx, problem.OutOfStock, &PlaceOrderResult{Outcome: OutcomeOutOfStock, Short: d.Items})
			return
		}
		w.fail(ctx, problem.Unavailable, &PlaceOrderResult{Outcome: OutcomeUnavailable})
		return
	}
	w.st.Allocations = res.Allocations
	for _, a := range res.Allocations {
		if a.Status == inventory.StatusReleased {
			// This order's stock was already given back (a reset run of an order whose hold ended).
			w.fail(ctx, problem.StockReleased, &PlaceOrderResult{Outcome: OutcomeOutOfStock})
			return
		}
	}
	// The reservation's statement recorded the hold's end on the order too.
	expires := res.ExpiresAt
	w.st.HoldExpiresAt, w.holdAt = &expires, &expires
	w.note(ctx, "reserved", allocationText(res.Allocations))

	// 4. Authorize the total, with the order's own idempotency key. Its reversal is registered
	// first: an authorization whose answer was lost is still reversed.
	w.push("reverse payment", w.reversePayment, compensatePayment)
	pay, err := w.authorize(ctx, lctx)
	if err != nil {
		w.fail(ctx, problem.PaymentUnavailable, &PlaceOrderResult{Outcome: OutcomePaymentUnavailable})
		return
	}
	w.st.IntentID, w.st.RedirectURL = pay.IntentID, pay.RedirectURL
	w.onPayment(ctx, pay.Status, "authorize")
	if w.declined {
		w.fail(ctx, problem.PaymentDeclined, &PlaceOrderResult{Outcome: OutcomePaymentDeclined})
		return
	}

	// 5. Answer the shopper. The answer is recorded with the order's end, or before it first waits.
	w.answerLater(&PlaceOrderResult{Outcome: OutcomeCreated, OrderID: w.st.OrderID, Status: order.StatusPendingPayment,
		Payment: &PaymentView{Status: pay.Status, RedirectURL: pay.RedirectURL}, HoldExpiresAt: w.st.HoldExpiresAt})

	// 6. Wait for the payment, the hold's expiry, a cancel or a shortfall. An order paid at once
	// goes straight on, in this same workflow task.
	if stop := w.awaitOutcome(ctx); stop != "" {
		w.fail(ctx, stop, nil)
		return
	}

	// 7. Confirm the stock, capture the money, done.
	w.settle(ctx)
}

// takeSaga sets the timing the order runs by: the settings of the worker that created the order,
// as CreateOrder returned them; an order created by an earlier release, whose result carries none,
// keeps those of its input (run starts with them).
//
// The settings travel in the activity's result, recorded in the history, rather than being read
// from the worker by the workflow code: a replay then sees the values the order was placed with,
// whatever the replaying worker is configured with now. Read at each replay, a changed setting
// would silently change a running order's hold or retries, and the SDK's determinism check would
// not catch it, since it compares commands by type and by activity type and id (timers by id),
// never their durations, timeouts or inputs. No command changes either way, so runs of earlier
// releases replay as they ran.
func (w *orderFlow) takeSaga(s *activities.SagaOptions) {
	if s == nil {
		return
	}
	if s.HoldTTL > 0 {
		w.saga.HoldTTL = s.HoldTTL
	}
	if s.StepRetryWindow > 0 {
		w.saga.StepRetryWindow = s.StepRetryWindow
	}
	w.saga.ParkedEscalateAfter, w.saga.ParkedGiveUpAfter = s.ParkedEscalateAfter, s.ParkedGiveUpAfter
	w.saga.Provider = s.Provider
}

// authorize asks the provider for the money. A timeout is never guessed at: the provider is asked
// with the same key what happened, and a key it never saw is authorized again. All of it runs in
// the first workflow task; an outcome still unknown after that is left to awaitOutcome.
func (w *orderFlow) authorize(ctx, lctx workflow.Context) (activities.PaymentResult, error) {
	in := w.authorizeInput()
	var pay activities.PaymentResult
	for attempt := 0; attempt < 3; attempt++ {
		err := workflow.ExecuteLocalActivity(lctx, paymentsA.AuthorizeForCapture, in).Get(ctx, &pay)
		if err == nil {
			// An authorization is mirrored on the payments row by the capture, or before the order
			// first waits (flushWrites).
			w.unmirrored = pay.Status == payment.StatusAuthorized
			return pay, nil
		}
		if !activities.FailedWith(err, problem.PaymentOutcomeUnknown) {
			return pay, err
		}
		w.st.PaymentStatus = payment.StatusUnknown
		w.note(ctx, "payment outcome unknown", "asking the provider")
		if err := workflow.ExecuteLocalActivity(lctx, paymentsA.ResolvePayment, w.st.OrderID).Get(ctx, &pay); err != nil {
			break // the provider cannot be asked now
		}
		if pay.Status != payment.StatusNotFound {
			return pay, nil
		}
	}
	return activities.PaymentResult{Status: payment.StatusUnknown}, nil
}

func (w *orderFlow) authorizeInput() activities.AuthorizeInput {
	return activities.AuthorizeInput{OrderID: w.st.OrderID, AmountMinor: w.st.TotalMinor, Currency: w.st.Currency,
		Token: w.in.PaymentMethodToken}
}

func (w *orderFlow) onPayment(ctx workflow.Context, status payment.Status, source string) {
	switch status {
	case payment.StatusAuthorized, payment.StatusCaptured:
		w.paid = true
	case payment.StatusDeclined:
		w.declined = true
	}
	w.st.PaymentStatus = status
	w.st.Timeline = appendTimeline(w.st.Timeline, TimelineEntry{At: workflow.Now(ctx), Event: "payment " + lower(string(status)),
		Detail: source})
	w.searchDirty = true
}

// verifyEvent asks the provider whether a payment event is about this order's intent, for its
// amount, and what the intent's status is: a quick try in this workflow task, then, while the
// provider cannot be asked, the server's retries with backoff until the hold would expire. It
// returns the future of those retries, or nil when the quick try decided.
func (w *orderFlow) verifyEvent(ctx, rctx workflow.Context, ev PaymentSignal) (workflow.Future, string) {
	source := ev.Source
	if source == "" {
		source = "webhook"
	}
	source += " " + ev.EventID
	in := activities.VerifyEventInput{OrderID: w.st.OrderID, IntentID: ev.IntentID, AmountMinor: w.st.TotalMinor,
		Currency: w.st.Currency, Claimed: ev.Status}
	f := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, quickStepOptions), paymentsA.VerifyEvent, in)
	if err := f.Get(ctx, nil); err != nil && !activities.FailedWith(err, problem.PaymentEventRefused) {
		return workflow.ExecuteActivity(workflow.WithActivityOptions(rctx,
			unknownOptions(w.st.HoldExpiresAt.Sub(workflow.Now(ctx)))), paymentsA.VerifyEvent, in), source
	}
	w.verified(ctx, f, source)
	return nil, ""
}

// verified acts on the provider's answer about a payment event; the event's own word is never
// acted on.
func (w *orderFlow) verified(ctx workflow.Context, f workflow.Future, source string) {
	var pay activities.PaymentResult
	if err := f.Get(ctx, &pay); err != nil {
		w.note(ctx, "payment event not acted on", source+": "+errorText(err))
		return
	}
	w.st.IntentID = pay.IntentID
	w.onPayment(ctx, pay.Status, source+", confirmed by the provider")
}

// awaitOutcome waits until the payment is decided or the order must stop, and returns the
// failure code when it must stop. Nothing here wakes the order on a clock: the hold child's end is
// the expiry, and an unknown payment outcome is settled by an activity the server retries with
// backoff (the payment reconciler is the backstop of both).
func (w *orderFlow) awaitOutcome(ctx workflow.Context) problem.Code {
	w.phase = phaseWaiting
	var unknown, verify workflow.Future
	var verifying string
	decided := func() bool {
		return w.paid || w.declined || w.expired || w.shortfall || w.cancel != "" || len(w.support) > 0 ||
			(len(w.events) > 0 && verify == nil)
	}
	unknownAsked := false
	unknownCtx, stopUnknown := workflow.WithCancel(ctx)
	defer func() {
		stopUnknown()
		w.settleStopped(ctx, unknown)
	}()
	for {
		for len(w.events) > 0 && verify == nil && !w.paid && !w.declined {
			ev := w.events[0]
			w.events = w.events[1:]
			verify, verifying = w.verifyEvent(ctx, unknownCtx, ev)
		}
		w.holdMoved = false
		var timer workflow.Future
		stopTimer := func() {}
		holding := w.hold != nil && !w.holdLost
		if !decided() {
			if w.st.PaymentStatus == payment.StatusUnknown && !unknownAsked {
				unknownAsked = true
				unknown = workflow.ExecuteActivity(workflow.WithActivityOptions(unknownCtx,
					settleOptions(w.st.HoldExpiresAt.Sub(workflow.Now(ctx)))), paymentsA.SettleUnknown, w.authorizeInput())
			}
			w.yield(ctx)
			holding = w.hold != nil && !w.holdLost
			if !holding {
				var tctx workflow.Context
				tctx, stopTimer = workflow.WithCancel(ctx)
				timer = workflow.NewTimer(tctx, max(w.st.HoldExpiresAt.Add(holdGrace).Sub(workflow.Now(ctx)), 0))
			}
			err := workflow.Await(ctx, func() bool {
				return decided() || (unknown != nil && unknown.IsReady()) || (verify != nil && verify.IsReady()) ||
					(holding && w.hold.IsReady()) || (timer != nil && timer.IsReady()) || w.holdMoved
			})
			if err != nil && w.cancel == "" { // the workflow itself was cancelled (from the UI)
				w.cancel = problem.CancelledBySupport
			}
		}
		stopTimer()
		if unknown != nil && unknown.IsReady() && !w.paid && !w.declined {
			var pay activities.PaymentResult
			if err := unknown.Get(ctx, &pay); err == nil {
				w.st.IntentID = pay.IntentID
				w.onPayment(ctx, pay.Status, "provider asked")
			}
			unknown = nil // asked once; the payment reconciler asks again if need be
		}
		if verify != nil && verify.IsReady() {
			w.verified(ctx, verify, verifying)
			verify = nil
		}
		if holding && w.hold.IsReady() && !w.expired {
			var res HoldResult
			if err := w.hold.Get(ctx, &res); err == nil && res.Ended == holdExpired {
				w.expired = true
				w.note(ctx, "hold expired", fmt.Sprintf("%d reservation(s) released by the hold", res.Released))
			} else {
				// The child did not expire (it could not start, or a reset run inherited a finished
				// one): the order keeps its own timer to the expiry.
				w.holdLost = true
				w.note(ctx, "hold child gone", "the order keeps its own timer to the expiry")
			}
		}
		if timer != nil && timer.IsReady() && !w.expired {
			w.expired = true
			w.note(ctx, "hold expired", "no word from the hold child; expiring here")
		}
		for len(w.support) > 0 {
			req := w.support[0]
			w.support = w.support[1:]
			w.recordSupport(ctx, req, "")
			w.cancel = problem.CancelledBySupport
		}
		switch {
		case w.cancel != "":
			return w.cancel
		case w.shortfall:
			return problem.StockShortfall
		case w.expired:
			return problem.HoldExpired
		case w.declined:
			return problem.PaymentDeclined
		case w.paid:
			return ""
		}
	}
}

// settleStopped waits, once the order has stopped waiting, for the settling of an unknown payment
// it asked for and then stopped: the attempt under way may still authorize, and the order must know
// it before its reversal runs, so that no authorization comes after a reversal that found nothing.
func (w *orderFlow) settleStopped(ctx workflow.Context, settling workflow.Future) {
	if settling == nil {
		return
	}
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	var pay activities.PaymentResult
	if err := settling.Get(dctx, &pay); err != nil || pay.Status == "" {
		return
	}
	w.st.IntentID = pay.IntentID
	w.onPayment(ctx, pay.Status, "provider asked, as the order stopped waiting")
}

// settle confirms the stock, captures the money and completes the order.
func (w *orderFlow) settle(ctx workflow.Context) {
	w.phase = phaseSettling
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	// Registered before the confirm: units a confirm took off the shelf go back whatever its
	// answer said (it may have committed and then failed to answer).
	w.push("restock", w.restock, compensateStock)
	if err := w.step(dctx, stepConfirm, stockA.Confirm, nil, w.st.OrderID); err != nil {
		w.failAfterStep(ctx, err, problem.StockReleased)
		return
	}
	w.holdAt = nil // nothing left to hold
	w.note(ctx, "stock confirmed", "")
	// The capture, its mirror, the recorded answer and the order's end: one step, one transaction
	// after the provider's call.
	var cf activities.CaptureFinished
	if err := w.step(dctx, stepCapture, paymentsA.CaptureFinish, &cf,
		activities.CaptureFinishInput{OrderID: w.st.OrderID, Answer: w.unrecorded}); err != nil {
		w.failAfterStep(ctx, err, problem.PaymentDeclined)
		return
	}
	w.unrecorded, w.unmirrored = nil, false
	w.onPayment(ctx, cf.Payment.Status, "capture")
	done := cf.Finished
	if done.Status != order.StatusConfirmed {
		// Another actor ended the order first (its workflow was taken for gone): the row says so,
		// and what this run confirmed and captured goes back.
		w.note(ctx, "order already ended", string(done.Status)+" "+string(done.FailureCode))
		w.fail(ctx, done.FailureCode, nil)
		return
	}
	w.compensate = nil
	w.setStatus(ctx, order.StatusConfirmed, "payment captured, stock confirmed")
}
