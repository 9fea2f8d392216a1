package activities_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/pricing"
)

// TestDetails_MarshalAsTheMapsOfEarlierReleases: each details type a refusal crosses Temporal with
// marshals to the JSON the map it replaced did (keys in order, empty fields left out or null as
// they were): recorded histories and the answers recorded under keys hold that JSON.
func TestDetails_MarshalAsTheMapsOfEarlierReleases(t *testing.T) {
	t.Parallel()
	ends := time.Date(2026, 11, 27, 10, 0, 0, 123, time.UTC)
	short := []inventory.ShortLine{{SKUID: 77, Requested: 2, Available: 1}}
	cases := []struct {
		name  string
		typed any
		was   map[string]any
	}{
		{"too many open orders", activities.TooManyOpenOrdersDetails{Limit: 3, Pending: 2, NextHoldEnd: &ends},
			map[string]any{"limit": 3, "pending": int64(2), "nextHoldEnd": &ends}},
		{"too many open orders, no hold yet", activities.TooManyOpenOrdersDetails{Limit: 3, Pending: 3},
			map[string]any{"limit": 3, "pending": int64(3), "nextHoldEnd": (*time.Time)(nil)}},
		{"out of stock", activities.OutOfStockDetails{Items: short}, map[string]any{"items": short}},
		{"out of stock, no line", activities.OutOfStockDetails{}, map[string]any{"items": []inventory.ShortLine(nil)}},
		{"hold too early", activities.HoldDetails{ExtendableFrom: &ends, Status: "PENDING_PAYMENT"},
			map[string]any{"extendableFrom": &ends, "status": "PENDING_PAYMENT"}},
		{"hold used", activities.HoldDetails{Max: 1, Status: "PENDING_PAYMENT"},
			map[string]any{"max": 1, "status": "PENDING_PAYMENT"}},
		{"status", problem.StatusDetails{Status: "CONFIRMED"}, map[string]any{"status": "CONFIRMED"}},
		{"status unknown", problem.StatusDetails{}, map[string]any{"status": ""}},
		{"units exceed line", activities.UnitsExceedLineDetails{Remaining: 1}, map[string]any{"remaining": int32(1)}},
		{"price changed", pricing.PriceChangedDetails{PriceVersion: "pv_2"}, map[string]any{"priceVersion": "pv_2"}},
		{"coupon's basket", pricing.CouponDetails{MinBasketMinor: 50000}, map[string]any{"minBasketMinor": int64(50000)}},
		{"SKUs", problem.SKUsDetails{SKUIDs: []int64{99}}, map[string]any{"skuIds": []int64{99}}},
		{"fields", problem.Fields{Fields: []problem.FieldError{{Field: "addressId", Message: "not one of your addresses"}}},
			map[string]any{"fields": []map[string]string{{"field": "addressId", "message": "not one of your addresses"}}}},
	}
	for _, c := range cases {
		typed, err := json.Marshal(c.typed)
		require.NoError(t, err)
		was, err := json.Marshal(c.was)
		require.NoError(t, err)
		assert.Equal(t, string(was), string(typed), c.name)
	}
}

// TestRefusal_DetailsReadBackAsTheirType: a refusal's details cross Temporal's converter (as a
// failure) and are read back as the type they were raised with, never as a map.
func TestRefusal_DetailsReadBackAsTheirType(t *testing.T) {
	t.Parallel()
	ends := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	fc := temporal.GetDefaultFailureConverter()
	for _, p := range []*problem.Error{
		activities.TooManyOpenOrdersDetails{Limit: 3, Pending: 3, NextHoldEnd: &ends}.Problem("3 orders are waiting"),
		problem.New(problem.OutOfStock, "short").WithDetails(activities.OutOfStockDetails{
			Items: []inventory.ShortLine{{SKUID: 7, Requested: 2, Available: 1}}}),
		activities.HoldRefusal{Reason: problem.HoldExtensionTooEarly, Status: "PENDING_PAYMENT", ExtendableFrom: &ends}.Problem("early"),
		problem.Invalid(problem.FieldError{Field: "addressId", Message: "not one of your addresses"}),
	} {
		crossed := fc.FailureToError(fc.ErrorToFailure(activities.RefusalError(p)))
		got := activities.Refusal(crossed)
		require.NotNil(t, got, p.Code)
		assert.Equal(t, p.Code, got.Code)
		assert.Equal(t, p.Details, got.Details, "%s: read back as its type", p.Code)
	}
	// A code that names no details type keeps the JSON it crossed with.
	crossed := fc.FailureToError(fc.ErrorToFailure(temporal.NewNonRetryableApplicationError("x",
		string(problem.CartEmpty), nil, map[string]int{"n": 1})))
	assert.Equal(t, json.RawMessage(`{"n":1}`), activities.Refusal(crossed).Details)
}
