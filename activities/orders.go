package activities

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/marketplace/checkout/cart"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/internal/staff"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/order"
	"github.com/marketplace/checkout/pricing"
)

// Orders are the order's own steps: price check, the order row, its status transitions and the
// idempotency record. Every write is conditional, so a retried or reset run changes state once.
type Orders struct {
	Pool *pgxpool.Pool
	// MaxOpenPerShopper caps a shopper's orders waiting for payment (PENDING_PAYMENT); 0: no cap.
	MaxOpenPerShopper int
	// HoldExtension is how far and how often a shopper may extend an order's hold.
	HoldExtension HoldExtension
	// Saga is the timing of the orders this worker places and the provider they pay through.
	Saga SagaOptions
}

// SagaOptions are the worker's settings of an order's saga (HOLD_TTL, STEP_RETRY_WINDOW,
// PAYMENT_PROVIDER, PARKED_ESCALATE_AFTER, PARKED_GIVE_UP_AFTER). CreateOrder writes the provider on the order's payment and hands the
// timing to the workflow in its result, so that the order runs by the settings of the worker
// that placed it, recorded in its history.
type SagaOptions struct {
	// HoldTTL is how long the order's reservation holds its stock.
	HoldTTL time.Duration `json:"holdTtl"`
	// StepRetryWindow bounds the retries of each step after the shopper's answer; then the order
	// waits for support.
	StepRetryWindow time.Duration `json:"stepRetryWindow"`
	// Provider names the payment provider the order pays through.
	Provider string `json:"provider"`
	// ParkedEscalateAfter and ParkedGiveUpAfter bound how long the order waits for support once a
	// step first parked it: escalated after the first, given up (FAILED, ATTENTION_EXPIRED) after
	// the second. Zero in the results of earlier builds.
	ParkedEscalateAfter time.Duration `json:"parkedEscalateAfter,omitempty"`
	ParkedGiveUpAfter   time.Duration `json:"parkedGiveUpAfter,omitempty"`
}

func (a *Orders) store() order.Store { return order.Store{Pool: a.Pool} }

// CheckPricesInput names the cart and the prices the shopper confirmed.
type CheckPricesInput struct {
	UserID         int64  `json:"userId"`
	IdempotencyKey string `json:"idempotencyKey"`
	PriceVersion   string `json:"priceVersion"`
	// CouponCode is the coupon the shopper's order carries (empty: none).
	CouponCode string `json:"couponCode,omitempty"`
}

// CheckPrices prices the member cart now, as the checkout preview does (cart.PriceOf). A cart that
// cannot be ordered is refused with its code (CART_EMPTY, CART_INVALID, MIXED_CURRENCY, the
// coupon's); a priceVersion other than the current one is refused with PRICE_CHANGED, carrying the
// new version (cart.Checkout.Refusal). When the request's order already exists (this step runs
// again after a worker crash, or in a run support reset), its prices are the order's own: they
// were checked when it was made, and the cart may have moved on since.
func (a *Orders) CheckPrices(ctx context.Context, in CheckPricesInput) (pricing.Quote, error) {
	// Whether the order exists and the cart as it is, in one round trip.
	b := &pgx.Batch{}
	var made bool
	a.store().QueueMade(b, in.UserID, in.IdempotencyKey, &made)
	var snap cart.Snapshot
	var missing error
	cart.QueueLoad(b, cart.MemberID(in.UserID), &snap, &missing)
	if err := a.Pool.SendBatch(ctx, b).Close(); err != nil {
		return pricing.Quote{}, failed(err, "reading the request's order and cart")
	}
	if made {
		quote, _, err := a.store().PricesOf(ctx, in.UserID, in.IdempotencyKey)
		return quote, failed(err, "reading the prices of the request's order")
	}
	if missing != nil && !errors.Is(missing, cart.ErrNotFound) {
		return pricing.Quote{}, fmt.Errorf("reading user %d's cart: %w", in.UserID, missing)
	}
	c, err := cart.PriceOf(ctx, a.Pool, snap, in.UserID, in.CouponCode, nil)
	if p, refused := problem.As(err); refused {
		return pricing.Quote{}, RefusalError(p)
	} else if err != nil {
		return pricing.Quote{}, fmt.Errorf("checking the prices of user %d's cart: %w", in.UserID, err)
	}
	if p := c.Refusal(in.PriceVersion); p != nil {
		return c.Quote, RefusalError(p)
	}
	return c.Quote, nil
}

// CreateOrderInput is the order row to write. Provider is the payment provider the sagas of
// earlier releases named; the worker's own (Orders.Saga.Provider) comes first.
type CreateOrderInput struct {
	UserID         int64          `json:"userId"`
	IdempotencyKey string         `json:"idempotencyKey"`
	RequestHash    string         `json:"requestHash"`
	WorkflowID     string         `json:"workflowId"`
	RunID          string         `json:"runId"`
	AddressID      int64          `json:"addressId"`
	Quote          pricing.Quote  `json:"quote"`
	Provider       string         `json:"provider"`
	Detail         map[string]any `json:"detail,omitempty"`
}

// CreatedOrder is the order.
type CreatedOrder struct {
	OrderID int64 `json:"orderId"`
	// ShipTo was where the order ships to, for the sagas of earlier releases; it is left empty
	// now (their Reserve step then reads the address itself).
	ShipTo inventory.Location `json:"shipTo,omitzero"`
	// Existing: another run of the same request created the order and the order is finished;
	// this run must not act on it.
	Existing bool `json:"existing,omitempty"`
	// Saga is the timing the order runs by: the worker's (Orders.Saga). Nil in the results of
	// earlier releases, whose orders took theirs from the workflow's input.
	Saga *SagaOptions `json:"saga,omitempty"`
}

// CreateOrder writes the order, its items and its payment row in one transaction, under the
// unique (user, Idempotency-Key): a second run returns the first order (order.Store.Create). A new
// order over the shopper's open-order cap (MaxOpenPerShopper) is refused with TOO_MANY_OPEN_ORDERS
// before anything is written or reserved; so is an order with an address that is not the
// shopper's (VALIDATION_FAILED), with another request's body under its key
// (IDEMPOTENCY_KEY_REUSED) or with a coupon that can no longer be redeemed (its code).
func (a *Orders) CreateOrder(ctx context.Context, in CreateOrderInput) (CreatedOrder, error) {
	saga := a.Saga
	saga.Provider = cmp.Or(saga.Provider, in.Provider)
	c, err := a.store().Create(ctx, order.New{UserID: in.UserID, IdempotencyKey: in.IdempotencyKey,
		RequestHash: in.RequestHash, WorkflowID: in.WorkflowID, RunID: in.RunID, AddressID: in.AddressID,
		Quote: in.Quote, Provider: saga.Provider, MaxOpen: a.MaxOpenPerShopper})
	var tooMany *order.TooManyOpenError
	var coupon *pricing.CouponRefusal
	switch {
	case errors.Is(err, order.ErrAddressNotFound):
		return CreatedOrder{}, RefusalError(addressNotFound())
	case errors.Is(err, order.ErrKeyReused):
		return CreatedOrder{}, RefusalError(problem.New(problem.IdempotencyKeyReused, err.Error()))
	case errors.As(err, &tooMany):
		return CreatedOrder{}, RefusalError(TooManyOpenOrdersDetails{Limit: tooMany.Limit, Pending: tooMany.Pending,
			NextHoldEnd: tooMany.NextHoldEnd}.Problem(tooMany.Error()))
	case errors.As(err, &coupon):
		return CreatedOrder{}, RefusalError(coupon.Problem())
	case err != nil:
		return CreatedOrder{}, fmt.Errorf("writing the order: %w", err)
	}
	return CreatedOrder{OrderID: c.ID, Existing: c.Existing, Saga: &saga}, nil
}

// addressNotFound refuses an order whose address is not the shopper's, as the API refuses one.
func addressNotFound() *problem.Error {
	return problem.Invalid(problem.FieldError{Field: "addressId", Message: "not one of your addresses"})
}

// TooManyOpenOrdersDetails are the details of a TOO_MANY_OPEN_ORDERS refusal (their fields in the
// order of their names, with nextHoldEnd null rather than left out: the JSON recorded histories
// hold).
type TooManyOpenOrdersDetails struct {
	Limit int `json:"limit"`
	// NextHoldEnd is when the first of the shopper's open orders ends by itself if nobody pays
	// it (nil while none has its hold recorded yet).
	NextHoldEnd *time.Time `json:"nextHoldEnd"`
	Pending     int64      `json:"pending"`
}

// Problem is the TOO_MANY_OPEN_ORDERS refusal with these details.
func (d TooManyOpenOrdersDetails) Problem(msg string) *problem.Error {
	return problem.New(problem.TooManyOpenOrders, msg).WithDetails(d)
}

// SetHoldInput records when the order's reservation expires.
type SetHoldInput struct {
	OrderID   int64     `json:"orderId"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// SetHold records the hold's expiry on the order, for people reading it.
func (a *Orders) SetHold(ctx context.Context, in SetHoldInput) error {
	return failed(a.store().SetHold(ctx, in.OrderID, in.ExpiresAt), "recording the hold of order %d", in.OrderID)
}

// TransitionInput moves an order to a final status, with the code it ends with (typed strings:
// the same JSON as the plain strings the histories of earlier builds carry).
type TransitionInput struct {
	OrderID int64          `json:"orderId"`
	To      order.Status   `json:"to"`
	Code    problem.Code   `json:"code,omitempty"`
	Detail  map[string]any `json:"detail,omitempty"`
}

// transitionRefused makes a transition to a status no order ends in non-retryable
// (ORDER_TRANSITION_REFUSED).
func transitionRefused(err error, in TransitionInput) error {
	if errors.Is(err, order.ErrNotFinal) {
		return failure(problem.OrderTransitionRefused, "unknown final status "+string(in.To), nil)
	}
	return failed(err, "ending order %d %s", in.OrderID, in.To)
}

// Finished is what Finish did, and where the order stands after it.
type Finished = order.Finished

// Finish ends the order in To (CONFIRMED, FAILED or CANCELLED) with its timeline entry and
// outbox event (order.Store.Finish), and says where the order stands when it was no longer open:
// another actor (the payment reconciler, the order's hold) ended it first, and the caller must
// not report a status the row does not have. A repeat changes nothing.
func (a *Orders) Finish(ctx context.Context, in TransitionInput) (Finished, error) {
	f, err := a.store().Finish(ctx, in.OrderID, in.To, in.Code, in.Detail)
	return f, transitionRefused(err, in)
}

// FinishInput is a TransitionInput whose transaction also records the answer to the order's
// request: Answer (the order as it was placed) whether or not this call ends the order, Refusal
// (the order refused as it was placed: declined, out of stock) only when it does.
type FinishInput struct {
	TransitionInput
	Answer  *RecordOutcomeInput `json:"answer,omitempty"`
	Refusal *RecordOutcomeInput `json:"refusal,omitempty"`
}

// FinishAnswered is Finish that records the answer to the order's request in the transaction that
// ends the order (order.Store.FinishAlongIfEnds): the saga's answer to an order it decided in the
// workflow task that answered is written with the order's end instead of a transaction of its own.
// A refusal is recorded only by the call that ends the order, never for an order another actor
// ended first (the caller answers from the row). A repeat changes nothing (the first answer
// recorded stays).
func (a *Orders) FinishAnswered(ctx context.Context, in FinishInput) (Finished, error) {
	if in.Answer == nil && in.Refusal == nil {
		return a.Finish(ctx, in.TransitionInput)
	}
	answer, err := outcomeAlong(in.Answer)
	if err != nil {
		return Finished{}, err
	}
	refusal, err := outcomeAlong(in.Refusal)
	if err != nil {
		return Finished{}, err
	}
	var along []order.Along
	if answer != nil {
		along = append(along, answer)
	}
	f, err := a.store().FinishAlongIfEnds(ctx, in.OrderID, in.To, in.Code, in.Detail, refusal, along...)
	return f, transitionRefused(err, in.TransitionInput)
}

// ParkInput says which step exhausted its retries and why; Escalation, of an order parked again
// after it was escalated, is kept.
type ParkInput struct {
	OrderID    int64             `json:"orderId"`
	Step       string            `json:"step"`
	Error      string            `json:"error"`
	Escalation *order.Escalation `json:"escalation,omitempty"`
}

// Park moves an open order to NEEDS_ATTENTION with the failing step and error (an ended one keeps
// its status and carries them).
func (a *Orders) Park(ctx context.Context, in ParkInput) error {
	return failed(a.store().Park(ctx, in.OrderID, in.Step, in.Error, in.Escalation), "parking order %d", in.OrderID)
}

// EscalateInput marks a parked order escalated; GivesUpAt is when its saga gives it up (nil: a
// step giving stock or money back, which is only ever retried).
type EscalateInput struct {
	OrderID   int64      `json:"orderId"`
	GivesUpAt *time.Time `json:"givesUpAt,omitempty"`
}

// Escalate marks a parked order escalated: it has waited for support past PARKED_ESCALATE_AFTER.
func (a *Orders) Escalate(ctx context.Context, in EscalateInput) error {
	return failed(a.store().Escalate(ctx, in.OrderID, in.GivesUpAt), "escalating order %d", in.OrderID)
}

// Resume takes a parked order back to PENDING_PAYMENT (support chose retry).
func (a *Orders) Resume(ctx context.Context, orderID int64) error {
	return failed(a.store().Resume(ctx, orderID), "resuming order %d", orderID)
}

// TimelineInput is one entry of the order's timeline.
type TimelineInput struct {
	OrderID int64          `json:"orderId"`
	Kind    string         `json:"kind"`
	Detail  map[string]any `json:"detail,omitempty"`
}

// Timeline appends an entry (support actions with their reason, payment events).
func (a *Orders) Timeline(ctx context.Context, in TimelineInput) error {
	return failed(a.store().Note(ctx, in.OrderID, in.Kind, in.Detail), "noting %q on order %d", in.Kind, in.OrderID)
}

// StaffActionInput is a staff action a workflow acts on, with the verified person who sent it, the
// workflow run that acts on it and the action's number in that run (its row is written once).
type StaffActionInput struct {
	OrderID int64 `json:"orderId"`
	// LineCancellationID is the line cancellation the action is about (0: the order itself).
	LineCancellationID int64       `json:"lineCancellationId,omitempty"`
	Action             string      `json:"action"`
	Reason             string      `json:"reason"`
	Step               string      `json:"step,omitempty"`
	Actor              staff.Actor `json:"actor"`
	WorkflowID         string      `json:"workflowId"`
	RunID              string      `json:"runId"`
	Seq                int         `json:"seq"`
}

// StaffAction records a staff action: its staff_actions row and the order's timeline entry naming
// the person, in one transaction, once (order.Store.StaffActed).
func (a *Orders) StaffAction(ctx context.Context, in StaffActionInput) error {
	err := a.store().StaffActed(ctx, order.StaffAction{OrderID: in.OrderID, LineCancellationID: in.LineCancellationID,
		Action: in.Action, Reason: in.Reason, Step: in.Step, Actor: in.Actor, WorkflowID: in.WorkflowID, RunID: in.RunID,
		Seq: in.Seq})
	return failed(err, "recording %s's %s on order %d", in.Actor.Sub, in.Action, in.OrderID)
}

// RecordOutcomeInput is the answer to one (user, Idempotency-Key).
type RecordOutcomeInput struct {
	UserID         int64  `json:"userId"`
	IdempotencyKey string `json:"idempotencyKey"`
	RequestHash    string `json:"requestHash"`
	OrderID        int64  `json:"orderId,omitempty"`
	// Outcome is the workflow's answer, stored as JSON for the API to render again.
	Outcome any `json:"outcome"`
}

// RecordOutcome stores the answer to the request, so that the same key answers the same after
// the workflow has closed. The first record wins.
func (a *Orders) RecordOutcome(ctx context.Context, in RecordOutcomeInput) error {
	raw, err := answerJSON(in)
	if err != nil {
		return err
	}
	err = a.store().RecordOutcome(ctx, in.UserID, in.IdempotencyKey, in.RequestHash, in.OrderID, raw)
	return failed(err, "recording the answer to user %d's key", in.UserID)
}

// outcomeAlong is RecordOutcome as a write riding in an order's end; nil for no answer.
func outcomeAlong(in *RecordOutcomeInput) (order.Along, error) {
	if in == nil {
		return nil, nil
	}
	raw, err := answerJSON(*in)
	if err != nil {
		return nil, err
	}
	return order.OutcomeAlong(in.UserID, in.IdempotencyKey, in.RequestHash, in.OrderID, raw), nil
}

// answerJSON is the answer as it is recorded; OUTCOME_NOT_RECORDABLE when it is not JSON.
func answerJSON(in RecordOutcomeInput) (json.RawMessage, error) {
	raw, err := json.Marshal(in.Outcome)
	if err != nil {
		return nil, failure(problem.OutcomeNotRecordable, "outcome is not JSON", err)
	}
	return raw, nil
}
