package activities

import (
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"

	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/pricing"
)

// A step refuses with a coded error (internal/problem) raised as a non-retryable application
// error whose type is the code and whose one detail is the coded error's details (RefusalError);
// the saga and the API read it back with Refusal.
//
// Releases before the vocabulary raised these refusals under types of their own. Recorded
// histories and the orders of those releases still running hold them, and the frozen sagas
// (workflows/sagav1, sagav2) compare against them, so they keep their names here and Refusal reads
// each as its code (legacyTypes).
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
	// The workflows' own refusals of a shopper's cancel and of a line cancellation's input.
	ErrTypeOrderNotCancellable = "OrderNotCancellable"
	ErrTypeInvalidLineCancel   = "InvalidLineCancel"
)

// legacyTypes are the codes of the types above. (IdempotencyKeyReused was also the type of the
// workflow's refusal of a place-order update with another request's body.)
var legacyTypes = map[string]problem.Code{
	ErrTypePriceChanged:        problem.PriceChanged,
	ErrTypeCartEmpty:           problem.CartEmpty,
	ErrTypeCartInvalid:         problem.CartInvalid,
	ErrTypeAddressNotFound:     problem.ValidationFailed,
	ErrTypeOrderNotFound:       problem.NotFound,
	ErrTypeKeyReused:           problem.IdempotencyKeyReused,
	ErrTypeTooManyOpenOrders:   problem.TooManyOpenOrders,
	ErrTypeCouponRefused:       "", // the code is the refusal's own (its details)
	ErrTypeOutOfStock:          problem.OutOfStock,
	ErrTypeHoldNotExtendable:   "", // the code is the refusal's reason (its details)
	ErrTypeOrderNotConfirmed:   problem.OrderNotConfirmed,
	ErrTypeLineNotFound:        problem.LineNotFound,
	ErrTypeUnitsExceedLine:     problem.UnitsExceedLine,
	ErrTypeOrderNotCancellable: problem.OrderNotCancellable,
	ErrTypeInvalidLineCancel:   problem.ValidationFailed,
}

// RefusalError raises a coded refusal from a step (or a workflow's handler): no retry changes it.
func RefusalError(p *problem.Error) error {
	if len(p.Details) == 0 {
		return temporal.NewNonRetryableApplicationError(p.Message, string(p.Code), p.Err)
	}
	return temporal.NewNonRetryableApplicationError(p.Message, string(p.Code), p.Err, p.Details)
}

// Refusal is the coded refusal err carries, raised by RefusalError or under a type of an earlier
// release; nil when err is no refusal (a failure: the database down, a timeout). This is the one
// mapping from a step's error type to a code.
func Refusal(err error) *problem.Error {
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) {
		return nil
	}
	typ := appErr.Type()
	if code := problem.Code(typ); code.Known() {
		p := problem.New(code, appErr.Message())
		if appErr.HasDetails() {
			_ = appErr.Details(&p.Details)
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
		var d PriceChangedDetails
		_ = appErr.Details(&d)
		p = p.With("priceVersion", d.PriceVersion)
	case ErrTypeCartInvalid:
		var skus []int64
		if appErr.Details(&skus) == nil && len(skus) > 0 {
			p = p.With("skuIds", skus)
		}
	case ErrTypeAddressNotFound:
		p = addressNotFound()
	case ErrTypeTooManyOpenOrders:
		var d TooManyOpenOrdersDetails
		_ = appErr.Details(&d)
		p = p.With("limit", d.Limit).With("pending", d.Pending).With("nextHoldEnd", d.NextHoldEnd)
	case ErrTypeCouponRefused:
		var r pricing.CouponRefusal
		_ = appErr.Details(&r)
		p = r.Problem()
	case ErrTypeOutOfStock:
		var short []inventory.ShortLine
		_ = appErr.Details(&short)
		p = p.With("items", short)
	case ErrTypeHoldNotExtendable:
		var r HoldRefusal
		_ = appErr.Details(&r)
		p = r.Problem(appErr.Message())
	case ErrTypeOrderNotConfirmed, ErrTypeOrderNotCancellable:
		var status string
		_ = appErr.Details(&status)
		p = p.With("status", status)
	case ErrTypeUnitsExceedLine:
		var d UnitsExceedLineDetails
		_ = appErr.Details(&d)
		p = p.With("remaining", d.Remaining)
	}
	return p
}

// RefusedWith says whether err is a refusal with this code.
func RefusedWith(err error, code problem.Code) bool {
	p := Refusal(err)
	return p != nil && p.Code == code
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
