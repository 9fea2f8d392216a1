package activities_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/order"
	"github.com/marketplace/checkout/payment"
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

// failingProvider answers Capture and Lookup with err (Lookup with intent when err is nil).
type failingProvider struct {
	payment.Gateway
	err    error
	intent payment.Intent
}

func (f failingProvider) Capture(context.Context, payment.Ref) (payment.Intent, error) {
	return payment.Intent{}, f.err
}

func (f failingProvider) Lookup(context.Context, payment.Ref) (payment.Intent, error) {
	return f.intent, f.err
}

func (f failingProvider) Rules() payment.Rules { return payment.Rules{} }

// inActivity runs an activity that needs its context (its logger) under the SDK's test
// environment, and returns its error.
func inActivity(activity any, args ...any) error {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.RegisterActivity(activity)
	_, err := env.ExecuteActivity(activity, args...)
	return err
}

// TestSteps_RaiseTheirFailuresUnderTheirCodes: the steps raise their failures with the codes of
// the vocabulary, retryable only where a retry may change them.
func TestSteps_RaiseTheirFailuresUnderTheirCodes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.Pool(t)
	stock := &activities.Inventory{Engine: inventory.New(pool, nil), Pool: pool}
	orders := &activities.Orders{Pool: pool}
	pays := func(err error, intent payment.Intent) *activities.Payments {
		return &activities.Payments{Pool: pool, Gateway: failingProvider{err: err, intent: intent}}
	}
	step := func(_ any, err error) error { return err }
	paid, _ := insertOrder(t, pool, "PENDING_PAYMENT", "AUTHORIZED", 0)
	lapsing, _ := insertOrder(t, pool, "PENDING_PAYMENT", "AUTHORIZED", 0)
	_, err := pool.Exec(ctx, `UPDATE payments SET capture_before = now() + interval '10 minutes' WHERE order_id = $1`, lapsing)
	require.NoError(t, err)
	event := activities.VerifyEventInput{OrderID: paid, IntentID: "pi_forged", AmountMinor: 1000, Currency: "TRY"}
	cases := []struct {
		name      string
		err       error
		code      problem.Code
		retryable bool
	}{
		{"confirm of an order that holds no stock", step(stock.Confirm(ctx, 1<<40)), problem.NoReservation, false},
		{"reserve of no lines", step(stock.Reserve(ctx, activities.ReserveInput{OrderID: 1,
			ShipTo: inventory.Location{Lat: 41, Lon: 29}, Hold: time.Minute})), problem.InvalidInventoryRequest, false},
		{"an order ended in no final status", step(orders.Finish(ctx, activities.TransitionInput{OrderID: 1,
			To: order.StatusPendingPayment})), problem.OrderTransitionRefused, false},
		{"an answer that is no JSON", orders.RecordOutcome(ctx, activities.RecordOutcomeInput{UserID: 1,
			IdempotencyKey: "k", Outcome: func() {}}), problem.OutcomeNotRecordable, false},
		{"the provider down", step(pays(payment.ErrUnavailable, payment.Intent{}).Capture(ctx, paid)),
			problem.PaymentProviderUnavailable, true},
		{"the provider timing out", step(pays(payment.ErrTimeout, payment.Intent{}).Capture(ctx, paid)),
			problem.PaymentProviderUnavailable, true},
		{"the provider refusing the capture", step(pays(payment.ErrInvalidState, payment.Intent{}).Capture(ctx, paid)),
			problem.PaymentRefused, false},
		{"the provider holding no such intent", step(pays(payment.ErrNotFound, payment.Intent{}).Capture(ctx, paid)),
			problem.PaymentNotFound, false},
		{"the provider still unable to tell", step(pays(payment.ErrUnavailable, payment.Intent{}).SettleUnknown(ctx,
			activities.AuthorizeInput{OrderID: paid, AmountMinor: 1000, Currency: "TRY"})), problem.PaymentStillUnknown, true},
		{"an authorization lapsing before its capture could land", step(pays(nil, payment.Intent{}).Capture(ctx, lapsing)),
			problem.PaymentAuthorizationExpired, false},
		{"an event about no intent", step(pays(payment.ErrNotFound, payment.Intent{}).VerifyEvent(ctx, event)),
			problem.PaymentEventRefused, false},
		{"an event about another intent", inActivity(pays(nil, payment.Intent{ID: "pi_1", OrderID: paid,
			AmountMinor: 1000, Currency: "TRY"}).VerifyEvent, event), problem.PaymentEventRefused, false},
	}
	for _, c := range cases {
		var appErr *temporal.ApplicationError
		require.ErrorAs(t, c.err, &appErr, c.name)
		assert.Equal(t, string(c.code), appErr.Type(), c.name)
		assert.Equal(t, !c.retryable, appErr.NonRetryable(), c.name)
	}
}
