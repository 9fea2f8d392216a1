package problem_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/problem"
)

func TestError_FoundByCodeThroughWrapping(t *testing.T) {
	t.Parallel()
	cause := errors.New("driver said no")
	err := fmt.Errorf("pricing the cart: %w", problem.Wrap(cause, problem.CartEmpty, "the cart is empty"))

	assert.ErrorIs(t, err, problem.New(problem.CartEmpty, "any message"), "matched by code")
	assert.NotErrorIs(t, err, problem.New(problem.CartInvalid, "the cart is empty"))
	assert.ErrorIs(t, err, cause, "the cause stays reachable")
	p, ok := problem.As(err)
	require.True(t, ok)
	assert.Equal(t, "the cart is empty", p.Message)
	assert.Equal(t, problem.CartEmpty, problem.CodeOf(err))
	assert.Equal(t, problem.Code(""), problem.CodeOf(cause))
	assert.Equal(t, "CART_EMPTY: the cart is empty: driver said no", p.Error())
}

func TestError_WithDetailsLeavesTheSentinelAlone(t *testing.T) {
	t.Parallel()
	sentinel := problem.New(problem.CartInvalid, "some SKUs are no longer sold")
	a := sentinel.WithDetails(problem.SKUsDetails{SKUIDs: []int64{1}})
	assert.Nil(t, sentinel.Details)
	assert.Equal(t, problem.SKUsDetails{SKUIDs: []int64{1}}, a.Details)
	assert.Equal(t, sentinel.Message, a.Message)
}

func TestCodes_KnownAndDistinct(t *testing.T) {
	t.Parallel()
	seen := map[problem.Code]bool{}
	for _, c := range problem.Codes() {
		assert.False(t, seen[c], "%s listed twice", c)
		seen[c] = true
		assert.True(t, c.Known())
		assert.Regexp(t, `^[A-Z]+(_[A-Z]+)*$`, string(c))
	}
	assert.False(t, problem.Code("CartEmpty").Known(), "an activity error type of an earlier release is no code")
	assert.False(t, problem.Code("wrapError").Known())
}

// TestCodes_InternalOnesAreNoClientsCode: the steps' failures are codes no client is answered
// with; the codes clients read are not.
func TestCodes_InternalOnesAreNoClientsCode(t *testing.T) {
	t.Parallel()
	for _, c := range []problem.Code{problem.ReservationNotActive, problem.PaymentProviderUnavailable,
		problem.PaymentOutcomeUnknown, problem.InvalidSupportAction} {
		assert.True(t, c.Internal(), c)
	}
	for _, c := range []problem.Code{problem.OutOfStock, problem.PaymentUnavailable, problem.Unavailable,
		problem.Internal, problem.ValidationFailed} {
		assert.False(t, c.Internal(), c)
	}
	assert.False(t, problem.Code("ReservationNotActive").Internal(), "an earlier release's name is no code")
}
