package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/labstack/echo/v4"
	"go.temporal.io/api/serviceerror"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/internal/problem"
)

// statusOf is the HTTP status of every code (internal/problem): the one place a code becomes a
// status. Handlers return coded errors and errorHandler answers them with their row's status.
var statusOf = map[problem.Code]int{
	problem.InvalidJSON:      http.StatusBadRequest,
	problem.ValidationFailed: http.StatusBadRequest,

	problem.Unauthorized:      http.StatusUnauthorized,
	problem.InvalidSignature:  http.StatusUnauthorized,
	problem.InvalidGuestToken: http.StatusUnauthorized,
	problem.PaymentDeclined:   http.StatusPaymentRequired,
	problem.Forbidden:         http.StatusForbidden,

	problem.NotFound:     http.StatusNotFound,
	problem.SKUNotFound:  http.StatusNotFound,
	problem.LineNotFound: http.StatusNotFound,

	problem.MethodNotAllowed: http.StatusMethodNotAllowed,

	// The state of the cart, an order or the catalog refuses the request; another request may do.
	problem.CartConflict:           http.StatusConflict,
	problem.CartMerged:             http.StatusConflict,
	problem.PriceChanged:           http.StatusConflict,
	problem.OutOfStock:             http.StatusConflict,
	problem.OrderFailed:            http.StatusConflict,
	problem.OrderNotCancellable:    http.StatusConflict,
	problem.OrderNotPendingPayment: http.StatusConflict,
	problem.HoldExtensionUsed:      http.StatusConflict,
	problem.HoldExtensionTooEarly:  http.StatusConflict,
	problem.HoldExpired:            http.StatusConflict,
	problem.HoldNotExtendable:      http.StatusConflict,
	problem.OrderNotConfirmed:      http.StatusConflict,
	problem.UnitsExceedLine:        http.StatusConflict,
	problem.CouponExists:           http.StatusConflict,
	// A coupon refusal: nothing was reserved or charged; the order may be placed without it. Every
	// reason is answered as COUPON_NOT_APPLICABLE (AnsweredAs).
	problem.CouponNotFound:      http.StatusConflict,
	problem.CouponNotStarted:    http.StatusConflict,
	problem.CouponExpired:       http.StatusConflict,
	problem.CouponUsedUp:        http.StatusConflict,
	problem.CouponAlreadyUsed:   http.StatusConflict,
	problem.CouponNotApplicable: http.StatusConflict,
	problem.CouponMinBasket:     http.StatusConflict,

	problem.PayloadTooLarge: http.StatusRequestEntityTooLarge,

	// Well-formed, but not something the checkout does as it stands.
	problem.IdempotencyKeyReused:   http.StatusUnprocessableEntity,
	problem.CartEmpty:              http.StatusUnprocessableEntity,
	problem.CartInvalid:            http.StatusUnprocessableEntity,
	problem.MixedCurrency:          http.StatusUnprocessableEntity,
	problem.CartLimit:              http.StatusUnprocessableEntity,
	problem.LimitReached:           http.StatusUnprocessableEntity,
	problem.WebhookTargetForbidden: http.StatusUnprocessableEntity,
	problem.BatchTooLarge:          http.StatusUnprocessableEntity,
	problem.PayloadNotDecodable:    http.StatusUnprocessableEntity,

	problem.RateLimited:       http.StatusTooManyRequests,
	problem.TooManyOpenOrders: http.StatusTooManyRequests,

	problem.Internal: http.StatusInternalServerError,
	// A dependency is down or the checkout is full: answered with Retry-After.
	problem.Unavailable:        http.StatusServiceUnavailable,
	problem.PaymentUnavailable: http.StatusServiceUnavailable,
	problem.Busy:               http.StatusServiceUnavailable,

	// The saga's own failures (internal codes), never answered as they are: a request that meets
	// one is answered UNAVAILABLE when a dependency is down or has not answered (503, Retry-After),
	// INTERNAL when it is a fault of ours (500; the failure is logged).
	problem.PaymentProviderUnavailable:  http.StatusServiceUnavailable,
	problem.PaymentOutcomeUnknown:       http.StatusServiceUnavailable,
	problem.PaymentStillUnknown:         http.StatusServiceUnavailable,
	problem.ReservationNotActive:        http.StatusInternalServerError,
	problem.NoReservation:               http.StatusInternalServerError,
	problem.InvalidInventoryRequest:     http.StatusInternalServerError,
	problem.OrderTransitionRefused:      http.StatusInternalServerError,
	problem.OutcomeNotRecordable:        http.StatusInternalServerError,
	problem.PaymentRefused:              http.StatusInternalServerError,
	problem.PaymentNotFound:             http.StatusInternalServerError,
	problem.PaymentMethodGone:           http.StatusInternalServerError,
	problem.PaymentEventRefused:         http.StatusInternalServerError,
	problem.PaymentAuthorizationExpired: http.StatusInternalServerError,
	problem.InvalidSupportAction:        http.StatusInternalServerError,
}

// StatusOf is the HTTP status the API answers a code with (500 for a code it has no row for).
func StatusOf(code problem.Code) int {
	if status, ok := statusOf[code]; ok {
		return status
	}
	return http.StatusInternalServerError
}

// validation collects field errors and turns them into one VALIDATION_FAILED answer.
type validation []problem.FieldError

func (v *validation) add(field, message string) {
	*v = append(*v, problem.FieldError{Field: field, Message: message})
}

func (v validation) err() error {
	if len(v) == 0 {
		return nil
	}
	return problem.Invalid(v...)
}

// body is the answer's JSON: the details' fields, then code and message. Details that are no JSON
// object (a refusal of an earlier release's shape) are left out.
func body(e *problem.Error) map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	if e.Details != nil {
		if raw, err := json.Marshal(e.Details); err == nil {
			_ = json.Unmarshal(raw, &out)
		}
	}
	out["code"], _ = json.Marshal(e.Code)
	out["message"], _ = json.Marshal(e.Message)
	return out
}

// errorHandler maps every error to the error model in one place: a coded error (internal/problem)
// anywhere in its chain is answered with its code's status (statusOf), and so is a workflow's
// failure that carries an internal code (activities.FailureCode). Anything else is a 5xx: logged
// with the request id, never shown to the client.
func errorHandler(log *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		status, answer := answerOf(err, c)
		if status == http.StatusServiceUnavailable && c.Response().Header().Get("Retry-After") == "" {
			c.Response().Header().Set("Retry-After", retryAfterSeconds)
		}
		if status >= 500 && answer.Code != problem.Busy {
			log.ErrorContext(c.Request().Context(), "request failed", "error", err, "request_id", requestID(c),
				"method", c.Request().Method, "path", c.Path())
		}
		if c.Request().Method == http.MethodHead {
			err = c.NoContent(status)
		} else {
			err = c.JSON(status, body(answer))
		}
		if err != nil {
			log.ErrorContext(c.Request().Context(), "write error answer", "error", err, "request_id", requestID(c))
		}
	}
}

// answerOf is the status and the coded answer of an error.
func answerOf(err error, c echo.Context) (int, *problem.Error) {
	var httpErr *echo.HTTPError
	if p, ok := problem.As(err); ok {
		status, answered := statusOf[p.Code]
		switch {
		case !answered:
			// A code without a status is a fault of ours: its text is logged, not answered.
			return http.StatusInternalServerError, internalAnswer(http.StatusInternalServerError)
		case p.Code.Internal():
			return status, internalAnswer(status)
		}
		return status, p
	}
	if code := activities.FailureCode(err); code.Internal() {
		// One of the saga's own failures, come up with a workflow's or an update's answer.
		return statusOf[code], internalAnswer(statusOf[code])
	}
	switch {
	case errors.As(err, &httpErr):
		return fromEchoError(httpErr)
	case errors.Is(err, context.Canceled) && c.Request().Context().Err() != nil:
		// The client went away; nobody reads the answer.
		return 499, problem.New(problem.Unavailable, "request cancelled")
	case dependencyDown(err):
		return http.StatusServiceUnavailable, internalAnswer(http.StatusServiceUnavailable)
	}
	return http.StatusInternalServerError, internalAnswer(http.StatusInternalServerError)
}

// internalAnswer is what a client reads of a failure of ours at a status: a dependency down (503)
// or a fault (500), never the failure itself.
func internalAnswer(status int) *problem.Error {
	if status == http.StatusServiceUnavailable {
		return problem.New(problem.Unavailable, "a service the checkout depends on is unavailable; try again shortly")
	}
	return problem.New(problem.Internal, "internal error")
}

// fromEchoError answers Echo's own errors (no route, a body over the limit, …); one of a status
// the API has no code for is answered with that status, coded after its name.
func fromEchoError(he *echo.HTTPError) (int, *problem.Error) {
	var p *problem.Error
	switch he.Code {
	case http.StatusNotFound:
		p = problem.New(problem.NotFound, "no such resource")
	case http.StatusMethodNotAllowed:
		p = problem.New(problem.MethodNotAllowed, "method not allowed on this resource")
	case http.StatusRequestEntityTooLarge:
		p = problem.New(problem.PayloadTooLarge, "request body is larger than 1 MiB")
	case http.StatusUnauthorized:
		p = problem.New(problem.Unauthorized, "missing or invalid token")
	case http.StatusBadRequest:
		p = problem.New(problem.ValidationFailed, "bad request")
	}
	if p != nil {
		return StatusOf(p.Code), p
	}
	if he.Code >= 500 {
		return http.StatusInternalServerError, internalAnswer(http.StatusInternalServerError)
	}
	text := http.StatusText(he.Code)
	code := strings.ToUpper(strings.NewReplacer(" ", "_", "-", "_", "'", "").Replace(text))
	return he.Code, problem.New(problem.Code(code), text)
}

func unauthorized(msg string) *problem.Error { return problem.New(problem.Unauthorized, msg) }

// notFound answers 404; it is also the answer for another user's resource, so that ids cannot be
// probed.
func notFound() *problem.Error { return problem.New(problem.NotFound, "no such resource") }

func forbidden(msg string) *problem.Error { return problem.New(problem.Forbidden, msg) }

// retryAfterSeconds is the Retry-After of a 503: a dependency that is briefly down (a database
// failover, a Temporal frontend restarting) is usually back within seconds.
const retryAfterSeconds = "2"

// dependencyDown says whether err is PostgreSQL or Temporal being unreachable, overloaded or
// restarting, rather than a fault of the request or of the code: the client may repeat the
// request, and nothing it asked for was half done (every write is one transaction or an
// idempotent workflow call).
func dependencyDown(err error) bool {
	var connErr *pgconn.ConnectError
	var pgErr *pgconn.PgError
	var netErr net.Error
	var unavailable *serviceerror.Unavailable
	var exhausted *serviceerror.ResourceExhausted
	var deadline *serviceerror.DeadlineExceeded
	switch {
	case errors.As(err, &connErr), pgconn.Timeout(err), errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &netErr),
		// A connection the server closed under a statement: a restart in immediate mode ends each
		// backend with a warning and a closed socket, which the driver reads as the stream's end,
		// and the connection is closed for what was still to run on it.
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF), errors.Is(err, pgconn.ErrConnClosed),
		errors.As(err, &unavailable), errors.As(err, &exhausted), errors.As(err, &deadline):
		return true
	case errors.As(err, &pgErr):
		// 08: connection lost; 57P0x: the server shutting down or starting; 53300: too many
		// connections; 55P03: a lock wait timed out; 40001/40P01: a serialization failure or a
		// deadlock, which a repeat resolves.
		return strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "57P") ||
			pgErr.Code == "53300" || pgErr.Code == "55P03" || pgErr.Code == "40001" || pgErr.Code == "40P01"
	}
	return false
}
