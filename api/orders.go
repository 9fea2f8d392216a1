package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/money"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/internal/staff"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/order"
	"github.com/marketplace/checkout/payment"
	"github.com/marketplace/checkout/pricing"
	"github.com/marketplace/checkout/workflows"
)

// placeTimeout bounds how long POST /orders waits for reserve and authorize. A request that runs
// out answers 503; repeating it with the same key attaches to the same order.
const placeTimeout = 30 * time.Second

var tokenRe = regexp.MustCompile(`^(tok|pm)_[A-Za-z0-9_]{1,60}$`)

type orderRequest struct {
	PriceVersion       string `json:"priceVersion"`
	AddressID          int64  `json:"addressId"`
	PaymentMethodToken string `json:"paymentMethodToken"`
	// CouponCode is optional; without one the request hashes as it did before coupons.
	CouponCode string `json:"couponCode,omitempty"`
}

var couponRe = regexp.MustCompile(`^[A-Za-z0-9_-]{3,32}$`)

func (r orderRequest) validate() error {
	var v validation
	if r.PriceVersion == "" || len(r.PriceVersion) > 64 {
		v.add("priceVersion", "required: the priceVersion of the checkout preview")
	}
	if r.AddressID <= 0 {
		v.add("addressId", "required: one of your addresses")
	}
	if !tokenRe.MatchString(r.PaymentMethodToken) {
		v.add("paymentMethodToken", "required: a payment method token (tok_… or a Stripe PaymentMethod pm_…), such as tok_3ds")
	}
	if r.CouponCode != "" && !couponRe.MatchString(r.CouponCode) {
		v.add("couponCode", "3 to 32 letters, digits, - or _")
	}
	return v.err()
}

// hash identifies the request's body, so that the same key with another body is refused.
func (r orderRequest) hash() string {
	b, _ := json.Marshal(r)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func idempotencyKey(c echo.Context) (string, error) {
	key := c.Request().Header.Get("Idempotency-Key")
	ok := len(key) >= 1 && len(key) <= 255
	for _, r := range key {
		if r < 0x21 || r > 0x7e {
			ok = false
		}
	}
	if !ok {
		return "", problem.New(problem.ValidationFailed, "an Idempotency-Key header is required").
			WithDetails(problem.Fields{Fields: []problem.FieldError{{Field: "Idempotency-Key", Message: "required header: 1 to 255 visible ASCII characters"}}})
	}
	return key, nil
}

// keyedBody reads a write's Idempotency-Key and its body, and checks the body.
func keyedBody(c echo.Context, body interface{ validate() error }) (string, error) {
	key, err := idempotencyKey(c)
	if err != nil {
		return "", err
	}
	if err := bind(c, body); err != nil {
		return "", err
	}
	return key, body.validate()
}

// createOrder places an order. The (user, Idempotency-Key) pair names one OrderWorkflow, started
// with Update-with-Start: repeats and concurrent duplicates attach to the same run and get the
// same answer, which is also recorded so that it survives the workflow.
func (s *Server) createOrder(c echo.Context) error {
	p := mustPrincipal(c)
	var req orderRequest
	key, err := keyedBody(c, &req)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	h := req.hash()
	if done, err := s.replay(c, p.UserID, key, h); done || err != nil {
		return err
	}
	// The token is a capability on the shopper's card: it stays here, by request, for the
	// Authorize step, and never travels through the workflow's input or history. The same
	// statement checks that the address is the shopper's.
	addressOK, err := s.orders.SavePaymentMethodToken(ctx, order.PaymentMethod{AddressID: req.AddressID,
		UserID: p.UserID, IdempotencyKey: key, RequestHash: h, Token: req.PaymentMethodToken})
	if err != nil {
		return fmt.Errorf("keeping the payment method of the order: %w", err)
	}
	if !addressOK {
		return validation{{Field: "addressId", Message: "not one of your addresses"}}.err()
	}

	// The hold, the step retry window and the payment provider are the worker's: the order runs by
	// the settings of the worker that places it.
	in := workflows.OrderInput{UserID: p.UserID, IdempotencyKey: key, RequestHash: h, PriceVersion: req.PriceVersion,
		AddressID: req.AddressID, CouponCode: pricing.NormalCode(req.CouponCode)}
	wfID := workflows.OrderWorkflowID(p.UserID, key)
	pctx, cancel := context.WithTimeout(ctx, placeTimeout)
	defer cancel()
	updateID := "place-" + h[:24]
	res, err := s.place(pctx, in, wfID, updateID)
	if err == nil && s.mayHavePassed(ctx, p.UserID, res) {
		// The server keeps a closed run's answer to an update id, so this answer may be an earlier
		// run's, whose cause has passed since. The request is placed afresh under an update id of
		// its own (a run still open answers as before; a closed one is followed by a new run).
		res, err = s.place(pctx, in, wfID, updateID+"-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	}
	if err != nil {
		if activities.RefusedWith(err, problem.IdempotencyKeyReused) {
			return keyReused()
		}
		if ctx.Err() != nil {
			return err // the shopper went away
		}
		// Temporal did not answer in time, or the run was interrupted (a worker died mid-update).
		// The request is idempotent: the same key attaches to the same order.
		s.Log.WarnContext(c.Request().Context(), "placing an order did not finish", "error", err, "workflow_id", wfID, "request_id", requestID(c))
		return problem.New(problem.Unavailable,
			"the order is taking longer than usual; repeat the request with the same Idempotency-Key")
	}
	if res.Outcome == workflows.OutcomeReplay {
		if done, err := s.replay(c, p.UserID, key, h); done || err != nil {
			return err
		}
		// No answer was recorded (the first one was "try again"): answer from the order itself.
		return s.renderExisting(c, res.OrderID)
	}
	if res.RejectCode == problem.TooManyOpenOrders {
		s.Metrics.OpenOrdersRefused.Inc()
	}
	return renderOutcome(c, res)
}

// place sends the place-order update to the request's workflow, starting it if it is not running,
// and waits for the answer.
func (s *Server) place(ctx context.Context, in workflows.OrderInput, wfID, updateID string) (res workflows.PlaceOrderResult, err error) {
	start := time.Now()
	defer func() {
		// The round trip feeds admission control, unless the shopper went away before the answer.
		if ctx.Err() == nil || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			s.admission.observe(time.Since(start), err == nil)
		}
	}()
	op := s.Temporal.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID:                       wfID,
		TaskQueue:                s.Options.TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowTaskTimeout:      s.Options.WorkflowTaskTimeout,
		StaticSummary:            "Order of customer " + strconv.FormatInt(in.UserID, 10),
		TypedSearchAttributes:    temporal.NewSearchAttributes(workflows.AttrCustomerID.ValueSet(in.UserID)),
	}, workflows.OrderWorkflow, in)
	handle, err := s.Temporal.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: op,
		UpdateOptions: client.UpdateWorkflowOptions{UpdateName: workflows.UpdatePlaceOrder,
			UpdateID: updateID, Args: []any{in.RequestHash}, WaitForStage: client.WorkflowUpdateStageCompleted},
	})
	if err == nil {
		err = handle.Get(ctx, &res)
	}
	return res, err
}

// mayHavePassed says whether an answer the order's workflow never records under the key may be an
// earlier run's whose cause has passed: too many open orders, when the shopper has a place free
// now; "try again" (a dependency failed before any order row was written), always — the API's own
// database answered this request, and a new run is the one way to know whether the worker's does
// (a fresh "try again" costs one more run, which fails as fast).
func (s *Server) mayHavePassed(ctx context.Context, userID int64, res workflows.PlaceOrderResult) bool {
	switch {
	case res.RejectCode == problem.TooManyOpenOrders:
		return s.placeFree(ctx, userID, res.OpenOrderLimit)
	case res.Outcome == workflows.OutcomeUnavailable && res.OrderID == 0:
		return true
	}
	return false
}

// placeFree says whether the shopper has fewer orders waiting for payment than limit now.
func (s *Server) placeFree(ctx context.Context, userID int64, limit int) bool {
	w, err := order.Store{Pool: s.Pool}.Waiting(ctx, userID)
	return err == nil && w.Pending < int64(limit)
}

// renderExisting answers a repeated request from its order as it stands.
func (s *Server) renderExisting(c echo.Context, orderID int64) error {
	ctx := c.Request().Context()
	o, err := s.orders.GetOrder(ctx, orderID)
	if err != nil {
		return fmt.Errorf("reading order %d: %w", orderID, err)
	}
	var code problem.Code
	if o.FailureCode != nil {
		code = problem.Code(*o.FailureCode)
	}
	switch order.Status(o.Status) {
	case order.StatusFailed, order.StatusCancelled:
		switch code {
		case problem.OutOfStock:
			return renderOutcome(c, workflows.PlaceOrderResult{Outcome: workflows.OutcomeOutOfStock, OrderID: o.ID})
		case problem.PaymentDeclined:
			return renderOutcome(c, workflows.PlaceOrderResult{Outcome: workflows.OutcomePaymentDeclined, OrderID: o.ID})
		}
		return problem.New(problem.OrderFailed, "this request's order ended as "+strings.ToLower(o.Status)+
			"; place the order again with a new Idempotency-Key").WithDetails(orderFailed{FailureCode: code, OrderID: o.ID})
	}
	view := &workflows.PaymentView{Status: payment.StatusPending}
	if pay, err := s.orders.GetPayment(ctx, o.ID); err == nil {
		view.Status = payment.Status(pay.Status)
		if pay.RedirectUrl != nil && view.Status == payment.StatusRequiresAction {
			view.RedirectURL = *pay.RedirectUrl
		}
	}
	return renderOutcome(c, workflows.PlaceOrderResult{Outcome: workflows.OutcomeCreated, OrderID: o.ID, Status: order.Status(o.Status),
		Payment: view, HoldExpiresAt: o.HoldExpiresAt})
}

// replay answers from the recorded outcome of (user, key), if there is one. (A refusal of a
// reused key is never recorded as the key's answer: see InsertIdempotencyRecord.)
func (s *Server) replay(c echo.Context, userID int64, key, hash string) (bool, error) {
	rec, err := s.orders.GetIdempotencyRecord(c.Request().Context(), userID, key)
	if db.NotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading the answer recorded under the key: %w", err)
	}
	if rec.RequestHash != hash {
		return true, keyReused()
	}
	var res workflows.PlaceOrderResult
	if err := json.Unmarshal(rec.Outcome, &res); err != nil {
		return true, fmt.Errorf("reading the answer recorded under the key: %w", err)
	}
	c.Response().Header().Set("Idempotent-Replayed", "true")
	return true, renderOutcome(c, res)
}

func keyReused() *problem.Error {
	return problem.New(problem.IdempotencyKeyReused,
		"this Idempotency-Key was already used with a different request body")
}

// orderFailed are the details of ORDER_FAILED: the order the key placed and why it ended.
type orderFailed struct {
	FailureCode problem.Code `json:"failureCode"`
	OrderID     int64        `json:"orderId"`
}

// outOfStock are the details of OUT_OF_STOCK answered to an order: every short line, and the
// order that failed for them (0 when none was written).
type outOfStock struct {
	Items   []inventory.ShortLine `json:"items"`
	OrderID int64                 `json:"orderId"`
}

// renderOutcome is the one mapping from an order outcome to HTTP.
func renderOutcome(c echo.Context, r workflows.PlaceOrderResult) error {
	if r.OrderID > 0 {
		noteOrder(c, r.OrderID)
	}
	switch r.Outcome {
	case workflows.OutcomeCreated:
		return c.JSON(http.StatusCreated, map[string]any{"orderId": r.OrderID, "status": r.Status,
			"payment": r.Payment, "holdExpiresAt": r.HoldExpiresAt})
	case workflows.OutcomePriceChanged:
		return problem.New(problem.PriceChanged, "prices changed since the preview; review the cart and confirm again").
			WithDetails(pricing.PriceChangedDetails{PriceVersion: r.PriceVersion})
	case workflows.OutcomeOutOfStock:
		items := r.Short
		if items == nil {
			items = []inventory.ShortLine{}
		}
		return problem.New(problem.OutOfStock, "some items are not available in the quantity requested").
			WithDetails(outOfStock{Items: items, OrderID: r.OrderID})
	case workflows.OutcomePaymentDeclined:
		return problem.New(problem.PaymentDeclined, "the payment was declined; the items were released").
			WithDetails(problem.OrderDetails{OrderID: r.OrderID})
	case workflows.OutcomePaymentUnavailable:
		return problem.New(problem.PaymentUnavailable, "the payment provider is unavailable; the items were released").
			WithDetails(problem.OrderDetails{OrderID: r.OrderID})
	case workflows.OutcomeRejected:
		return rejected(c, r)
	}
	if r.OrderID > 0 {
		// The order row exists and has failed, its stock given back: this key is spent.
		return problem.New(problem.Unavailable,
			"the order could not be placed now and was given up; place it again with a new Idempotency-Key").
			WithDetails(problem.OrderDetails{OrderID: r.OrderID})
	}
	return problem.New(problem.Unavailable, "the order could not be placed now; try again")
}

// rejected answers an order refused before anything was reserved or charged with the refusal's
// code, message and details. Answers recorded by earlier releases named an unknown address
// ADDRESS_NOT_FOUND, and any other refusal of the cart with a reject code of its own: they are
// answered as they were then.
func rejected(c echo.Context, r workflows.PlaceOrderResult) error {
	switch {
	case r.RejectCode == problem.TooManyOpenOrders:
		return tooManyOpenOrders(c, r)
	case r.RejectCode == problem.IdempotencyKeyReused:
		return keyReused()
	case r.RejectCode == "ADDRESS_NOT_FOUND":
		return validation{{Field: "addressId", Message: "not one of your addresses"}}.err()
	case AnsweredAs(r.RejectCode) == problem.CouponNotApplicable:
		return couponRefused()
	case !r.RejectCode.Known():
		return problem.New(problem.CartInvalid, r.Message)
	}
	p := problem.New(r.RejectCode, r.Message)
	if len(r.Details) > 0 {
		p.Details = r.Details
	}
	return p
}

// AnsweredAs is the code a client is answered with for a refusal of code: its own, but for the
// reasons a coupon does not apply (pricing.CouponRefusal's), which are all answered as one
// (couponRefused).
func AnsweredAs(code problem.Code) problem.Code {
	switch code {
	case problem.CouponNotFound, problem.CouponNotStarted, problem.CouponExpired, problem.CouponUsedUp,
		problem.CouponAlreadyUsed, problem.CouponMinBasket:
		return problem.CouponNotApplicable
	}
	return code
}

// couponRefused is the one answer, in the preview and to an order, for a coupon that cannot apply
// to this shopper's cart now, whatever the reason: that no coupon has the code, that it has not
// started, has ended, is used up or used by this shopper, or covers none of these items or too
// small a basket of them. Told apart, the reasons say which codes exist, so a client trying
// codes would learn the live ones without a cart they apply to.
func couponRefused() *problem.Error {
	return problem.New(problem.CouponNotApplicable, "this coupon cannot be used for this cart now")
}

// tooManyOpenOrders answers an order over the open-order cap: 429, with Retry-After until the
// first of the shopper's open orders ends by itself (paying or cancelling one frees a place at
// once). The same key may be sent again: this refusal is not recorded under it.
func tooManyOpenOrders(c echo.Context, r workflows.PlaceOrderResult) error {
	wait := time.Minute
	if r.NextHoldEnd != nil {
		wait = max(time.Until(*r.NextHoldEnd), time.Second)
	}
	setRetryAfter(c, wait)
	return problem.New(problem.TooManyOpenOrders, fmt.Sprintf("at most %d of your orders may "+
		"wait for payment at once; pay or cancel one of them, or wait until its hold ends, then send this request again",
		r.OpenOrderLimit)).WithDetails(problem.LimitDetails{Limit: r.OpenOrderLimit})
}

// setRetryAfter tells the client how long to wait, in whole seconds rounded up, and returns them.
func setRetryAfter(c echo.Context, d time.Duration) string {
	secs := strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10)
	c.Response().Header().Set("Retry-After", secs)
	return secs
}

type orderItemView struct {
	SKUID     int64  `json:"skuId"`
	SellerID  int64  `json:"sellerId"`
	Title     string `json:"title"`
	Quantity  int32  `json:"quantity"`
	UnitPrice string `json:"unitPrice"`
	LineTotal string `json:"lineTotal"`
	Currency  string `json:"currency"`
	campaignPrice
	// CancelledQuantity of the quantity ordered will not ship (cancelled after payment).
	CancelledQuantity int32 `json:"cancelledQuantity"`
}

// totalsView is the order's money: what was ordered, what of it was cancelled after payment, what
// the shopper keeps, and the payment's captured and refunded amounts. A cancellation is worth
// what it refunded: its units' price, less their share of a coupon the order spent.
type totalsView struct {
	Ordered   string `json:"ordered"`
	Cancelled string `json:"cancelled"`
	Kept      string `json:"kept"`
	Captured  string `json:"captured"`
	Refunded  string `json:"refunded"`
	Currency  string `json:"currency"`
}

type allocationView struct {
	SKUID       int64  `json:"skuId"`
	WarehouseID int32  `json:"warehouseId"`
	Quantity    int32  `json:"quantity"`
	Status      string `json:"status"`
}

type timelineView struct {
	At     time.Time       `json:"at"`
	Kind   string          `json:"kind"`
	Detail json.RawMessage `json:"detail,omitempty"`
}

type orderView struct {
	OrderID     int64           `json:"orderId"`
	Status      string          `json:"status"`
	FailureCode *string         `json:"failureCode,omitempty"`
	Total       string          `json:"total"`
	Currency    string          `json:"currency"`
	Totals      totalsView      `json:"totals"`
	Items       []orderItemView `json:"items"`
	// Cancellations are units of lines cancelled after payment, each with its refund.
	Cancellations []lineCancellationView `json:"cancellations"`
	Warehouses    []allocationView       `json:"warehouses"`
	Payment       map[string]any         `json:"payment"`
	HoldExpiresAt *time.Time             `json:"holdExpiresAt,omitempty"`
	// HoldExtensions is how many times the shopper has extended the hold.
	HoldExtensions int             `json:"holdExtensions"`
	Attention      json.RawMessage `json:"attention,omitempty"`
	CreatedAt      time.Time       `json:"createdAt"`
	UpdatedAt      time.Time       `json:"updatedAt"`
	Timeline       []timelineView  `json:"timeline"`
	// StaffActions, for support only: every staff action on the order and who sent it.
	StaffActions []staffActionView `json:"staffActions,omitempty"`
}

// staffActionView is one staff action on an order as support reads it: who, when, why, what
// through and from where.
type staffActionView struct {
	At                 time.Time       `json:"at"`
	Action             string          `json:"action"`
	Reason             string          `json:"reason"`
	Step               *string         `json:"step,omitempty"`
	LineCancellationID *int64          `json:"lineCancellationId,omitempty"`
	Actor              staff.Actor     `json:"actor"`
	Detail             json.RawMessage `json:"detail,omitempty"`
}

// loadOrder reads an order the caller may see: its shopper, or support. Anyone else gets 404, so
// order ids cannot be probed.
func (s *Server) loadOrder(c echo.Context) (order.Order, error) {
	id, err := orderIDOf(c)
	if err != nil {
		return order.Order{}, err
	}
	o, err := s.orders.GetOrder(c.Request().Context(), id)
	if db.NotFound(err) {
		return order.Order{}, notFound()
	}
	if err != nil {
		return order.Order{}, fmt.Errorf("reading order %d: %w", id, err)
	}
	if !mayRead(c, o) {
		return order.Order{}, notFound()
	}
	return o, nil
}

// orderIDOf is the order named by the path; one that cannot name an order is not found.
func orderIDOf(c echo.Context) (int64, error) {
	id, err := strconv.ParseInt(c.Param("orderId"), 10, 64)
	if err != nil || id <= 0 {
		return 0, notFound()
	}
	return id, nil
}

// mayRead: the caller may read o, its own order or any order for support. Another's order is
// answered as one that does not exist.
func mayRead(c echo.Context, o order.Order) bool {
	p := mustPrincipal(c)
	return o.UserID == p.UserID || p.Role == auth.RoleSupport
}

func (s *Server) getOrder(c echo.Context) error {
	id, err := orderIDOf(c)
	if err != nil {
		return err
	}
	ov, err := order.Store{Pool: s.Pool}.View(c.Request().Context(), id)
	if db.NotFound(err) || err == nil && !mayRead(c, ov.Order) {
		return notFound()
	}
	if err != nil {
		return fmt.Errorf("reading order %d as its shopper sees it: %w", id, err)
	}
	o := ov.Order
	v := orderView{OrderID: o.ID, Status: o.Status, FailureCode: o.FailureCode, Total: money.FormatIn(o.TotalMinor, o.Currency),
		Currency: o.Currency, HoldExpiresAt: o.HoldExpiresAt, HoldExtensions: int(o.HoldExtensions),
		CreatedAt: o.CreatedAt, UpdatedAt: o.UpdatedAt, Items: []orderItemView{}, Warehouses: []allocationView{},
		Timeline: []timelineView{}, Cancellations: []lineCancellationView{}}
	support := mustPrincipal(c).Role == auth.RoleSupport
	if o.Attention.Valid {
		v.Attention = o.Attention.RawMessage
		if !support {
			v.Attention = shopperAttention(o.Attention.RawMessage)
		}
	}
	for _, it := range ov.Items {
		var list int64
		if it.ListPriceMinor != nil {
			list = *it.ListPriceMinor
		}
		v.Items = append(v.Items, orderItemView{SKUID: it.SkuID, SellerID: it.SellerID, Title: it.Title, Quantity: it.Quantity,
			UnitPrice: money.FormatIn(it.UnitPriceMinor, it.Currency), LineTotal: money.FormatIn(it.UnitPriceMinor*int64(it.Quantity), it.Currency),
			Currency: it.Currency, CancelledQuantity: it.CancelledQuantity,
			campaignPrice: campaignPriceOf(pricing.Item{UnitPriceMinor: it.UnitPriceMinor, ListPriceMinor: list, Currency: it.Currency,
				Campaigns: it.CampaignIds})})
	}
	cancelled := ov.CancelledMinor()
	inOrder := func(minor int64) string { return money.FormatIn(minor, o.Currency) }
	v.Totals = totalsView{Ordered: inOrder(o.TotalMinor), Cancelled: inOrder(cancelled),
		Kept: inOrder(o.TotalMinor - cancelled), Captured: inOrder(0), Refunded: inOrder(0), Currency: o.Currency}
	for _, lc := range ov.Cancellations {
		v.Cancellations = append(v.Cancellations, cancellationView(lc, support))
	}
	for _, r := range ov.Reservations {
		v.Warehouses = append(v.Warehouses, allocationView{SKUID: r.SKUID, WarehouseID: r.WarehouseID, Quantity: r.Quantity, Status: r.Status})
	}
	if pay := ov.Payment; pay != nil {
		inPay := func(minor int64) string { return money.FormatIn(minor, pay.Currency) }
		v.Payment = map[string]any{"status": pay.Status, "amount": inPay(pay.AmountMinor), "currency": pay.Currency,
			"captured": inPay(pay.CapturedMinor), "refunded": inPay(pay.RefundedMinor)}
		v.Totals.Captured, v.Totals.Refunded = inPay(pay.CapturedMinor), inPay(pay.RefundedMinor)
		if pay.IntentID != nil {
			v.Payment["intentId"] = *pay.IntentID
		}
		if pay.RedirectUrl != nil && payment.Status(pay.Status) == payment.StatusRequiresAction {
			v.Payment["redirectUrl"] = *pay.RedirectUrl
		}
	}
	if support {
		for _, a := range ov.StaffActions {
			v.StaffActions = append(v.StaffActions, staffActionView{At: a.CreatedAt, Action: a.Action, Reason: a.Reason,
				Step: a.Step, LineCancellationID: a.LineCancellationID, Detail: a.Detail, Actor: staff.Actor{Sub: a.ActorSub,
					Role: a.ActorRole, Name: a.ActorName, Via: a.ActorVia, IP: a.ActorIp}})
		}
	}
	for _, e := range ov.Timeline {
		t := timelineView{At: e.CreatedAt, Kind: e.Kind}
		if e.Detail.Valid {
			t.Detail = e.Detail.RawMessage
			if !support {
				t.Detail = order.ShopperDetail(e.Detail.RawMessage)
			}
		}
		v.Timeline = append(v.Timeline, t)
	}
	return c.JSON(http.StatusOK, v)
}

// CodeOrderDelayed is a parked order's attention as its shopper sees it (no error answer: the code
// of the order's attention).
const CodeOrderDelayed = "ORDER_DELAYED"

// shopperAttention is a parked order's attention as its shopper sees it: the step, a code and a
// message of ours, not the failing dependency's error.
func shopperAttention(raw json.RawMessage) json.RawMessage {
	var a struct {
		Step string `json:"step"`
	}
	_ = json.Unmarshal(raw, &a)
	out, _ := json.Marshal(map[string]string{"step": a.Step, "code": CodeOrderDelayed,
		"message": "finishing this order takes longer than usual; it goes on by itself or our support completes it"})
	return out
}

// listOrders answers the caller's orders, newest first, a page at a time (cursor = the last id).
func (s *Server) listOrders(c echo.Context) error {
	limit := int32(20)
	if l := c.QueryParam("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 100 {
			return validation{{Field: "limit", Message: "between 1 and 100"}}.err()
		}
		limit = int32(n)
	}
	before := int64(1<<63 - 1)
	if cur := c.QueryParam("cursor"); cur != "" {
		n, err := strconv.ParseInt(cur, 10, 64)
		if err != nil || n <= 0 {
			return validation{{Field: "cursor", Message: "the nextCursor of the previous page"}}.err()
		}
		before = n
	}
	rows, err := s.orders.ListOrdersOfUser(c.Request().Context(), mustPrincipal(c).UserID, before, limit)
	if err != nil {
		return fmt.Errorf("listing the caller's orders: %w", err)
	}
	out := make([]map[string]any, len(rows))
	for i, r := range rows {
		out[i] = map[string]any{"orderId": r.ID, "status": r.Status, "total": money.FormatIn(r.TotalMinor, r.Currency),
			"currency": r.Currency, "failureCode": r.FailureCode, "createdAt": r.CreatedAt}
	}
	var next *string
	if len(rows) == int(limit) {
		n := strconv.FormatInt(rows[len(rows)-1].ID, 10)
		next = &n
	}
	return c.JSON(http.StatusOK, map[string]any{"orders": out, "nextCursor": next})
}

// cancelOrder cancels an order before it is confirmed: the workflow compensates (payment voided,
// stock released) and answers the final status. After confirmation it is 409.
func (s *Server) cancelOrder(c echo.Context) error {
	o, err := s.loadOrder(c)
	if err != nil {
		return err
	}
	if !order.Status(o.Status).Open() {
		return s.cancelAnswer(c, o.ID, order.Status(o.Status), o.FailureCode)
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), placeTimeout)
	defer cancel()
	var res workflows.CancelResult
	for attempt := 0; ; attempt++ {
		var handle client.WorkflowUpdateHandle
		handle, err = s.Temporal.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: o.WorkflowID,
			UpdateName: workflows.UpdateCancel, WaitForStage: client.WorkflowUpdateStageCompleted})
		if err == nil {
			err = handle.Get(ctx, &res)
		}
		// A workflow task that fails under the update (another event arrived as the order closed)
		// gives it up; the cancel is repeated, which the order accepts while it is still cancelling.
		if err == nil || cancelSettled(err) || attempt == 2 || ctx.Err() != nil {
			break
		}
	}
	var nf *serviceerror.NotFound
	switch {
	case activities.RefusedWith(err, problem.OrderNotCancellable), errors.As(err, &nf):
		cur, gerr := s.orders.GetOrder(c.Request().Context(), o.ID)
		if gerr != nil {
			return fmt.Errorf("reading order %d after its cancel: %w", o.ID, gerr)
		}
		return s.cancelAnswer(c, o.ID, order.Status(cur.Status), cur.FailureCode)
	case err != nil:
		return fmt.Errorf("cancelling order %d: %w", o.ID, err)
	}
	if res.Status != order.StatusCancelled {
		return notCancellable(res.Status)
	}
	return c.JSON(http.StatusOK, map[string]any{"orderId": o.ID, "status": res.Status})
}

// cancelAnswer answers a cancel of an order that is no longer open: cancelled by its shopper (a
// repeat, or one whose first answer was lost) is the cancel's own answer; anything else is 409.
func (s *Server) cancelAnswer(c echo.Context, orderID int64, status order.Status, code *string) error {
	if status == order.StatusCancelled && code != nil && problem.Code(*code) == problem.CancelledByShopper {
		return c.JSON(http.StatusOK, map[string]any{"orderId": orderID, "status": status})
	}
	return notCancellable(status)
}

// cancelSettled: the cancel got its answer (the order refused it, or its workflow has ended).
func cancelSettled(err error) bool {
	var appErr *temporal.ApplicationError
	var nf *serviceerror.NotFound
	return errors.As(err, &appErr) || errors.As(err, &nf)
}

func notCancellable(status order.Status) *problem.Error {
	return problem.New(problem.OrderNotCancellable, "the order is "+strings.ToLower(string(status))+
		" and can no longer be cancelled").WithDetails(problem.StatusDetails{Status: string(status)})
}
