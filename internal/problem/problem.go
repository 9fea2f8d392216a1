// Package problem is the product's one error vocabulary. A refusal or a failure that a client,
// support or the saga acts on carries a Code (UPPER_SNAKE, as the API answers it), a message for
// people, details for programs and the error it comes from: the rule that decides it returns it, an
// activity raises it as its application error's type, the saga answers it, and the API maps its
// code to an HTTP status in one table (api/errors.go).
package problem

import "errors"

// Code names a refusal or a failure. Codes never change: clients, stored answers and recorded
// workflow histories hold them.
type Code string

// The codes a client may be answered with. Each is answered by the API with the status of its row
// in api/errors.go, and named in api/openapi.yaml (the ErrorCode enum).
//
//problem:answered
const (
	// The request itself.
	InvalidJSON         Code = "INVALID_JSON"
	ValidationFailed    Code = "VALIDATION_FAILED"
	PayloadTooLarge     Code = "PAYLOAD_TOO_LARGE"
	MethodNotAllowed    Code = "METHOD_NOT_ALLOWED"
	BatchTooLarge       Code = "BATCH_TOO_LARGE"
	PayloadNotDecodable Code = "PAYLOAD_NOT_DECODABLE"

	// Who asks.
	Unauthorized      Code = "UNAUTHORIZED"
	Forbidden         Code = "FORBIDDEN"
	InvalidSignature  Code = "INVALID_SIGNATURE"
	InvalidGuestToken Code = "INVALID_GUEST_TOKEN"

	// What is asked for does not exist (another user's resource is NOT_FOUND too, so that ids cannot
	// be probed).
	NotFound     Code = "NOT_FOUND"
	SKUNotFound  Code = "SKU_NOT_FOUND"
	LineNotFound Code = "LINE_NOT_FOUND"

	// Limits and load. BUSY refuses an order at once while the checkout is past what it answers
	// promptly: nothing was done, and the same request may be sent again with the same key.
	LimitReached      Code = "LIMIT_REACHED"
	RateLimited       Code = "RATE_LIMITED"
	TooManyOpenOrders Code = "TOO_MANY_OPEN_ORDERS"
	Busy              Code = "BUSY"
	// Unavailable: PostgreSQL, Temporal or the payment provider cannot be reached now; the request
	// may be repeated.
	Unavailable Code = "UNAVAILABLE"
	// Internal: a fault of ours; its cause is logged, never answered.
	Internal Code = "INTERNAL"

	// The cart and its checkout.
	CartConflict  Code = "CART_CONFLICT"
	CartMerged    Code = "CART_MERGED"
	CartLimit     Code = "CART_LIMIT"
	CartEmpty     Code = "CART_EMPTY"
	CartInvalid   Code = "CART_INVALID"
	MixedCurrency Code = "MIXED_CURRENCY"
	PriceChanged  Code = "PRICE_CHANGED"

	// Why a coupon does not apply; the preview says it, and an order with the coupon is refused
	// with it.
	CouponNotFound      Code = "COUPON_NOT_FOUND"
	CouponNotStarted    Code = "COUPON_NOT_STARTED"
	CouponExpired       Code = "COUPON_EXPIRED"
	CouponUsedUp        Code = "COUPON_USED_UP"
	CouponAlreadyUsed   Code = "COUPON_ALREADY_USED"
	CouponNotApplicable Code = "COUPON_NOT_APPLICABLE"
	CouponMinBasket     Code = "COUPON_MIN_BASKET"
	CouponExists        Code = "COUPON_EXISTS"

	// Placing an order.
	IdempotencyKeyReused Code = "IDEMPOTENCY_KEY_REUSED"
	OutOfStock           Code = "OUT_OF_STOCK"
	PaymentDeclined      Code = "PAYMENT_DECLINED"
	PaymentUnavailable   Code = "PAYMENT_UNAVAILABLE"
	OrderFailed          Code = "ORDER_FAILED"

	// An order after it was placed.
	OrderNotCancellable Code = "ORDER_NOT_CANCELLABLE"
	// Why the hold of an order is not extended. HOLD_NOT_EXTENDABLE: the order runs on a build
	// that has no extension (placed before it).
	OrderNotPendingPayment Code = "ORDER_NOT_PENDING_PAYMENT"
	HoldExtensionUsed      Code = "HOLD_EXTENSION_USED"
	HoldExtensionTooEarly  Code = "HOLD_EXTENSION_TOO_EARLY"
	HoldExpired            Code = "HOLD_EXPIRED"
	HoldNotExtendable      Code = "HOLD_NOT_EXTENDABLE"
	// Why units of a line are not cancelled (ops).
	OrderNotConfirmed Code = "ORDER_NOT_CONFIRMED"
	UnitsExceedLine   Code = "UNITS_EXCEED_LINE"
	// A seller's webhook endpoint that points where the checkout never sends (outside dev: a
	// private, loopback or link-local address, or a name that resolves to one).
	WebhookTargetForbidden Code = "WEBHOOK_TARGET_FORBIDDEN"
)

// The failures of the saga's steps and handlers that are no refusal of a client's request: the
// saga takes another path on them or waits them out, and support reads them on a parked order or
// in the Temporal UI. No client is answered with them (they are Internal); should one reach the
// API, it answers with its row's status as UNAVAILABLE (503, a dependency down or not answering)
// or INTERNAL (500, a fault of ours).
//
//problem:internal
const (
	// The inventory: a reservation released meanwhile (expired, swept, taken by a seller's lower
	// count), an order that holds none, a request the saga should never have built.
	ReservationNotActive    Code = "RESERVATION_NOT_ACTIVE"
	NoReservation           Code = "NO_RESERVATION"
	InvalidInventoryRequest Code = "INVALID_INVENTORY_REQUEST"

	// The order's own rows: a transition to a status no order ends in, an answer that cannot be
	// recorded under its key.
	OrderTransitionRefused Code = "ORDER_TRANSITION_REFUSED"
	OutcomeNotRecordable   Code = "OUTCOME_NOT_RECORDABLE"

	// The payment provider. PAYMENT_PROVIDER_UNAVAILABLE: it is down or timed out, retried (unlike
	// PAYMENT_UNAVAILABLE, an order that failed for it). PAYMENT_OUTCOME_UNKNOWN: an authorization
	// timed out, so the saga asks the provider before deciding; PAYMENT_STILL_UNKNOWN: the provider
	// cannot tell yet, asked again. PAYMENT_REFUSED: it refuses the call (the intent's state, a key
	// reused, a malformed request); PAYMENT_NOT_FOUND: it holds no such intent;
	// PAYMENT_METHOD_GONE: the order's payment method is no longer on record;
	// PAYMENT_EVENT_REFUSED: a payment event the provider does not back;
	// PAYMENT_AUTHORIZATION_EXPIRED: the authorization lapsed (or is about to) before its capture,
	// which is therefore not sent.
	PaymentProviderUnavailable  Code = "PAYMENT_PROVIDER_UNAVAILABLE"
	PaymentOutcomeUnknown       Code = "PAYMENT_OUTCOME_UNKNOWN"
	PaymentStillUnknown         Code = "PAYMENT_STILL_UNKNOWN"
	PaymentRefused              Code = "PAYMENT_REFUSED"
	PaymentNotFound             Code = "PAYMENT_NOT_FOUND"
	PaymentMethodGone           Code = "PAYMENT_METHOD_GONE"
	PaymentEventRefused         Code = "PAYMENT_EVENT_REFUSED"
	PaymentAuthorizationExpired Code = "PAYMENT_AUTHORIZATION_EXPIRED"

	// InvalidSupportAction refuses a support action (from the Temporal UI) the workflow will not
	// act on, with the reason.
	InvalidSupportAction Code = "INVALID_SUPPORT_ACTION"
)

// Why an order ended, beside the codes above that end one too (OUT_OF_STOCK, PAYMENT_DECLINED,
// PAYMENT_UNAVAILABLE, HOLD_EXPIRED, UNAVAILABLE): an order's failureCode (orders.failure_code),
// which the shopper, sellers' webhooks and support read. No request is answered with one as its
// code. Which codes end an order, and in which status, is order.Endings.
//
//problem:ended
const (
	// The reservation was gone when the payment came.
	StockReleased Code = "STOCK_RELEASED"
	// A seller's lower count took the stock.
	StockShortfall     Code = "STOCK_SHORTFALL"
	CancelledByShopper Code = "CANCELLED_BY_SHOPPER"
	CancelledBySupport Code = "CANCELLED_BY_SUPPORT"
	RefundedBySupport  Code = "REFUNDED_BY_SUPPORT"
	// Orphaned: the order was left open by a workflow that ended without finishing it (support
	// terminated it); the payment reconciler or the order's hold ended it.
	Orphaned Code = "ORPHANED"
	// AttentionExpired: the order waited for support past the worker's PARKED_GIVE_UP_AFTER; its
	// saga gave it up (stock back, payment voided) before the authorization expired.
	AttentionExpired Code = "ATTENTION_EXPIRED"
	// AuthorizationExpired: the payment's authorization lapsed at the provider (or was about to)
	// before the order could capture it; the order gives its stock back and voids it.
	AuthorizationExpired Code = "AUTHORIZATION_EXPIRED"
)

// Kind says who reads a code: the const block that declares it (its //problem: line), listed in
// codes_gen.go, which is generated from the declarations (go generate ./internal/problem).
type Kind int

const (
	// KindAnswered: a client is answered with it (api/errors.go gives its status).
	KindAnswered Kind = iota + 1
	// KindInternal: a failure inside the checkout that the saga and support read; a request that
	// meets one is answered UNAVAILABLE or INTERNAL.
	KindInternal
	// KindEnded: only why an order ended (its failureCode); no request is answered with it.
	KindEnded
)

//go:generate go test -run TestCodes_GeneratedFromTheirDeclarations -update .

// Codes are every code of the vocabulary, in the order of their declarations.
func Codes() []Code {
	out := make([]Code, len(vocabulary))
	for i, v := range vocabulary {
		out[i] = v.code
	}
	return out
}

// Kind is who reads c (0 for a string that is no code).
func (c Code) Kind() Kind { return kindOf[c] }

var kindOf = func() map[Code]Kind {
	out := make(map[Code]Kind, len(vocabulary))
	for _, v := range vocabulary {
		out[v.code] = v.kind
	}
	return out
}()

// Known: c is a code of the vocabulary (an activity's error type that is not one is a driver's or
// the SDK's, or a name an earlier release raised, which package activities reads as its code).
func (c Code) Known() bool { return c.Kind() != 0 }

// Internal: c names a failure inside the checkout (a step's, or a workflow handler's refusal of
// support) that the saga and support read and no client is answered with: it is no refusal of a
// client's request, and api/openapi.yaml does not name it.
func (c Code) Internal() bool { return c.Kind() == KindInternal }

// Answered: a request may be answered with c as its code (with its status in api/errors.go).
func (c Code) Answered() bool { return c.Kind() == KindAnswered }

// Error is a coded refusal or failure. errors.Is matches two of them by code; errors.As finds one
// anywhere in a chain wrapped with %w.
type Error struct {
	Code Code
	// Message is for people: the client reads it, so it never holds an internal error's text.
	Message string
	// Details are for programs, answered beside code and message: a struct whose JSON fields are
	// the answer's (the SKUs named, the price version to confirm, the fields that are invalid, …),
	// nil when there are none. A refusal that crosses Temporal is read back into the same type
	// (package activities), never into a map.
	Details any
	// Err is what it comes from, for logs and errors.Is; never answered.
	Err error
}

// New is a coded error.
func New(code Code, message string) *Error { return &Error{Code: code, Message: message} }

// Wrap is a coded error that comes from err.
func Wrap(err error, code Code, message string) *Error {
	return &Error{Code: code, Message: message, Err: err}
}

// WithDetails is e with these details (a copy: e itself, which may be a shared sentinel, is
// unchanged).
func (e *Error) WithDetails(details any) *Error {
	out := *e
	out.Details = details
	return &out
}

func (e *Error) Error() string {
	s := string(e.Code) + ": " + e.Message
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap is the error e comes from.
func (e *Error) Unwrap() error { return e.Err }

// Is: target is a coded error of the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// As finds the coded error in err's chain.
func As(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// CodeOf is the code of the coded error in err's chain ("" when there is none).
func CodeOf(err error) Code {
	if e, ok := As(err); ok {
		return e.Code
	}
	return ""
}
