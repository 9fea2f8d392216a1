package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/internal/money"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/internal/staff"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/order"
	"github.com/marketplace/checkout/workflows"
)

// lineCancelWait bounds how long a line cancellation's request waits for it to finish; one that
// takes longer (the provider is down, or refused the refund) is answered 202 with the line as
// recorded, and goes on by itself.
const lineCancelWait = 20 * time.Second

type lineCancelBody struct {
	Units  int32  `json:"units"`
	Reason string `json:"reason"`
}

func (b lineCancelBody) validate() error {
	var v validation
	if b.Units < 1 || b.Units > 1000 {
		v.add("units", "between 1 and 1000: how many units of the line will not ship")
	}
	if !inventory.ValidCancelReason(b.Reason) {
		v.add("reason", "one of "+strings.Join(inventory.CancelReasons, ", "))
	}
	return v.err()
}

// cancelLine cancels units of one line of a CONFIRMED order (ops): its own LineCancelWorkflow per
// (order, Idempotency-Key), so a repeat attaches to the same cancellation and gets the same
// answer. It answers the line's new state once the cancellation is done (200), or as recorded so
// far when it takes longer (202).
func (s *Server) cancelLine(c echo.Context) error {
	var b lineCancelBody
	key, err := keyedBody(c, &b)
	if err != nil {
		return err
	}
	orderID, err1 := strconv.ParseInt(c.Param("orderId"), 10, 64)
	skuID, err2 := strconv.ParseInt(c.Param("lineId"), 10, 64)
	if err1 != nil || err2 != nil || orderID <= 0 || skuID <= 0 {
		return notFound()
	}
	ctx := c.Request().Context()
	// The person who asks, from the verified bearer token: the workflow records it (the order's
	// timeline, staff_actions) and refuses a request that names nobody.
	actor := staff.FromPrincipal(mustPrincipal(c), staffName(mustPrincipal(c)), staff.ViaOpsAPI, c.RealIP())
	in := workflows.LineCancelInput{OrderID: orderID, SKUID: skuID, Units: b.Units, Reason: b.Reason, RequestID: key,
		Actor: &actor}
	// A recorded request is never refused for what happened since (the order's line has fewer
	// units left now): it is the same cancellation, answered again.
	prior, err := s.orders.LineCancellationByRequest(ctx, orderID, key)
	switch {
	case err == nil:
		if prior.SkuID != skuID || prior.Units != b.Units || prior.Reason != b.Reason {
			return keyReused()
		}
	case db.NotFound(err):
		if err := s.lineCancellable(ctx, in); err != nil {
			return err
		}
	default:
		return fmt.Errorf("reading the cancellation under the key: %w", err)
	}

	run, err := s.Temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: workflows.LineCancelWorkflowID(orderID, key), TaskQueue: s.Options.TaskQueue,
		WorkflowTaskTimeout:      s.Options.WorkflowTaskTimeout,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		// A refused request changed nothing: the same key may be sent again. A cancellation that
		// went through is answered, never run twice.
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY,
	}, workflows.LineCancelWorkflowName, in)
	if err != nil {
		return fmt.Errorf("starting the line cancellation: %w", err)
	}
	// The wait is bounded here, not by a deadline on the call: the server enforces a call's
	// deadline itself and may end the call a moment before the client's own timer, which then
	// reads as a failure instead of the wait's end.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var st workflows.LineCancelState
	got := make(chan error, 1)
	go func() { got <- run.Get(wctx, &st) }()
	waited := false
	select {
	case err = <-got:
	case <-time.After(lineCancelWait):
		cancel()
		<-got
		waited = true
	}
	switch {
	case waited && ctx.Err() == nil:
		// Still under way: answered from the record below.
	case err == nil:
		if r := st.Request; r.SKUID != skuID || r.Units != b.Units || r.Reason != b.Reason {
			return keyReused()
		}
	default:
		if refusal := lineCancelRefusal(err); refusal != nil {
			return refusal
		}
		return fmt.Errorf("cancelling units of line %d of order %d: %w", skuID, orderID, err)
	}
	return s.lineAnswer(c, orderID, skuID, key)
}

// lineCancellable checks a new request against the order before a workflow is started for it;
// the workflow's own conditional statement decides when requests race.
func (s *Server) lineCancellable(ctx context.Context, in workflows.LineCancelInput) error {
	l, err := s.orders.LineOfOrder(ctx, in.SKUID, in.OrderID)
	switch {
	case db.NotFound(err):
		return notFound()
	case err != nil:
		return fmt.Errorf("reading line %d of order %d: %w", in.SKUID, in.OrderID, err)
	case order.Status(l.Status) != order.StatusConfirmed:
		return orderNotConfirmed(l.Status)
	case l.Quantity == nil:
		return lineNotFound()
	case *l.Quantity-*l.CancelledQuantity < in.Units:
		return unitsExceedLine(*l.Quantity - *l.CancelledQuantity)
	}
	return nil
}

// lineCancelRefusal answers the cancellation's refusals; nil when err is not one.
func lineCancelRefusal(err error) error {
	refusal := activities.Refusal(err)
	if refusal == nil {
		return nil
	}
	switch refusal.Code {
	case problem.OrderNotConfirmed:
		d, _ := activities.DetailsOf[problem.StatusDetails](refusal)
		return orderNotConfirmed(d.Status)
	case problem.UnitsExceedLine:
		d, _ := activities.DetailsOf[activities.UnitsExceedLineDetails](refusal)
		return unitsExceedLine(d.Remaining)
	case problem.LineNotFound:
		return lineNotFound()
	case problem.NotFound:
		return notFound()
	case problem.IdempotencyKeyReused:
		return keyReused()
	case problem.ValidationFailed:
		return problem.New(problem.ValidationFailed, refusal.Message)
	}
	return nil
}

func orderNotConfirmed(status string) *problem.Error {
	return problem.New(problem.OrderNotConfirmed, "the order is "+strings.ToLower(status)+
		": only a confirmed order's lines are cancelled this way").WithDetails(problem.StatusDetails{Status: status})
}

// unitsExceedLine refuses more units than are left on the line.
func unitsExceedLine(remaining int32) *problem.Error {
	return problem.New(problem.UnitsExceedLine, "more units than are left on the line").
		WithDetails(activities.UnitsExceedLineDetails{Remaining: remaining})
}

func lineNotFound() *problem.Error {
	return problem.New(problem.LineNotFound, "the order has no line of this SKU")
}

// lineView is one line of an order with what was cancelled of it.
type lineView struct {
	OrderID           int64                  `json:"orderId"`
	SKUID             int64                  `json:"skuId"`
	Quantity          int32                  `json:"quantity"`
	CancelledQuantity int32                  `json:"cancelledQuantity"`
	Remaining         int32                  `json:"remaining"`
	UnitPrice         string                 `json:"unitPrice"`
	Currency          string                 `json:"currency"`
	Cancellation      lineCancellationView   `json:"cancellation"`
	Cancellations     []lineCancellationView `json:"cancellations"`
}

// lineCancellationView is one cancellation of units of a line. Attention and who asked are for
// support and ops only.
type lineCancellationView struct {
	RequestID   string          `json:"requestId,omitempty"`
	SKUID       int64           `json:"skuId"`
	Units       int32           `json:"units"`
	Reason      string          `json:"reason"`
	Refund      string          `json:"refund"`
	Currency    string          `json:"currency"`
	Restocked   bool            `json:"restocked"`
	Status      string          `json:"status"`
	At          time.Time       `json:"at"`
	RequestedBy string          `json:"requestedBy,omitempty"`
	Attention   json.RawMessage `json:"attention,omitempty"`
	WorkflowID  string          `json:"workflowId,omitempty"`
}

// cancellationView is a cancellation as the staff see it (full) or its shopper (codes only).
func cancellationView(c order.LineCancellation, forStaff bool) lineCancellationView {
	v := lineCancellationView{SKUID: c.SkuID, Units: c.Units, Reason: c.Reason, Refund: money.FormatIn(c.AmountMinor, c.Currency),
		Currency: c.Currency, Restocked: c.RestockedAt != nil, Status: lineCancellationStatus(c), At: c.CreatedAt}
	if forStaff {
		v.RequestID, v.RequestedBy = c.RequestID, c.RequestedBy
		v.WorkflowID = workflows.LineCancelWorkflowID(c.OrderID, c.RequestID)
		if c.Attention.Valid {
			v.Attention = c.Attention.RawMessage
		}
	}
	return v
}

// lineCancellationStatus: DONE once announced; NEEDS_ATTENTION while a step waits for support;
// REFUNDED once the money is back; RECORDED while the refund is under way.
func lineCancellationStatus(c order.LineCancellation) string {
	switch {
	case c.AnnouncedAt != nil:
		return workflows.LineCancelDone
	case c.Attention.Valid:
		return workflows.LineCancelNeedsAttention
	case c.RefundedAt != nil:
		return workflows.LineCancelRefunded
	}
	return workflows.LineCancelRecorded
}

// lineAnswer renders the line with the request's cancellation: 200 once it is done, 202 while it
// is under way.
func (s *Server) lineAnswer(c echo.Context, orderID, skuID int64, key string) error {
	ctx := c.Request().Context()
	items, err := s.orders.OrderItems(ctx, orderID)
	if err != nil {
		return fmt.Errorf("reading the lines of order %d: %w", orderID, err)
	}
	all, err := s.orders.LineCancellationsOfOrder(ctx, orderID)
	if err != nil {
		return fmt.Errorf("reading the cancellations of order %d: %w", orderID, err)
	}
	v := lineView{OrderID: orderID, SKUID: skuID, Cancellations: []lineCancellationView{}}
	for _, it := range items {
		if it.SkuID == skuID {
			v.Quantity, v.CancelledQuantity, v.Remaining = it.Quantity, it.CancelledQuantity, it.Quantity-it.CancelledQuantity
			v.UnitPrice, v.Currency = money.FormatIn(it.UnitPriceMinor, it.Currency), it.Currency
		}
	}
	found := false
	for _, lc := range all {
		if lc.SkuID != skuID {
			continue
		}
		cv := cancellationView(lc, true)
		v.Cancellations = append(v.Cancellations, cv)
		if lc.RequestID == key {
			v.Cancellation, found = cv, true
		}
	}
	if !found {
		// Not recorded yet: its workflow has not reached the first step (Temporal or PostgreSQL
		// is slow). The same request, repeated, finds it.
		return problem.New(problem.Unavailable, "the cancellation is being recorded; repeat the request")
	}
	status := http.StatusOK
	if v.Cancellation.Status != workflows.LineCancelDone {
		status = http.StatusAccepted
	}
	return c.JSON(status, v)
}
