package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/labstack/echo/v4"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/order"
	"github.com/marketplace/checkout/workflows"
)

// extendHold is the shopper's extension of the order's hold while it waits for payment (the
// shopper at minute 14 of the 3-D Secure page). The order's workflow decides and moves its hold
// child's timer; the reservations' expiry moves in PostgreSQL in one conditional statement. An
// Idempotency-Key, when sent, makes a repeat answer the same as the first.
func (s *Server) extendHold(c echo.Context) error {
	o, err := s.loadOrder(c)
	if err != nil {
		return err
	}
	opts := client.UpdateWorkflowOptions{WorkflowID: o.WorkflowID, UpdateName: workflows.UpdateExtendHold,
		WaitForStage: client.WorkflowUpdateStageCompleted}
	if c.Request().Header.Get("Idempotency-Key") != "" {
		key, err := idempotencyKey(c)
		if err != nil {
			return err
		}
		opts.UpdateID = "extend-hold:" + key
	}
	if order.Status(o.Status) != order.StatusPendingPayment {
		return holdNotExtendable(problem.New(problem.OrderNotPendingPayment, "").
			WithDetails(activities.HoldDetails{Status: o.Status}))
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), placeTimeout)
	defer cancel()
	var res workflows.ExtendHoldResult
	handle, err := s.Temporal.UpdateWorkflow(ctx, opts)
	if err == nil {
		err = handle.Get(ctx, &res)
	}
	var appErr *temporal.ApplicationError
	var nf *serviceerror.NotFound
	refusal := activities.Refusal(err)
	switch {
	case refusal != nil && slices.Contains(holdRefusals, refusal.Code):
		return holdNotExtendable(refusal)
	case errors.As(err, &appErr) && strings.HasPrefix(appErr.Message(), "unknown update"):
		return problem.New(problem.HoldNotExtendable,
			"this order was placed before holds could be extended; its hold ends at holdExpiresAt").
			WithDetails(holdExpires{HoldExpiresAt: o.HoldExpiresAt})
	case errors.As(err, &nf):
		// The order's workflow has ended since the order was read.
		cur, gerr := s.orders.GetOrder(c.Request().Context(), o.ID)
		if gerr != nil {
			return fmt.Errorf("reading order %d after its workflow ended: %w", o.ID, gerr)
		}
		return holdNotExtendable(problem.New(problem.OrderNotPendingPayment, "").
			WithDetails(activities.HoldDetails{Status: cur.Status}))
	case errors.As(err, &appErr), errors.As(err, new(*temporal.ActivityError)), errors.As(err, new(*temporal.TimeoutError)):
		// The extension could not be made now (the database did not answer); the hold is as it
		// was, or moved in full, which its timer finds from the reservations.
		return problem.Wrap(err, problem.Unavailable, "the hold could not be extended now; try again shortly")
	case err != nil:
		return fmt.Errorf("extending the hold of order %d: %w", o.ID, err)
	}
	return c.JSON(http.StatusOK, map[string]any{"orderId": o.ID, "holdExpiresAt": res.HoldExpiresAt,
		"extensionsLeft": res.ExtensionsLeft})
}

// holdRefusals are the codes of a refused extension (activities.HoldRefusal's reasons).
var holdRefusals = []problem.Code{problem.OrderNotPendingPayment, problem.HoldExtensionUsed,
	problem.HoldExtensionTooEarly, problem.HoldExpired}

// holdExpires are the details of HOLD_NOT_EXTENDABLE: when the hold ends.
type holdExpires struct {
	HoldExpiresAt *time.Time `json:"holdExpiresAt"`
}

// holdNotExtendable answers a refused extension for the shopper, with the order's status and, too
// early, when the hold can be extended.
func holdNotExtendable(refusal *problem.Error) *problem.Error {
	d, _ := activities.DetailsOf[activities.HoldDetails](refusal)
	answered := activities.HoldDetails{Status: d.Status}
	var e *problem.Error
	switch refusal.Code {
	case problem.HoldExtensionUsed:
		e = problem.New(problem.HoldExtensionUsed, "the hold has already been extended as many times as allowed")
	case problem.HoldExtensionTooEarly:
		e = problem.New(problem.HoldExtensionTooEarly, "the hold can be extended only in its last minutes")
		answered.ExtendableFrom = d.ExtendableFrom
	case problem.HoldExpired:
		e = problem.New(problem.HoldExpired, "the hold has already expired; the stock was given back")
	default:
		e = problem.New(problem.OrderNotPendingPayment, "the order is "+
			strings.ToLower(strings.ReplaceAll(d.Status, "_", " "))+", not waiting for its payment")
	}
	if answered != (activities.HoldDetails{}) {
		e = e.WithDetails(answered)
	}
	return e
}

// HoldUntil reads until when an order waiting for its payment holds its stock (nil otherwise),
// for the payment provider's 3-D Secure page in the processes that serve it.
func HoldUntil(pool *pgxpool.Pool) func(ctx context.Context, orderID int64) *time.Time {
	q := order.DataOf(pool)
	return func(ctx context.Context, orderID int64) *time.Time {
		o, err := q.GetOrder(ctx, orderID)
		if err != nil || order.Status(o.Status) != order.StatusPendingPayment {
			return nil
		}
		return o.HoldExpiresAt
	}
}
