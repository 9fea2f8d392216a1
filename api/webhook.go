package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/internal/telemetry"
	"github.com/marketplace/checkout/order"
	"github.com/marketplace/checkout/payment"
	"github.com/marketplace/checkout/workflows"
)

// paymentWebhook receives the provider's signed events. The signature is checked first, on every
// request: a valid one is always read, whatever the sender's address sent before, so that no one
// can lock the provider's events out by sending bad signatures from (or naming) its address. A bad
// signature is 401 and changes nothing, and counts against the sender's address
// (RATE_LIMIT_WEBHOOK_FAILURES_IP): past the limit, its bad signatures are 429 until it refills. An
// event is routed only to an intent the product created: one whose id an order recorded, or — for
// an authorization whose answer the order never got — one the provider confirms it holds under an
// order's own key; the workflow asks the provider before acting on it, so the event's status is
// never taken on its word.
//
// No database transaction is open while the handler calls the provider or Temporal. Each event is
// acted on once through its row in payment_webhook_events: the delivery takes the event in hand
// (a claim that runs out after webhookClaim), acts on it, then marks it done; an event acted on
// already is acknowledged as a duplicate and changes nothing more; one another delivery has in
// hand is refused with 503, so that the provider delivers it again. An event not acted on (the
// provider or Temporal could not be reached) is given back and the webhook fails, so the
// provider's next delivery acts on it; a delivery that dies holding an event leaves it to the
// next delivery once its claim runs out. The order takes an event acted on twice (a delivery that
// died after acting, before marking it done) as a repeat.
func (s *Server) paymentWebhook(c echo.Context) error {
	body, err := readBody(c)
	if err != nil {
		return err
	}
	verifier := s.Webhooks
	if verifier == nil {
		verifier = payment.SignedWebhooks{Secret: []byte(s.Options.PaymentWebhookSecret)}
	}
	ev, err := verifier.VerifyWebhook(body, c.Request().Header, time.Now())
	if errors.Is(err, payment.ErrInvalidSignature) {
		s.Log.WarnContext(c.Request().Context(), "payment webhook refused", "reason", err.Error(), "request_id", requestID(c), "client_ip", c.RealIP())
		if err := s.admit(c, s.limits.webhookFailures); err != nil {
			return err
		}
		return problem.New(problem.InvalidSignature, "invalid webhook signature")
	}
	if err != nil || ev.ID == "" || ev.Intent.ID == "" || holdsNUL(body) {
		return problem.New(problem.InvalidJSON, "not a payment event")
	}
	ctx := c.Request().Context()
	claim, err := s.orders.ClaimWebhookEvent(ctx, order.WebhookEventClaim{EventID: ev.ID, IntentID: ev.Intent.ID,
		Type: ev.Type, ClaimSeconds: webhookClaim.Seconds()})
	if db.NotFound(err) {
		acted, err := s.orders.WebhookEventActedOn(ctx, ev.ID)
		if err != nil && !db.NotFound(err) {
			return fmt.Errorf("reading payment event %s: %w", ev.ID, err)
		}
		if err != nil || !acted {
			return problem.New(problem.Unavailable, "this event is being handled by another delivery; send it again shortly")
		}
		return c.JSON(http.StatusOK, map[string]any{"received": true, "duplicate": true})
	}
	if err != nil {
		return fmt.Errorf("taking payment event %s in hand: %w", ev.ID, err)
	}
	// The event's own calls end well before its claim runs out, so no other delivery acts on it
	// meanwhile.
	actx, cancel := context.WithTimeout(ctx, webhookActWithin)
	defer cancel()
	unknown, err := s.actOnEvent(actx, ev)
	// Written even when the provider has hung up: what was done is recorded.
	dbctx := context.WithoutCancel(ctx)
	if err != nil {
		if rerr := s.orders.ReleaseWebhookEvent(dbctx, ev.ID, claim); rerr != nil {
			s.Log.WarnContext(ctx, "payment event not given back: the next delivery acts on it once its claim runs out",
				"event_id", ev.ID, "error", rerr)
		}
		return fmt.Errorf("routing payment event %s: %w", ev.ID, err)
	}
	if err := s.orders.WebhookEventDone(dbctx, ev.ID, claim); err != nil {
		return fmt.Errorf("marking payment event %s done: %w", ev.ID, err)
	}
	if unknown {
		// Acknowledged, so the provider does not deliver it again; nothing else happens.
		s.Log.WarnContext(ctx, "payment event for an intent the checkout did not create", "intent_id", ev.Intent.ID, "event_id", ev.ID)
	}
	return c.JSON(http.StatusOK, map[string]any{"received": true, "duplicate": false})
}

// A delivery's calls about its event end within webhookActWithin; its claim on the event runs out
// after webhookClaim, when another delivery may take the event up (the one holding it died).
const (
	webhookActWithin = 10 * time.Second
	webhookClaim     = 2 * webhookActWithin
)

// actOnEvent routes an event to its order's workflow as a signal, or, when the order has given up
// (its workflow closed or closing), records money the provider holds for it and starts its
// reversal. unknown: the event names no intent the checkout created, and nothing was done.
func (s *Server) actOnEvent(ctx context.Context, ev payment.WebhookEvent) (unknown bool, err error) {
	routed, confirmed, ok, err := s.routeEvent(ctx, ev)
	if err != nil || !ok {
		return err == nil, err
	}
	// The event's span and log lines name its order; its signal carries the trace to the order.
	trace.SpanFromContext(ctx).SetAttributes(attribute.Int64("order.id", routed.OrderID))
	ctx = telemetry.WithOrder(ctx, routed.OrderID)
	if order.Status(routed.Status).GaveUp() {
		return false, s.paymentForClosedOrder(ctx, routed.OrderID, ev, confirmed)
	}
	err = s.Temporal.SignalWorkflow(ctx, routed.WorkflowID, "", workflows.SignalPaymentResult,
		workflows.PaymentSignal{EventID: ev.ID, IntentID: ev.Intent.ID, Status: ev.Intent.Status})
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return false, s.paymentForClosedOrder(ctx, routed.OrderID, ev, confirmed)
	}
	return false, err
}

// routeEvent finds the order of an event's intent: by the intent id an order recorded, else by
// the order's key when the provider confirms that this very intent is the one it holds under it,
// for that order.
// A provider that cannot be asked is an error, so the event is delivered again later. The intent
// the provider confirmed is returned when it was asked (nil otherwise).
func (s *Server) routeEvent(ctx context.Context, ev payment.WebhookEvent) (order.PaymentOfIntent, *payment.Intent, bool, error) {
	paid, err := s.orders.PaymentByIntent(ctx, &ev.Intent.ID)
	if err == nil || !db.NotFound(err) {
		return paid, nil, err == nil, err
	}
	byKey, err := s.orders.PaymentByKey(ctx, ev.Intent.IdempotencyKey)
	if db.NotFound(err) {
		return paid, nil, false, nil
	}
	if err != nil {
		return paid, nil, false, err
	}
	intent, ok, err := s.providerIntent(ctx, ev, byKey.OrderID)
	if err != nil || !ok {
		return paid, nil, false, err
	}
	return byKey, &intent, true, nil
}

// providerIntent asks the provider, by its id, for the intent the event names: ok when the
// provider holds it for orderID, under that order's own key. A provider that cannot be asked is
// an error (503).
func (s *Server) providerIntent(ctx context.Context, ev payment.WebhookEvent, orderID int64) (payment.Intent, bool, error) {
	if s.Payments == nil {
		return payment.Intent{}, false, errNoProvider
	}
	key := order.PaymentKey(orderID)
	intent, err := s.Payments.Lookup(ctx, payment.Ref{Key: key, OrderID: orderID, IntentID: ev.Intent.ID})
	if errors.Is(err, payment.ErrNotFound) {
		return intent, false, nil
	}
	if err != nil {
		return intent, false, s.providerUnavailable(err)
	}
	return intent, intent.ID == ev.Intent.ID && intent.OrderID == orderID && intent.IdempotencyKey == key, nil
}

var errNoProvider = problem.New(problem.Unavailable, "no payment provider is configured")

// providerUnavailable: the provider could not be asked; the event is delivered again later.
func (s *Server) providerUnavailable(err error) error {
	s.Log.Warn("payment provider cannot be asked about a webhook's intent", "error", err)
	return problem.New(problem.Unavailable, "the payment provider cannot be asked now")
}

// paymentForClosedOrder handles an event for an order whose workflow has ended. Its compensation
// reversed what the provider held then; money the provider reports holding now (an authorization
// that arrived after the order gave up) is recorded on the payment and reversed by a run of the
// payment reconciler for this order, started here. The provider is asked: the event's status and
// amounts are not taken on their word. A failure to ask it or to start the run fails the webhook,
// so the provider delivers it again.
func (s *Server) paymentForClosedOrder(ctx context.Context, orderID int64, ev payment.WebhookEvent,
	confirmed *payment.Intent) error {
	o, err := s.orders.GetOrder(ctx, orderID)
	if err != nil {
		return err
	}
	if !order.Status(o.Status).GaveUp() {
		return nil
	}
	intent, ok := payment.Intent{}, true
	if confirmed != nil {
		intent = *confirmed // routed by key: the provider was just asked
	} else if intent, ok, err = s.providerIntent(ctx, ev, orderID); err != nil {
		return err
	}
	if !ok {
		s.Log.WarnContext(ctx, "payment event for a closed order not backed by the provider", "order_id", orderID, "event_id", ev.ID)
		return nil
	}
	switch intent.Status {
	case payment.StatusAuthorized, payment.StatusCaptured, payment.StatusRequiresAction:
	default:
		s.Log.InfoContext(ctx, "payment event for a closed order", "order_id", orderID, "event_id", ev.ID)
		return nil
	}
	intentID := intent.ID
	if err := s.orders.RecordPayment(ctx, order.PaymentUpdate{OrderID: orderID, Status: string(intent.Status),
		IntentID: &intentID, CapturedMinor: intent.CapturedMinor, RefundedMinor: intent.RefundedMinor}); err != nil {
		return err
	}
	s.Log.WarnContext(ctx, "money held for a closed order: reversing it", "order_id", orderID, "event_id", ev.ID,
		"payment_status", intent.Status)
	_, err = s.Temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       workflows.LatePaymentWorkflowID(orderID),
		TaskQueue:                s.Options.TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowTaskTimeout:      s.Options.WorkflowTaskTimeout,
		StaticSummary:            "Reverse a late payment of closed order " + strconv.FormatInt(orderID, 10),
	}, workflows.PaymentReconcilerWorkflowName, workflows.PaymentReconcilerInput{OrderID: orderID})
	return err
}
