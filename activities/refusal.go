package activities

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"go.temporal.io/sdk/temporal"

	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/pricing"
)

// A step refuses with a coded error (internal/problem) raised as a non-retryable application
// error whose type is the code and whose one detail is the coded error's details (RefusalError);
// the saga and the API read it back with Refusal. A step's other failures are raised with their
// codes too (internal ones: RESERVATION_NOT_ACTIVE, PAYMENT_PROVIDER_UNAVAILABLE, …), and the
// saga branches on them by code (FailureCode, FailedWith), never by a type name.
//
// Releases before the vocabulary raised these refusals and failures under types of their own.
// Recorded histories and the orders of those releases still running hold them, and activity
// workers of those releases may still answer a step, so they keep their names here and each reads
// as its code (legacyTypes). A retry policy names both (TypesOf): the server matches types as
// strings.
const (
	ErrTypePriceChanged      = "PriceChanged"
	ErrTypeCartEmpty         = "CartEmpty"
	ErrTypeCartInvalid       = "CartInvalid"
	ErrTypeAddressNotFound   = "AddressNotFound"
	ErrTypeOrderNotFound     = "OrderNotFound"
	ErrTypeKeyReused         = "IdempotencyKeyReused"
	ErrTypeTooManyOpenOrders = "TooManyOpenOrders"
	ErrTypeCouponRefused     = "CouponRefused"
	ErrTypeOutOfStock        = "OutOfStock"
	ErrTypeHoldNotExtendable = "HoldNotExtendable"
	ErrTypeOrderNotConfirmed = "OrderNotConfirmed"
	ErrTypeLineNotFound      = "LineNotFound"
	ErrTypeUnitsExceedLine   = "UnitsExceedLine"
	// The workflows' own refusals of a shopper's cancel, of a line cancellation's input and of a
	// support action.
	ErrTypeOrderNotCancellable  = "OrderNotCancellable"
	ErrTypeInvalidLineCancel    = "InvalidLineCancel"
	ErrTypeInvalidSupportAction = "InvalidSupportAction"

	// The steps' failures that are no refusal.
	ErrTypeReservationNotActive = "ReservationNotActive"
	ErrTypeNoReservation        = "NoReservation"
	ErrTypeInvalidRequest       = "InvalidRequest"
	ErrTypeOrderTransition      = "OrderTransitionRefused"
	ErrTypeIdempotencyStore     = "IdempotencyStore"
	ErrTypePaymentUnknown       = "PaymentOutcomeUnknown"
	ErrTypePaymentStillUnknown  = "PaymentStillUnknown"
	ErrTypeProviderDown         = "PaymentProviderUnavailable"
	ErrTypePaymentRefused       = "PaymentRefused"
	ErrTypePaymentNotFound      = "PaymentNotFound"
	ErrTypePaymentMethodGone    = "PaymentMethodGone"
	ErrTypePaymentEventRefused  = "PaymentEventRefused"
)

// legacyTypes are the codes of the types above: the one mapping from a type an earlier release
// raised to a code. (IdempotencyKeyReused was also the type of the workflow's refusal of a
// place-order update with another request's body.)
var legacyTypes = map[string]problem.Code{
	ErrTypePriceChanged:         problem.PriceChanged,
	ErrTypeCartEmpty:            problem.CartEmpty,
	ErrTypeCartInvalid:          problem.CartInvalid,
	ErrTypeAddressNotFound:      problem.ValidationFailed,
	ErrTypeOrderNotFound:        problem.NotFound,
	ErrTypeKeyReused:            problem.IdempotencyKeyReused,
	ErrTypeTooManyOpenOrders:    problem.TooManyOpenOrders,
	ErrTypeCouponRefused:        "", // the code is the refusal's own (its details)
	ErrTypeOutOfStock:           problem.OutOfStock,
	ErrTypeHoldNotExtendable:    "", // the code is the refusal's reason (its details)
	ErrTypeOrderNotConfirmed:    problem.OrderNotConfirmed,
	ErrTypeLineNotFound:         problem.LineNotFound,
	ErrTypeUnitsExceedLine:      problem.UnitsExceedLine,
	ErrTypeOrderNotCancellable:  problem.OrderNotCancellable,
	ErrTypeInvalidLineCancel:    problem.ValidationFailed,
	ErrTypeInvalidSupportAction: problem.InvalidSupportAction,
	ErrTypeReservationNotActive: problem.ReservationNotActive,
	ErrTypeNoReservation:        problem.NoReservation,
	ErrTypeInvalidRequest:       problem.InvalidInventoryRequest,
	ErrTypeOrderTransition:      problem.OrderTransitionRefused,
	ErrTypeIdempotencyStore:     problem.OutcomeNotRecordable,
	ErrTypePaymentUnknown:       problem.PaymentOutcomeUnknown,
	ErrTypePaymentStillUnknown:  problem.PaymentStillUnknown,
	ErrTypeProviderDown:         problem.PaymentProviderUnavailable,
	ErrTypePaymentRefused:       problem.PaymentRefused,
	ErrTypePaymentNotFound:      problem.PaymentNotFound,
	ErrTypePaymentMethodGone:    problem.PaymentMethodGone,
	ErrTypePaymentEventRefused:  problem.PaymentEventRefused,
}

// OutOfStockDetails are the details of an OUT_OF_STOCK refusal: every short line.
type OutOfStockDetails struct {
	Items []inventory.ShortLine `json:"items"`
}

// detailsOf is the type of each code's details, as its refusals are raised and read back (Refusal):
// the one place a code names it. A refusal of a code not here keeps its details as the JSON they
// crossed Temporal as (json.RawMessage), answered as they are.
var detailsOf = map[problem.Code]func(*temporal.ApplicationError) any{
	problem.ValidationFailed:       decode[problem.Fields],
	problem.CartInvalid:            decode[problem.SKUsDetails],
	problem.PriceChanged:           decode[pricing.PriceChangedDetails],
	problem.CouponMinBasket:        decode[pricing.CouponDetails],
	problem.TooManyOpenOrders:      decode[TooManyOpenOrdersDetails],
	problem.OutOfStock:             decode[OutOfStockDetails],
	problem.OrderNotCancellable:    decode[problem.StatusDetails],
	problem.OrderNotPendingPayment: decode[HoldDetails],
	problem.HoldExtensionUsed:      decode[HoldDetails],
	problem.HoldExtensionTooEarly:  decode[HoldDetails],
	problem.HoldExpired:            decode[HoldDetails],
	problem.OrderNotConfirmed:      decode[problem.StatusDetails],
	problem.UnitsExceedLine:        decode[UnitsExceedLineDetails],
}

// decode reads an application error's details into T (nil when they are not T's JSON).
func decode[T any](appErr *temporal.ApplicationError) any {
	var d T
	if appErr.Details(&d) != nil {
		return nil
	}
	return d
}

// DetailsOf are a refusal's details as the type its code's refusals carry (detailsOf); false when
// it has none of that type.
func DetailsOf[T any](p *problem.Error) (T, bool) {
	d, ok := p.Details.(T)
	return d, ok
}

// RawDetails are a refusal's details as JSON, for an answer that carries them on (a REJECTED
// order's outcome); nil when it has none. JSON encoding is deterministic, so the saga may call it.
func RawDetails(p *problem.Error) json.RawMessage {
	if p.Details == nil {
		return nil
	}
	raw, err := json.Marshal(p.Details) //workflowcheck:ignore (encoding a value to JSON is deterministic)
	if err != nil {
		return nil
	}
	return raw
}

// RefusalError raises a coded refusal from a step (or a workflow's handler): no retry changes it.
func RefusalError(p *problem.Error) error {
	if p.Details == nil {
		return temporal.NewNonRetryableApplicationError(p.Message, string(p.Code), p.Err)
	}
	return temporal.NewNonRetryableApplicationError(p.Message, string(p.Code), p.Err, p.Details)
}

// Refusal is the coded refusal err carries, raised by RefusalError or under a type of an earlier
// release; nil when err is no refusal (a failure: the database down, a timeout, or one of the
// saga's own, whose code is internal).
func Refusal(err error) *problem.Error {
	if p := coded(err); p != nil && !p.Code.Internal() {
		return p
	}
	return nil
}

// failure raises a step's failure that no retry changes, with its code (an internal one).
func failure(code problem.Code, msg string, cause error) error {
	return temporal.NewNonRetryableApplicationError(msg, string(code), cause)
}

// RefusedWith says whether err is a refusal with this code.
func RefusedWith(err error, code problem.Code) bool {
	p := Refusal(err)
	return p != nil && p.Code == code
}

// FailureCode is the code of the refusal or failure err carries, whichever name its step raised
// it under ("" when err carries none: a driver's error, a timeout). The saga branches on it.
func FailureCode(err error) problem.Code {
	if p := coded(err); p != nil {
		return p.Code
	}
	return ""
}

// FailedWith says whether err carries this code, under the code or the name an earlier release
// raised it under.
func FailedWith(err error, code problem.Code) bool { return FailureCode(err) == code && code != "" }

// TypesOf are the application error types that carry code: the code and the names earlier
// releases raised it under, in a fixed order. A retry policy's NonRetryableErrorTypes lists them
// all, since the server compares a failure's type as a string.
func TypesOf(code problem.Code) []string {
	return append([]string{string(code)}, earlierNames[code]...)
}

// earlierNames are legacyTypes by code, each code's names sorted (read in workflow code, which
// must not iterate a map).
var earlierNames = func() map[problem.Code][]string {
	out := map[problem.Code][]string{}
	for typ, code := range legacyTypes {
		out[code] = append(out[code], typ)
	}
	for _, names := range out {
		slices.Sort(names)
	}
	return out
}()

// coded is the coded error err carries as an application error, raised under its code or under a
// type of an earlier release; nil when it carries none. This is the one mapping from a step's error
// type to a code.
func coded(err error) *problem.Error {
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) {
		return nil
	}
	typ := appErr.Type()
	if code := problem.Code(typ); code.Known() {
		p := problem.New(code, appErr.Message())
		if appErr.HasDetails() {
			if read, ok := detailsOf[code]; ok {
				p.Details = read(appErr)
			} else {
				var raw json.RawMessage
				if appErr.Details(&raw) == nil {
					p.Details = raw
				}
			}
		}
		return p
	}
	code, legacy := legacyTypes[typ]
	if !legacy {
		return nil
	}
	p := problem.New(code, appErr.Message())
	switch typ {
	case ErrTypePriceChanged:
		var d pricing.PriceChangedDetails
		_ = appErr.Details(&d)
		p = p.WithDetails(d)
	case ErrTypeCartInvalid:
		var skus []int64
		if appErr.Details(&skus) == nil && len(skus) > 0 {
			p = p.WithDetails(problem.SKUsDetails{SKUIDs: skus})
		}
	case ErrTypeAddressNotFound:
		p = addressNotFound()
	case ErrTypeTooManyOpenOrders:
		var d TooManyOpenOrdersDetails
		_ = appErr.Details(&d)
		p = d.Problem(appErr.Message())
	case ErrTypeCouponRefused:
		var r pricing.CouponRefusal
		_ = appErr.Details(&r)
		p = r.Problem()
	case ErrTypeOutOfStock:
		var short []inventory.ShortLine
		_ = appErr.Details(&short)
		p = p.WithDetails(OutOfStockDetails{Items: short})
	case ErrTypeHoldNotExtendable:
		var r HoldRefusal
		_ = appErr.Details(&r)
		p = r.Problem(appErr.Message())
	case ErrTypeOrderNotConfirmed, ErrTypeOrderNotCancellable:
		var status string
		_ = appErr.Details(&status)
		p = p.WithDetails(problem.StatusDetails{Status: status})
	case ErrTypeUnitsExceedLine:
		var d UnitsExceedLineDetails
		_ = appErr.Details(&d)
		p = p.WithDetails(d)
	}
	return p
}

// failed says what a step was doing when a failure that is no refusal stopped it (wrapped with %w:
// the cause stays in the chain for the logs, errors.Is and the API's reading of a database that is
// down). A refusal goes up as it is: Temporal converts only an application error returned as such,
// and the saga reads its type.
func failed(err error, doing string, args ...any) error {
	var appErr *temporal.ApplicationError
	if err == nil || errors.As(err, &appErr) {
		return err
	}
	return fmt.Errorf(doing+": %w", append(args, err)...)
}
