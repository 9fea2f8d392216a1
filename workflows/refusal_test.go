package workflows_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/pricing"
	"github.com/marketplace/checkout/workflows"
)

// TestOrder_RefusedBeforeTheOrder_EarlierTypesAndCodesAnswerAlike: each refusal a step raises
// before the order is placed gets the same answer whether the step raised it with its code (as the
// steps do now) or under the type of an earlier release (as recorded histories and running orders
// hold it); a failure that is no refusal is "try again". Only a refusal the shopper may get past by
// waiting (the open-order cap) and "try again" are not recorded under the key.
func TestOrder_RefusedBeforeTheOrder_EarlierTypesAndCodesAnswerAlike(t *testing.T) {
	ends := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	short := []inventory.ShortLine{{SKUID: 77, Requested: 2, Available: 1}}
	legacy := func(msg, typ string, details ...any) error {
		return temporal.NewNonRetryableApplicationError(msg, typ, nil, details...)
	}
	coded := func(p *problem.Error) error { return activities.RefusalError(p) }
	used := &pricing.CouponRefusal{Code: problem.CouponUsedUp, Message: "the coupon has been used up"}
	cases := []struct {
		name, step   string
		earlier, now error
		want         workflows.PlaceOrderResult
		recorded     int
	}{
		{"prices changed", "CheckPrices",
			legacy("prices changed since the preview", activities.ErrTypePriceChanged, pricing.PriceChangedDetails{PriceVersion: "pv_2"}),
			coded(problem.New(problem.PriceChanged, "prices changed since the preview").
				WithDetails(pricing.PriceChangedDetails{PriceVersion: "pv_2"})),
			workflows.PlaceOrderResult{Outcome: workflows.OutcomePriceChanged, PriceVersion: "pv_2"}, 1},
		{"empty cart", "CheckPrices",
			legacy("the cart is empty", activities.ErrTypeCartEmpty), coded(pricing.ErrEmpty),
			workflows.PlaceOrderResult{Outcome: workflows.OutcomeRejected, RejectCode: problem.CartEmpty,
				Message: "the cart is empty"}, 1},
		{"SKUs no longer sold", "CheckPrices",
			legacy("some SKUs of the cart are no longer sold; remove them", activities.ErrTypeCartInvalid, []int64{99}),
			coded(pricing.ErrUnknownSKUs.WithDetails(problem.SKUsDetails{SKUIDs: []int64{99}})),
			workflows.PlaceOrderResult{Outcome: workflows.OutcomeRejected, RejectCode: problem.CartInvalid,
				Message: "some SKUs of the cart are no longer sold; remove them", Details: json.RawMessage(`{"skuIds":[99]}`)}, 1},
		{"coupon used up at the price check", "CheckPrices",
			legacy(used.Message, activities.ErrTypeCouponRefused, *used), coded(used.Problem()),
			workflows.PlaceOrderResult{Outcome: workflows.OutcomeRejected, RejectCode: problem.CouponUsedUp,
				Message: used.Message}, 1},
		{"coupon used up as the order is written", "CreateOrder",
			legacy(used.Message, activities.ErrTypeCouponRefused, *used), coded(used.Problem()),
			workflows.PlaceOrderResult{Outcome: workflows.OutcomeRejected, RejectCode: problem.CouponUsedUp,
				Message: used.Message}, 1},
		{"not the shopper's address", "CreateOrder",
			legacy("unknown address", activities.ErrTypeAddressNotFound),
			coded(problem.Invalid(problem.FieldError{Field: "addressId", Message: "not one of your addresses"})),
			workflows.PlaceOrderResult{Outcome: workflows.OutcomeRejected, RejectCode: problem.ValidationFailed,
				Message: "some fields are invalid", Details: json.RawMessage(`{"fields":[{"field":"addressId","message":"not one of your addresses"}]}`)}, 1},
		{"another request's body under the key", "CreateOrder",
			legacy("this Idempotency-Key was used with a different request", activities.ErrTypeKeyReused),
			coded(problem.New(problem.IdempotencyKeyReused, "this Idempotency-Key was used with a different request")),
			workflows.PlaceOrderResult{Outcome: workflows.OutcomeRejected, RejectCode: problem.IdempotencyKeyReused,
				Message: "this Idempotency-Key was used with a different request"}, 1},
		{"too many open orders", "CreateOrder",
			legacy("3 orders are waiting", activities.ErrTypeTooManyOpenOrders,
				activities.TooManyOpenOrdersDetails{Limit: 3, Pending: 3, NextHoldEnd: &ends}),
			coded(activities.TooManyOpenOrdersDetails{Limit: 3, Pending: 3, NextHoldEnd: &ends}.Problem("3 orders are waiting")),
			workflows.PlaceOrderResult{Outcome: workflows.OutcomeRejected, RejectCode: problem.TooManyOpenOrders,
				Message: "3 orders are waiting", OpenOrderLimit: 3, NextHoldEnd: &ends}, 0},
		{"out of stock", "Reserve",
			legacy("out of stock", activities.ErrTypeOutOfStock, short),
			coded(problem.New(problem.OutOfStock, "out of stock").WithDetails(activities.OutOfStockDetails{Items: short})),
			workflows.PlaceOrderResult{Outcome: workflows.OutcomeOutOfStock, Short: short}, 1},
		{"no refusal: the database down", "CheckPrices",
			legacy("connection refused", "ConnectError"), errors.New("connection refused"),
			workflows.PlaceOrderResult{Outcome: workflows.OutcomeUnavailable,
				Message: "the order could not be placed now; try again"}, 0},
	}
	zero := map[string]any{"CheckPrices": pricing.Quote{}, "CreateOrder": activities.CreatedOrder{},
		"Reserve": inventory.Reservation{}}
	for _, c := range cases {
		for form, err := range map[string]error{"earlier type": c.earlier, "code": c.now} {
			t.Run(c.name+"/"+form, func(t *testing.T) {
				s := newSaga(t)
				s.on(c.step).Return(zero[c.step], err)
				s.run(input("tok_ok"))

				require.NotNil(t, s.placed)
				got := *s.placed
				if c.want.Outcome == workflows.OutcomeOutOfStock {
					got.OrderID, got.Status = 0, "" // the order row exists and failed
				}
				assert.Equal(t, jsonOf(t, c.want), jsonOf(t, got))
				assert.Len(t, s.recorded, c.recorded, "recorded under the key")
				assert.Zero(t, s.calls["AuthorizeForCapture"], "nothing charged")
			})
		}
	}
}

// TestRefusal_ReadsEveryEarlierType: every type an earlier release raised a refusal under reads as
// a code of the vocabulary, and a type that is no code (a driver's error) reads as no refusal.
func TestRefusal_ReadsEveryEarlierType(t *testing.T) {
	for typ, want := range map[string]problem.Code{
		activities.ErrTypePriceChanged: problem.PriceChanged, activities.ErrTypeCartEmpty: problem.CartEmpty,
		activities.ErrTypeCartInvalid: problem.CartInvalid, activities.ErrTypeAddressNotFound: problem.ValidationFailed,
		activities.ErrTypeOrderNotFound: problem.NotFound, activities.ErrTypeKeyReused: problem.IdempotencyKeyReused,
		activities.ErrTypeTooManyOpenOrders: problem.TooManyOpenOrders, activities.ErrTypeOutOfStock: problem.OutOfStock,
		activities.ErrTypeOrderNotConfirmed: problem.OrderNotConfirmed, activities.ErrTypeLineNotFound: problem.LineNotFound,
		activities.ErrTypeUnitsExceedLine: problem.UnitsExceedLine, activities.ErrTypeOrderNotCancellable: problem.OrderNotCancellable,
		activities.ErrTypeInvalidLineCancel: problem.ValidationFailed,
	} {
		got := activities.Refusal(temporal.NewNonRetryableApplicationError("refused", typ, nil))
		require.NotNil(t, got, typ)
		assert.Equal(t, want, got.Code, typ)
	}
	coupon := activities.Refusal(temporal.NewNonRetryableApplicationError("gone", activities.ErrTypeCouponRefused, nil,
		pricing.CouponRefusal{Code: problem.CouponExpired, Message: "the coupon has expired"}))
	assert.Equal(t, problem.CouponExpired, coupon.Code, "a coupon's refusal is coded by its reason")
	hold := activities.Refusal(temporal.NewNonRetryableApplicationError("no", activities.ErrTypeHoldNotExtendable, nil,
		activities.HoldRefusal{Reason: problem.HoldExpired, Status: "PENDING_PAYMENT"}))
	assert.Equal(t, problem.HoldExpired, hold.Code, "a hold's refusal is coded by its reason")
	assert.Equal(t, activities.HoldDetails{Status: "PENDING_PAYMENT"}, hold.Details)
	for _, typ := range []string{"wrapError", "ConnectError", activities.ErrTypeReservationNotActive,
		string(problem.ReservationNotActive), ""} {
		assert.Nil(t, activities.Refusal(temporal.NewApplicationError("failed", typ)), typ)
	}
	assert.Nil(t, activities.Refusal(errors.New("plain")))
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	return string(raw)
}
