package api

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"
	"go.temporal.io/api/serviceerror"

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
			// The order already ended; its compensation voided or refunded the payment.
			s.Log.Info("payment event for a closed order", "order_id", order.OrderID, "event_id", ev.ID)
			return nil
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
