package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/activity"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/internal/money"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/internal/staff"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/order"
	"github.com/marketplace/checkout/outbox/emit"
	"github.com/marketplace/checkout/payment"
)

// EventOrderLineCancelled tells the shopper and the seller that units of a line will not ship
// and what was refunded.
const EventOrderLineCancelled = "order.line_cancelled"

// LineCancelRequest asks to cancel units of one line (the order's SKU) of a confirmed order.
type LineCancelRequest struct {
	OrderID   int64  `json:"orderId"`
	SKUID     int64  `json:"skuId"`
	Units     int32  `json:"units"`
	Reason    string `json:"reason"`
	RequestID string `json:"requestId"`
	// RequestedBy says who asked, for people reading the cancellation: the actor, named.
	RequestedBy string `json:"requestedBy"`
	// Actor is the verified person who asked, and WorkflowID and RunID the workflow run that
	// records the request: its staff_actions row (action 0 of the run). Nil in the requests of
	// earlier builds, which record none.
	Actor      *staff.Actor `json:"actor,omitempty"`
	WorkflowID string       `json:"workflowId,omitempty"`
	RunID      string       `json:"runId,omitempty"`
}

// LineCancel is a recorded cancellation and the line as it stands.
type LineCancel struct {
	ID          int64               `json:"id"`
	AmountMinor int64               `json:"amountMinor"`
	Currency    string              `json:"currency"`
	Allocations []inventory.UnitsAt `json:"allocations"`
	// Restock: the reason puts the units back on the shelf (inventory.ReturnsToShelf).
	Restock   bool `json:"restock"`
	Refunded  bool `json:"refunded"`
	Restocked bool `json:"restocked"`
	Announced bool `json:"announced"`
	// Repeat: the request was already recorded, by an earlier run or another caller.
	Repeat        bool  `json:"repeat,omitempty"`
	LineQuantity  int32 `json:"lineQuantity"`
	LineCancelled int32 `json:"lineCancelled"`
}

// UnitsExceedLineDetails travel with an UnitsExceedLine refusal.
type UnitsExceedLineDetails struct {
	Remaining int32 `json:"remaining"`
}

// RecordLineCancel is the first step of a line cancellation: in one transaction the request is
// recorded under its (order, request id), the units are taken off the line by a conditional
// UPDATE that only passes while the order is CONFIRMED and the line still has them (so
// concurrent requests never cancel more than the line has), and off the line's CONFIRMED
// reservations. A repeat of the request finds its record and changes nothing; the same request
// id with another line, count or reason is refused. The record names the workflow that took the
// request up last, whose being gone the payment reconciler watches for.
func (a *Orders) RecordLineCancel(ctx context.Context, in LineCancelRequest) (LineCancel, error) {
	var out LineCancel
	var workflowID *string
	if activity.IsActivity(ctx) {
		id := activity.GetInfo(ctx).WorkflowExecution.ID
		workflowID = &id
	}
	err := db.BeginFunc(ctx, a.Pool, func(tx pgx.Tx) error {
		q := order.DataOf(tx)
		// One cancellation of the order at a time: each is priced from the units the last one kept.
		if err := q.LockOrder(ctx, in.OrderID); err != nil {
			return err
		}
		id, err := q.InsertLineCancellation(ctx, order.NewLineCancellation{RequestID: in.RequestID,
			Reason: in.Reason, RequestedBy: in.RequestedBy, WorkflowID: workflowID, OrderID: in.OrderID, SkuID: in.SKUID,
			Units: in.Units})
		if db.NotFound(err) {
			prior, err := q.LineCancellationByRequest(ctx, in.OrderID, in.RequestID)
			if db.NotFound(err) {
				return lineRefusal(ctx, q, in)
			}
			if err != nil {
				return err
			}
			if prior.SkuID != in.SKUID || prior.Units != in.Units || prior.Reason != in.Reason {
				return RefusalError(problem.New(problem.IdempotencyKeyReused,
					"this request id was used for another cancellation"))
			}
			if workflowID != nil {
				if err := q.SetLineCancellationWorkflow(ctx, *workflowID, prior.ID); err != nil {
					return err
				}
			}
			if err := recordLineCancelActor(ctx, q, in, prior.ID, true); err != nil {
				return err
			}
			out, err = lineCancelOf(ctx, q, prior)
			out.Repeat = true
			return err
		}
		if err != nil {
			return err
		}
		if _, err := q.CancelLineUnits(ctx, in.Units, in.OrderID, in.SKUID); db.NotFound(err) {
			return lineRefusal(ctx, q, in)
		} else if err != nil {
			return err
		}
		at, err := inventory.CancelConfirmedUnits(ctx, tx, in.OrderID, in.SKUID, in.Units)
		if err != nil {
			return asApplicationError(err, "taking the units off their reservations")
		}
		raw, err := json.Marshal(at)
		if err != nil {
			return err
		}
		if err := q.SetLineCancellationAllocations(ctx, raw, id); err != nil {
			return err
		}
		note := map[string]any{"skuId": in.SKUID, "units": in.Units, "code": in.Reason, "requestId": in.RequestID,
			"by": in.RequestedBy}
		if in.Actor != nil {
			note["actor"] = in.Actor
		}
		if err := q.Note(ctx, in.OrderID, "line_cancel_requested", note); err != nil {
			return err
		}
		if err := recordLineCancelActor(ctx, q, in, id, false); err != nil {
			return err
		}
		out, err = lineCancelByID(ctx, q, id)
		return err
	})
	return out, failed(err, "recording the cancellation of %d units of SKU %d of order %d", in.Units, in.SKUID, in.OrderID)
}

// recordLineCancelActor writes the request's staff_actions row: who asked for the cancellation
// (a repeat of a recorded request, sent again by a workflow of its own, is an action too).
func recordLineCancelActor(ctx context.Context, q order.Data, in LineCancelRequest, cancellationID int64, repeat bool) error {
	if in.Actor == nil {
		return nil
	}
	detail := map[string]any{"skuId": in.SKUID, "units": in.Units, "requestId": in.RequestID}
	if repeat {
		detail["repeat"] = true
	}
	_, err := q.RecordStaffAction(ctx, order.StaffAction{OrderID: in.OrderID, LineCancellationID: cancellationID,
		Action: order.StaffLineCancel, Reason: in.Reason, Actor: *in.Actor, Detail: detail, WorkflowID: in.WorkflowID,
		RunID: in.RunID})
	return err
}

// lineRefusal says why a cancellation cannot be recorded: no such order or line, an order that is
// not CONFIRMED, or fewer units left on the line than asked.
func lineRefusal(ctx context.Context, q order.Data, in LineCancelRequest) error {
	l, err := q.LineOfOrder(ctx, in.SKUID, in.OrderID)
	switch {
	case db.NotFound(err):
		return RefusalError(problem.New(problem.NotFound, fmt.Sprintf("no order %d", in.OrderID)))
	case err != nil:
		return fmt.Errorf("reading line %d of order %d: %w", in.SKUID, in.OrderID, err)
	case order.Status(l.Status) != order.StatusConfirmed:
		return RefusalError(problem.New(problem.OrderNotConfirmed,
			"the order is "+l.Status+": only a CONFIRMED order's lines are cancelled").WithDetails(problem.StatusDetails{Status: l.Status}))
	case l.Quantity == nil:
		return RefusalError(problem.New(problem.LineNotFound,
			fmt.Sprintf("order %d has no line of SKU %d", in.OrderID, in.SKUID)))
	}
	left := *l.Quantity - *l.CancelledQuantity
	return RefusalError(problem.New(problem.UnitsExceedLine, fmt.Sprintf("%d units asked, %d left on the line", in.Units, left)).
		WithDetails(UnitsExceedLineDetails{Remaining: left}))
}

func lineCancelByID(ctx context.Context, q order.Data, id int64) (LineCancel, error) {
	c, err := q.GetLineCancellation(ctx, id)
	if err != nil {
		return LineCancel{}, err
	}
	return lineCancelOf(ctx, q, c)
}

func lineCancelOf(ctx context.Context, q order.Data, c order.LineCancellation) (LineCancel, error) {
	out := LineCancel{ID: c.ID, AmountMinor: c.AmountMinor, Currency: c.Currency, Restock: inventory.ReturnsToShelf(c.Reason),
		Refunded: c.RefundedAt != nil, Restocked: c.RestockedAt != nil, Announced: c.AnnouncedAt != nil}
	if err := json.Unmarshal(c.Allocations, &out.Allocations); err != nil {
		return out, fmt.Errorf("line cancellation %d: allocations: %w", c.ID, err)
	}
	l, err := q.LineOfOrder(ctx, c.SkuID, c.OrderID)
	if err != nil {
		return out, err
	}
	if l.Quantity != nil {
		out.LineQuantity, out.LineCancelled = *l.Quantity, *l.CancelledQuantity
	}
	return out, nil
}

// LineRefundKey is the provider idempotency key of a line cancellation's refund: one per
// cancellation request, so a repeat never refunds twice.
func LineRefundKey(orderID, cancellationID int64) string {
	return order.PaymentKey(orderID) + "-line-cancel-" + strconv.FormatInt(cancellationID, 10)
}

// RefundLineCancel refunds a recorded cancellation's units at the provider, as a partial refund
// of the order's capture under the cancellation's own key, mirrors the intent and stamps the
// cancellation refunded. A repeat moves no more money. A provider that is down is retried; one
// that refuses (PaymentRefused: the intent is not captured, or less is left of it) is not.
func (a *Payments) RefundLineCancel(ctx context.Context, cancellationID int64) (PaymentResult, error) {
	q := order.DataOf(db.Traced(a.Pool))
	c, err := q.GetLineCancellation(ctx, cancellationID)
	if err != nil {
		return PaymentResult{}, fmt.Errorf("reading line cancellation %d: %w", cancellationID, err)
	}
	res := PaymentResult{}
	if c.RefundedAt == nil && c.AmountMinor > 0 {
		r, err := a.ref(ctx, c.OrderID)
		if err != nil {
			return PaymentResult{}, err
		}
		intent, err := a.Gateway.RefundPart(ctx, r.Ref, payment.PartialRefund{
			IdempotencyKey: LineRefundKey(c.OrderID, c.ID), AmountMinor: c.AmountMinor})
		if err != nil {
			return PaymentResult{}, providerError(err)
		}
		if res, err = a.mirror(ctx, c.OrderID, intent); err != nil {
			return PaymentResult{}, err
		}
	}
	if _, err := q.MarkLineCancellationRefunded(ctx, c.ID); err != nil {
		return PaymentResult{}, fmt.Errorf("marking line cancellation %d refunded: %w", c.ID, err)
	}
	return res, nil
}

// RestockLineCancel puts a cancellation's units back on the shelf when its reason says they
// never left it; once.
func (a *Inventory) RestockLineCancel(ctx context.Context, cancellationID int64) (int32, error) {
	n, err := a.Engine.RestockCancelled(ctx, cancellationID)
	return n, asApplicationError(err, "restocking line cancellation %d", cancellationID)
}

// AnnounceLineCancel finishes a refunded cancellation once: its timeline entry and the outbox
// event that tells the shopper and the seller, in one transaction. A repeat writes nothing.
func (a *Orders) AnnounceLineCancel(ctx context.Context, cancellationID int64) (LineCancel, error) {
	var out LineCancel
	err := db.BeginFunc(ctx, a.Pool, func(tx pgx.Tx) error {
		q := order.DataOf(tx)
		r, err := q.AnnounceLineCancellation(ctx, cancellationID)
		if err != nil && !db.NotFound(err) {
			return err
		}
		if err == nil {
			refund := money.FormatIn(r.AmountMinor, r.Currency)
			if err := q.Note(ctx, r.OrderID, "line_cancelled", map[string]any{"skuId": r.SkuID,
				"units": r.Units, "code": r.Reason, "refund": refund, "currency": r.Currency,
				"restocked": r.Restocked}); err != nil {
				return err
			}
			payload, err := json.Marshal(map[string]any{"orderId": r.OrderID, "userId": r.UserID, "sellerId": r.SellerID,
				"skuId": r.SkuID, "units": r.Units, "reason": r.Reason, "refund": refund, "refundMinor": r.AmountMinor,
				"currency": r.Currency, "restocked": r.Restocked, "lineQuantity": r.Quantity,
				"lineCancelled": r.CancelledQuantity})
			if err != nil {
				return err
			}
			if err := emit.Event(ctx, tx, "order", strconv.FormatInt(r.OrderID, 10), EventOrderLineCancelled, payload); err != nil {
				return err
			}
		}
		out, err = lineCancelByID(ctx, q, cancellationID)
		return err
	})
	return out, failed(err, "announcing line cancellation %d", cancellationID)
}

// LineCancelAttentionInput says which step of a cancellation waits for support, and why; an
// empty Step says none does any more.
type LineCancelAttentionInput struct {
	CancellationID int64  `json:"cancellationId"`
	Step           string `json:"step,omitempty"`
	Error          string `json:"error,omitempty"`
	Code           string `json:"code,omitempty"`
}

// LineCancelAttention keeps the cancellation's row in step with what its workflow waits for, so
// that the API's order view shows it too.
func (a *Orders) LineCancelAttention(ctx context.Context, in LineCancelAttentionInput) error {
	var raw []byte
	if in.Step != "" {
		var err error
		if raw, err = json.Marshal(map[string]string{"step": in.Step, "error": in.Error, "code": in.Code}); err != nil {
			return err
		}
	}
	err := order.DataOf(a.Pool).SetLineCancellationAttention(ctx, nullJSON(raw), in.CancellationID)
	return failed(err, "keeping the attention of line cancellation %d", in.CancellationID)
}
