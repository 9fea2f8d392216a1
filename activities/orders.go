package activities

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/temporal"

	"github.com/marketplace/checkout/cart"
	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/order"
	"github.com/marketplace/checkout/pricing"
)

// Application error types of the order steps.
const (
	ErrTypePriceChanged     = "PriceChanged"
	ErrTypeCartEmpty        = "CartEmpty"
	ErrTypeCartInvalid      = "CartInvalid"
	ErrTypeAddressNotFound  = "AddressNotFound"
	ErrTypeOrderNotFound    = "OrderNotFound"
	ErrTypeOrderTransition  = "OrderTransitionRefused"
	ErrTypePaymentUnknown   = "PaymentOutcomeUnknown"
	ErrTypePaymentRefused   = "PaymentRefused"
	ErrTypePaymentNotFound  = "PaymentNotFound"
	ErrTypeProviderDown     = "PaymentProviderUnavailable"
	ErrTypeIdempotencyStore = "IdempotencyStore"
	ErrTypeKeyReused        = "IdempotencyKeyReused"
	// ErrTypeTooManyOpenOrders: the shopper already has as many orders waiting for payment as
	// the cap allows; nothing was written.
	ErrTypeTooManyOpenOrders = "TooManyOpenOrders"
	// ErrTypeCouponRefused: the order's coupon does not apply; its details are the
	// pricing.CouponRefusal. Nothing was written or reserved.
	ErrTypeCouponRefused = "CouponRefused"
)

// Outbox event types of orders.
const (
	EventOrderConfirmed = "order.confirmed"
	EventOrderFailed    = "order.failed"
	EventOrderCancelled = "order.cancelled"
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
// PAYMENT_PROVIDER). CreateOrder writes the provider on the order's payment and hands the
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
}

func (a *Orders) q() *db.Queries { return db.New(a.Pool) }

// CheckPricesInput names the cart and the prices the shopper confirmed.
type CheckPricesInput struct {
	UserID         int64  `json:"userId"`
	IdempotencyKey string `json:"idempotencyKey"`
	PriceVersion   string `json:"priceVersion"`
	// CouponCode is the coupon the shopper's order carries (empty: none).
	CouponCode string `json:"couponCode,omitempty"`
}

// PriceChangedDetails travel with a PriceChanged error: the version the shopper must see now.
type PriceChangedDetails struct {
	PriceVersion string `json:"priceVersion"`
}

// CheckPrices prices the member cart now. A priceVersion other than the current one is a
// non-retryable PriceChanged error carrying the new version. When the request's order already
// exists (this step runs again after a worker crash, or in a run support reset), its prices are
// the order's own: they were checked when it was made, and the cart may have moved on since.
func (a *Orders) CheckPrices(ctx context.Context, in CheckPricesInput) (pricing.Quote, error) {
	q := a.q()
	if existing, err := q.OrderByKey(ctx, in.UserID, in.IdempotencyKey); err == nil {
		return a.quoteOf(ctx, q, existing.ID, existing.PriceVersion, existing.TotalMinor, existing.Currency)
	} else if !errors.Is(err, pgx.ErrNoRows) {
		return pricing.Quote{}, err
	}
	c, err := cart.Load(ctx, q, cart.MemberID(in.UserID))
	if err != nil && !errors.Is(err, cart.ErrNotFound) {
		return pricing.Quote{}, err
	}
	lines := make([]pricing.Line, 0, len(c.Doc.Items))
	for _, it := range c.Doc.Items {
		lines = append(lines, pricing.Line{SKUID: it.SKUID, Quantity: it.Quantity})
	}
	quote, err := pricing.Compute(ctx, q, lines)
	var unknown *pricing.UnknownSKUError
	switch {
	case errors.Is(err, pricing.ErrEmpty):
		return quote, temporal.NewNonRetryableApplicationError("the cart is empty", ErrTypeCartEmpty, err)
	case errors.As(err, &unknown):
		return quote, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeCartInvalid, err, unknown.SKUIDs)
	case errors.Is(err, pricing.ErrMixedCurrency):
		return quote, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeCartInvalid, err)
	case err != nil:
		return quote, err
	}
	for _, it := range quote.Items {
		if it.Quantity > it.MaxPerOrder {
			return quote, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("sku %d: at most %d per order", it.SKUID, it.MaxPerOrder), ErrTypeCartInvalid, nil, []int64{it.SKUID})
		}
	}
	if in.CouponCode != "" {
		var refusal *pricing.CouponRefusal
		if quote, refusal, err = pricing.WithCoupon(ctx, q, quote, in.CouponCode, in.UserID); err != nil {
			return quote, err
		}
		if refusal != nil {
			return quote, couponRefused(refusal)
		}
	}
	if quote.PriceVersion != in.PriceVersion {
		return quote, temporal.NewNonRetryableApplicationError("prices changed since the preview",
			ErrTypePriceChanged, nil, PriceChangedDetails{PriceVersion: quote.PriceVersion})
	}
	return quote, nil
}

func couponRefused(r *pricing.CouponRefusal) error {
	return temporal.NewNonRetryableApplicationError(r.Message, ErrTypeCouponRefused, r, *r)
}

// quoteOf reads back the prices an order was made with.
func (a *Orders) quoteOf(ctx context.Context, q *db.Queries, orderID int64, priceVersion string, total int64,
	currency string) (pricing.Quote, error) {
	items, err := q.OrderItems(ctx, orderID)
	if err != nil {
		return pricing.Quote{}, err
	}
	quote := pricing.Quote{TotalMinor: total, Currency: currency, PriceVersion: priceVersion}
	for _, it := range items {
		item := pricing.Item{SKUID: it.SkuID, SellerID: it.SellerID, Title: it.Title, Quantity: it.Quantity,
			UnitPriceMinor: it.UnitPriceMinor, LineTotalMinor: it.UnitPriceMinor * int64(it.Quantity),
			Currency: it.Currency, Campaigns: it.CampaignIds}
		if it.ListPriceMinor != nil {
			item.ListPriceMinor = *it.ListPriceMinor
		}
		quote.Items = append(quote.Items, item)
	}
	c, err := q.CouponOfOrder(ctx, orderID)
	switch {
	case err == nil:
		quote.Coupon = &pricing.AppliedCoupon{ID: c.ID, Code: c.Code, DiscountMinor: c.DiscountMinor}
	case !errors.Is(err, pgx.ErrNoRows):
		return pricing.Quote{}, err
	}
	return quote, nil
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
// unique (user, Idempotency-Key): a second run returns the first order. A new order over the
// shopper's open-order cap (MaxOpenPerShopper) is refused with TooManyOpenOrders before anything
// is written or reserved; the count and the insert are one decision under the shopper's lock.
func (a *Orders) CreateOrder(ctx context.Context, in CreateOrderInput) (CreatedOrder, error) {
	saga := a.Saga
	saga.Provider = cmp.Or(saga.Provider, in.Provider)
	out := CreatedOrder{Saga: &saga}
	err := pgx.BeginFunc(ctx, a.Pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		_, err := q.GetAddress(ctx, in.AddressID, in.UserID)
		if errors.Is(err, pgx.ErrNoRows) {
			return temporal.NewNonRetryableApplicationError("unknown address", ErrTypeAddressNotFound, err)
		}
		if err != nil {
			return err
		}
		if a.MaxOpenPerShopper > 0 {
			if err := q.LockUser(ctx, db.LockOpenOrders, in.UserID); err != nil {
				return err
			}
		}
		id, err := q.InsertOrder(ctx, db.InsertOrderParams{UserID: in.UserID, IdempotencyKey: in.IdempotencyKey,
			RequestHash: in.RequestHash, WorkflowID: in.WorkflowID, RunID: in.RunID, AddressID: in.AddressID,
			PriceVersion: in.Quote.PriceVersion, TotalMinor: in.Quote.TotalMinor, Currency: in.Quote.Currency,
			MaxOpen: int32(a.MaxOpenPerShopper)})
		if errors.Is(err, pgx.ErrNoRows) {
			existing, err := q.OrderByKey(ctx, in.UserID, in.IdempotencyKey)
			if errors.Is(err, pgx.ErrNoRows) {
				return a.tooManyOpen(ctx, q, in.UserID)
			}
			if err != nil {
				return err
			}
			if existing.RequestHash != in.RequestHash {
				return temporal.NewNonRetryableApplicationError("this Idempotency-Key was used with a different request",
					ErrTypeKeyReused, nil)
			}
			// The order is this run's when this run made it (its worker died after the commit and
			// the step runs again), or while it is still open (support reset the workflow to an
			// earlier point: the new run carries on). A finished order made by another run is
			// never touched again.
			open := order.Status(existing.Status).Open()
			out.OrderID, out.Existing = existing.ID, existing.RunID != in.RunID && !open
			return nil
		}
		if err != nil {
			return err
		}
		out.OrderID = id
		for _, it := range in.Quote.Items {
			p := db.InsertOrderItemParams{OrderID: id, SkuID: it.SKUID, SellerID: it.SellerID, Title: it.Title,
				Quantity: it.Quantity, UnitPriceMinor: it.UnitPriceMinor, Currency: it.Currency, CampaignIds: it.Campaigns}
			if it.ListPriceMinor > 0 {
				p.ListPriceMinor = &it.ListPriceMinor
			}
			if err := q.InsertOrderItem(ctx, p); err != nil {
				return err
			}
		}
		if in.Quote.Coupon != nil {
			if err := redeem(ctx, q, id, in.UserID, *in.Quote.Coupon); err != nil {
				return err
			}
		}
		if err := q.InsertPayment(ctx, db.InsertPaymentParams{OrderID: id, IdempotencyKey: PaymentKey(id),
			Provider: saga.Provider, AmountMinor: in.Quote.TotalMinor, Currency: in.Quote.Currency}); err != nil {
			return err
		}
		return appendEvent(ctx, q, id, "created", map[string]any{"workflowId": in.WorkflowID,
			"total": in.Quote.TotalMinor, "currency": in.Quote.Currency})
	})
	return out, err
}

// redeem spends one redemption of the order's coupon in the order's transaction: one conditional
// statement decides, under the shopper's coupon lock. A refusal rolls the order back with it.
func redeem(ctx context.Context, q *db.Queries, orderID, userID int64, c pricing.AppliedCoupon) error {
	if err := q.LockUser(ctx, db.LockCoupons, userID); err != nil {
		return err
	}
	_, err := q.RedeemCoupon(ctx, db.RedeemCouponParams{CouponID: c.ID, UserID: userID, OrderID: orderID,
		DiscountMinor: c.DiscountMinor})
	if !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	// Say why, as the preview would now.
	now, err := q.CouponByCode(ctx, userID, c.Code)
	if err != nil {
		return err
	}
	refusal := pricing.Unavailable(now)
	if refusal == nil { // a redemption given back since the statement ran: the refusal stands
		refusal = &pricing.CouponRefusal{Code: pricing.CouponUsedUp, Message: "the coupon has been used up"}
	}
	return couponRefused(refusal)
}

// TooManyOpenOrdersDetails travel with a TooManyOpenOrders error.
type TooManyOpenOrdersDetails struct {
	Limit   int   `json:"limit"`
	Pending int64 `json:"pending"`
	// NextHoldEnd is when the first of the shopper's open orders ends by itself if nobody pays
	// it (nil while none has its hold recorded yet).
	NextHoldEnd *time.Time `json:"nextHoldEnd,omitempty"`
}

// tooManyOpen is the refusal of an order over the open-order cap: the insert wrote nothing, and
// no order holds this request's key.
func (a *Orders) tooManyOpen(ctx context.Context, q *db.Queries, userID int64) error {
	p, err := q.PendingOrdersOf(ctx, userID)
	if err != nil {
		return err
	}
	return temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("%d orders are waiting for payment; at most %d may", p.Pending, a.MaxOpenPerShopper),
		ErrTypeTooManyOpenOrders, nil,
		TooManyOpenOrdersDetails{Limit: a.MaxOpenPerShopper, Pending: p.Pending, NextHoldEnd: p.NextHoldEnd})
}

// PaymentKey is the provider idempotency key of an order's payment. It comes from the order, not
// from the workflow run, so a reset or a retried run never charges twice.
func PaymentKey(orderID int64) string { return "order-" + strconv.FormatInt(orderID, 10) }

// SetHoldInput records when the order's reservation expires.
type SetHoldInput struct {
	OrderID   int64     `json:"orderId"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// SetHold records the hold's expiry on the order, for people reading it.
func (a *Orders) SetHold(ctx context.Context, in SetHoldInput) error {
	t := in.ExpiresAt
	return a.q().SetOrderHold(ctx, &t, in.OrderID)
}

// TransitionInput moves an order to a final status. To is an order.Status and Code an
// order.FailureCode; both are plain strings, as the frozen sagas of earlier releases build them.
type TransitionInput struct {
	OrderID int64          `json:"orderId"`
	To      string         `json:"to"`
	Code    string         `json:"code,omitempty"`
	Detail  map[string]any `json:"detail,omitempty"`
}

// openStatuses are the statuses an order can leave.
var openStatuses = []string{string(order.StatusPendingPayment), string(order.StatusNeedsAttention)}

// Transition moves the order from an open status to To (CONFIRMED, FAILED or CANCELLED) and writes
// the timeline entry and the outbox event in the same transaction. It returns false when the order
// had already left the open statuses (a repeat changes nothing).
func (a *Orders) Transition(ctx context.Context, in TransitionInput) (bool, error) {
	changed := false
	err := pgx.BeginFunc(ctx, a.Pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		var code *string
		if in.Code != "" {
			code = &in.Code
		}
		_, err := q.TransitionOrder(ctx, db.TransitionOrderParams{ToStatus: in.To, FailureCode: code,
			ID: in.OrderID, FromStatuses: openStatuses})
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		changed = true
		// The coupon follows the order: spent when it is confirmed, given back otherwise.
		if err := q.SettleCouponRedemption(ctx, in.To, in.OrderID); err != nil {
			return err
		}
		detail := map[string]any{"status": in.To}
		if in.Code != "" {
			detail["code"] = in.Code
		}
		for k, v := range in.Detail {
			detail[k] = v
		}
		if err := appendEvent(ctx, q, in.OrderID, "status", detail); err != nil {
			return err
		}
		event := map[order.Status]string{order.StatusConfirmed: EventOrderConfirmed, order.StatusFailed: EventOrderFailed,
			order.StatusCancelled: EventOrderCancelled}[order.Status(in.To)]
		if event == "" {
			return temporal.NewNonRetryableApplicationError("unknown final status "+in.To, ErrTypeOrderTransition, nil)
		}
		payload, _ := json.Marshal(map[string]any{"orderId": in.OrderID, "status": in.To, "code": in.Code})
		return q.InsertOutboxEvent(ctx, db.InsertOutboxEventParams{AggregateType: "order",
			AggregateID: strconv.FormatInt(in.OrderID, 10), EventType: event, Payload: payload})
	})
	return changed, err
}

// Finished is what Finish did: whether this call moved the order, and the order's status and
// failure code as they stand after it.
type Finished struct {
	Changed     bool              `json:"changed"`
	Status      order.Status      `json:"status"`
	FailureCode order.FailureCode `json:"failureCode,omitempty"`
}

// Finish is Transition that also says where the order stands when it was no longer open: another
// actor (the payment reconciler, the order's hold) ended it first, and the caller must not report
// a status the row does not have.
func (a *Orders) Finish(ctx context.Context, in TransitionInput) (Finished, error) {
	changed, err := a.Transition(ctx, in)
	if err != nil {
		return Finished{}, err
	}
	if changed {
		return Finished{Changed: true, Status: order.Status(in.To), FailureCode: order.FailureCode(in.Code)}, nil
	}
	o, err := a.q().GetOrder(ctx, in.OrderID)
	if err != nil {
		return Finished{}, err
	}
	f := Finished{Status: order.Status(o.Status)}
	if o.FailureCode != nil {
		f.FailureCode = order.FailureCode(*o.FailureCode)
	}
	return f, nil
}

// ParkInput says which step exhausted its retries and why.
type ParkInput struct {
	OrderID int64  `json:"orderId"`
	Step    string `json:"step"`
	Error   string `json:"error"`
}

// Park moves an open order to NEEDS_ATTENTION with the failing step and error.
func (a *Orders) Park(ctx context.Context, in ParkInput) error {
	return pgx.BeginFunc(ctx, a.Pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		detail := map[string]any{"step": in.Step, "error": in.Error}
		raw, _ := json.Marshal(detail)
		if _, err := q.ParkOrder(ctx, nullJSON(raw), in.OrderID); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		return appendEvent(ctx, q, in.OrderID, "needs_attention", detail)
	})
}

// Resume takes a parked order back to PENDING_PAYMENT (support chose retry).
func (a *Orders) Resume(ctx context.Context, orderID int64) error {
	_, err := a.q().ResumeOrder(ctx, orderID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	return err
}

// TimelineInput is one entry of the order's timeline.
type TimelineInput struct {
	OrderID int64          `json:"orderId"`
	Kind    string         `json:"kind"`
	Detail  map[string]any `json:"detail,omitempty"`
}

// Timeline appends an entry (support actions with their reason, payment events).
func (a *Orders) Timeline(ctx context.Context, in TimelineInput) error {
	return appendEvent(ctx, a.q(), in.OrderID, in.Kind, in.Detail)
}

func appendEvent(ctx context.Context, q *db.Queries, orderID int64, kind string, detail map[string]any) error {
	var raw []byte
	if detail != nil {
		var err error
		if raw, err = json.Marshal(detail); err != nil {
			return err
		}
	}
	return q.InsertOrderEvent(ctx, orderID, kind, nullJSON(raw))
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
	var order *int64
	if in.OrderID > 0 {
		order = &in.OrderID
	}
	raw, err := json.Marshal(in.Outcome)
	if err != nil {
		return temporal.NewNonRetryableApplicationError("outcome is not JSON", ErrTypeIdempotencyStore, err)
	}
	return a.q().InsertIdempotencyRecord(ctx, db.InsertIdempotencyRecordParams{UserID: in.UserID,
		IdempotencyKey: in.IdempotencyKey, RequestHash: in.RequestHash, OrderID: order, Outcome: raw})
}
