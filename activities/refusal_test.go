package activities_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.temporal.io/sdk/temporal"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/internal/problem"
)

// earlierFailures are the types earlier releases raised the steps' failures (and the workflows'
// refusal of a support action) under, with their codes.
var earlierFailures = map[string]problem.Code{
	"ReservationNotActive":       problem.ReservationNotActive,
	"NoReservation":              problem.NoReservation,
	"InvalidRequest":             problem.InvalidInventoryRequest,
	"OrderTransitionRefused":     problem.OrderTransitionRefused,
	"IdempotencyStore":           problem.OutcomeNotRecordable,
	"PaymentOutcomeUnknown":      problem.PaymentOutcomeUnknown,
	"PaymentStillUnknown":        problem.PaymentStillUnknown,
	"PaymentProviderUnavailable": problem.PaymentProviderUnavailable,
	"PaymentRefused":             problem.PaymentRefused,
	"PaymentNotFound":            problem.PaymentNotFound,
	"PaymentMethodGone":          problem.PaymentMethodGone,
	"PaymentEventRefused":        problem.PaymentEventRefused,
	"InvalidSupportAction":       problem.InvalidSupportAction,
}

// TestFailureCode_EarlierNameAndCodeReadAsOneFailure: a failure raised under the name of an
// earlier release and one raised under its code are the same failure to the saga (FailureCode,
// FailedWith), neither is a refusal the shopper is answered with, and a retry policy naming the
// code names both (TypesOf).
func TestFailureCode_EarlierNameAndCodeReadAsOneFailure(t *testing.T) {
	t.Parallel()
	for name, code := range earlierFailures {
		assert.True(t, code.Internal(), "%s: no client is answered with %s", name, code)
		for _, typ := range []string{name, string(code)} {
			for _, err := range []error{
				temporal.NewApplicationError("failed", typ),
				fmt.Errorf("step: %w", temporal.NewNonRetryableApplicationError("failed", typ, errors.New("cause"))),
			} {
				assert.Equal(t, code, activities.FailureCode(err), typ)
				assert.True(t, activities.FailedWith(err, code), typ)
				assert.Nil(t, activities.Refusal(err), "%s is no refusal", typ)
			}
		}
		assert.Equal(t, []string{string(code), name}, activities.TypesOf(code), code)
	}
}

// TestFailureCode_RefusalsAndOtherErrors: a refusal's code is read as its code, also under an
// earlier name; an error that carries no code (a driver's, a plain one, none) has none.
func TestFailureCode_RefusalsAndOtherErrors(t *testing.T) {
	t.Parallel()
	assert.Equal(t, problem.OutOfStock, activities.FailureCode(temporal.NewNonRetryableApplicationError("short", "OutOfStock", nil)))
	assert.Equal(t, problem.OutOfStock, activities.FailureCode(activities.RefusalError(problem.New(problem.OutOfStock, "short"))))
	assert.Equal(t, []string{"OUT_OF_STOCK", "OutOfStock"}, activities.TypesOf(problem.OutOfStock))
	for _, err := range []error{temporal.NewApplicationError("refused", "ConnectError"), errors.New("plain"), nil} {
		assert.Equal(t, problem.Code(""), activities.FailureCode(err), err)
		assert.False(t, activities.FailedWith(err, ""), err)
	}
}
