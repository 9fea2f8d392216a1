package api

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/labstack/echo/v4"
	"go.temporal.io/api/serviceerror"
)

// Error codes of the API's error model. Every error answer is
// {"code": "<CODE>", "message": "...", ...details}. BUSY (503, with Retry-After) refuses an order
// at once while the checkout is past what it answers promptly (admission control): nothing was
// done, it is no failure of ours to log, and the same request may be sent again with the same key.
const (
	CodeInvalidJSON          = "INVALID_JSON"
	CodeValidationFailed     = "VALIDATION_FAILED"
	CodeUnauthorized         = "UNAUTHORIZED"
	CodeForbidden            = "FORBIDDEN"
	CodeNotFound             = "NOT_FOUND"
	CodeMethodNotAllowed     = "METHOD_NOT_ALLOWED"
	CodePayloadTooLarge      = "PAYLOAD_TOO_LARGE"
	CodeUnsupportedMedia     = "UNSUPPORTED_MEDIA_TYPE"
	CodeSKUNotFound          = "SKU_NOT_FOUND"
	CodeBatchTooLarge        = "BATCH_TOO_LARGE"
	CodeLimitReached         = "LIMIT_REACHED"
	CodeBusy                 = "BUSY"
	CodeUnavailable          = "UNAVAILABLE"
	CodeInternal             = "INTERNAL"
	CodeOutOfStock           = "OUT_OF_STOCK"
	CodePriceChanged         = "PRICE_CHANGED"
	CodePaymentDeclined      = "PAYMENT_DECLINED"
	CodeIdempotencyKeyReused = "IDEMPOTENCY_KEY_REUSED"
	CodeOrderNotCancellable  = "ORDER_NOT_CANCELLABLE"
	CodeOrderFailed          = "ORDER_FAILED"
	CodeCartConflict         = "CART_CONFLICT"
	CodeCartLimit            = "CART_LIMIT"
	CodeCartInvalid          = "CART_INVALID"
	CodePaymentUnavailable   = "PAYMENT_UNAVAILABLE"
	CodeCartEmpty            = "CART_EMPTY"
	CodeCartMerged           = "CART_MERGED"
	CodeMixedCurrency        = "MIXED_CURRENCY"
	CodeInvalidSignature     = "INVALID_SIGNATURE"
	CodeTooManyOpenOrders    = "TOO_MANY_OPEN_ORDERS"
	CodeInvalidGuestToken    = "INVALID_GUEST_TOKEN"
	// CodeOrderDelayed is a parked order's attention as its shopper sees it.
	CodeOrderDelayed = "ORDER_DELAYED"
	// Refusals of a line cancellation (ops).
	CodeOrderNotConfirmed = "ORDER_NOT_CONFIRMED"
	CodeUnitsExceedLine   = "UNITS_EXCEED_LINE"
	CodeLineNotFound      = "LINE_NOT_FOUND"
)

// Error is the one error model of the API: a status, a code, a message for people and details
// for programs. Handlers return it; errorHandler writes it.
type Error struct {
	Status  int
	Code    string
	Message string
	Details map[string]any
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// NewError builds an *Error.
func NewError(status int, code, message string) *Error {
	return &Error{Status: status, Code: code, Message: message}
}

// With adds a detail field to the answer.
func (e *Error) With(key string, value any) *Error {
	if e.Details == nil {
		e.Details = map[string]any{}
	}
	e.Details[key] = value
	return e
}

// FieldError names one invalid field of a request.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// validation collects field errors and turns them into one VALIDATION_FAILED answer.
type validation []FieldError

func (v *validation) add(field, message string) { *v = append(*v, FieldError{field, message}) }

func (v validation) err() error {
	if len(v) == 0 {
		return nil
	}
	return NewError(http.StatusBadRequest, CodeValidationFailed, "some fields are invalid").With("fields", []FieldError(v))
}

func (e *Error) body() map[string]any {
	out := make(map[string]any, len(e.Details)+2)
	for k, v := range e.Details {
		out[k] = v
	}
	out["code"] = e.Code
	out["message"] = e.Message
	return out
}

// errorHandler maps every error to the error model in one place. Anything that is not an *Error
// is a 5xx: logged with the request id, never shown to the client.
func errorHandler(log *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		var apiErr *Error
		var httpErr *echo.HTTPError
		switch {
		case errors.As(err, &apiErr):
		case errors.As(err, &httpErr):
			apiErr = fromEchoError(httpErr)
		case errors.Is(err, context.Canceled) && c.Request().Context().Err() != nil:
			// The client went away; nobody reads the answer.
			apiErr = NewError(499, CodeUnavailable, "request cancelled")
		case dependencyDown(err):
			apiErr = NewError(http.StatusServiceUnavailable, CodeUnavailable,
				"a service the checkout depends on is unavailable; try again shortly")
		default:
			apiErr = NewError(http.StatusInternalServerError, CodeInternal, "internal error")
		}
		if apiErr.Status == http.StatusServiceUnavailable && c.Response().Header().Get("Retry-After") == "" {
			c.Response().Header().Set("Retry-After", retryAfterSeconds)
		}
		if apiErr.Status >= 500 && apiErr.Code != CodeBusy {
			log.Error("request failed", "error", err, "request_id", requestID(c),
				"method", c.Request().Method, "path", c.Path())
		}
		if c.Request().Method == http.MethodHead {
			err = c.NoContent(apiErr.Status)
		} else {
			err = c.JSON(apiErr.Status, apiErr.body())
		}
		if err != nil {
			log.Error("write error answer", "error", err, "request_id", requestID(c))
		}
	}
}

func fromEchoError(he *echo.HTTPError) *Error {
	switch he.Code {
	case http.StatusNotFound:
		return NewError(he.Code, CodeNotFound, "no such resource")
	case http.StatusMethodNotAllowed:
		return NewError(he.Code, CodeMethodNotAllowed, "method not allowed on this resource")
	case http.StatusRequestEntityTooLarge:
		return NewError(he.Code, CodePayloadTooLarge, "request body is larger than 1 MiB")
	case http.StatusUnsupportedMediaType:
		return NewError(he.Code, CodeUnsupportedMedia, "send application/json")
	case http.StatusUnauthorized:
		return NewError(he.Code, CodeUnauthorized, "missing or invalid token")
	case http.StatusBadRequest:
		return NewError(he.Code, CodeValidationFailed, "bad request")
	}
	if he.Code >= 500 {
		return NewError(http.StatusInternalServerError, CodeInternal, "internal error")
	}
	text := http.StatusText(he.Code)
	return NewError(he.Code, strings.ToUpper(strings.NewReplacer(" ", "_", "-", "_", "'", "").Replace(text)), text)
}

func unauthorized(msg string) *Error { return NewError(http.StatusUnauthorized, CodeUnauthorized, msg) }

// notFound answers 404; it is also the answer for another user's resource, so that ids cannot be
// probed.
func notFound() *Error { return NewError(http.StatusNotFound, CodeNotFound, "no such resource") }

func forbidden(msg string) *Error { return NewError(http.StatusForbidden, CodeForbidden, msg) }

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
