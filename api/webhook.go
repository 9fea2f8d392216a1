package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/payment"
	"github.com/marketplace/checkout/workflows"
)

// paymentWebhook receives the provider's signed events. A bad signature is 401 and changes
// nothing; an event already seen is acknowledged and changes nothing more. The event is handed to
// the order's workflow as a signal in the same transaction that records it, so a failed signal is
// retried by the provider rather than lost.
func (s *Server) paymentWebhook(c echo.Context) error {
	body, err := io.ReadAll(c.Request().Body)
	if err != nil {
		var he *echo.HTTPError
		if errors.As(err, &he) {
			return he
		}
		return err
	}
	if err := payment.Verify([]byte(s.Config.PaymentWebhookSecret), body,
		c.Request().Header.Get(payment.SignatureHeader), time.Now(), payment.DefaultTolerance); err != nil {
		s.Log.Warn("payment webhook refused", "reason", err.Error(), "request_id", requestID(c))
		return NewError(http.StatusUnauthorized, CodeInvalidSignature, "invalid webhook signature")
	}
	var ev payment.WebhookEvent
	if err := json.Unmarshal(body, &ev); err != nil || ev.ID == "" || ev.Intent.ID == "" {
		return NewError(http.StatusBadRequest, CodeInvalidJSON, "not a payment event")
	}
	ctx := c.Request().Context()
	duplicate, unknown := false, false
	err = pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		n, err := q.InsertWebhookEvent(ctx, ev.ID, ev.Intent.ID, ev.Type)
		if err != nil {
			return err
		}
		if n == 0 {
			duplicate = true
			return nil
		}
		order, err := q.PaymentByIntent(ctx, &ev.Intent.ID)
		if errors.Is(err, pgx.ErrNoRows) {
			var byKey db.PaymentByKeyRow
			byKey, err = q.PaymentByKey(ctx, ev.Intent.IdempotencyKey)
			order = db.PaymentByIntentRow(byKey)
		}
		if errors.Is(err, pgx.ErrNoRows) {
			unknown = true
			return nil
		}
		if err != nil {
			return err
		}
		err = s.Temporal.SignalWorkflow(ctx, order.WorkflowID, "", workflows.SignalPaymentResult,
			workflows.PaymentSignal{EventID: ev.ID, IntentID: ev.Intent.ID, Status: string(ev.Intent.Status)})
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return s.paymentForClosedOrder(ctx, q, order.OrderID, ev)
		}
		return err
	})
	if err != nil {
		return err
	}
	if unknown {
		s.Log.Warn("payment event for an unknown intent", "intent_id", ev.Intent.ID, "event_id", ev.ID)
	}
	return c.JSON(http.StatusOK, map[string]any{"received": true, "duplicate": duplicate})
}

// paymentForClosedOrder handles an event for an order whose workflow has ended. Its compensation
// reversed what the provider held then; money the provider reports holding now (an authorization
// that arrived after the order gave up) is recorded on the payment and reversed by a run of the
// payment reconciler for this order, started here. A failure to start it fails the webhook, so
// the provider delivers it again.
func (s *Server) paymentForClosedOrder(ctx context.Context, q *db.Queries, orderID int64, ev payment.WebhookEvent) error {
	switch ev.Intent.Status {
	case payment.StatusAuthorized, payment.StatusCaptured, payment.StatusRequiresAction:
	default:
		s.Log.Info("payment event for a closed order", "order_id", orderID, "event_id", ev.ID)
		return nil
	}
	o, err := q.GetOrder(ctx, orderID)
	if err != nil {
		return err
	}
	if o.Status != workflows.StatusFailed && o.Status != workflows.StatusCancelled {
		return nil
	}
	intentID := ev.Intent.ID
	if err := q.RecordPayment(ctx, db.RecordPaymentParams{OrderID: orderID, Status: string(ev.Intent.Status),
		IntentID: &intentID, CapturedMinor: ev.Intent.CapturedMinor, RefundedMinor: ev.Intent.RefundedMinor}); err != nil {
		return err
	}
	s.Log.Warn("money held for a closed order: reversing it", "order_id", orderID, "event_id", ev.ID,
		"payment_status", ev.Intent.Status)
	_, err = s.Temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       workflows.LatePaymentWorkflowID(orderID),
		TaskQueue:                s.Config.TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		StaticSummary:            "Reverse a late payment of closed order " + strconv.FormatInt(orderID, 10),
	}, workflows.PaymentReconcilerWorkflowName, workflows.PaymentReconcilerInput{OrderID: orderID})
	return err
}
