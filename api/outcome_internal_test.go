package api

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/workflows"
)

// TestRenderOutcome_Unavailable_SaysWhetherTheKeyIsSpent: "unavailable" before any order row
// exists asks for the same key again; once the order row exists and was given up, the answer names
// it and asks for a new key (the same key would only find the failed order).
func TestRenderOutcome_Unavailable_SaysWhetherTheKeyIsSpent(t *testing.T) {
	render := func(r workflows.PlaceOrderResult) *problem.Error {
		c := echo.New().NewContext(httptest.NewRequest(http.MethodPost, "/api/v1/orders", nil), httptest.NewRecorder())
		var e *problem.Error
		require.True(t, errors.As(renderOutcome(c, r), &e))
		return e
	}
	before := render(workflows.PlaceOrderResult{Outcome: workflows.OutcomeUnavailable})
	assert.Equal(t, problem.Unavailable, before.Code)
	assert.Nil(t, before.Details, "no order to name")
	assert.Contains(t, before.Message, "try again")

	given := render(workflows.PlaceOrderResult{Outcome: workflows.OutcomeUnavailable, OrderID: 42})
	assert.Equal(t, problem.Unavailable, given.Code)
	assert.Equal(t, problem.OrderDetails{OrderID: 42}, given.Details)
	assert.Contains(t, given.Message, "new Idempotency-Key")
}

// TestRenderOutcome_RefusalAnsweredWithItsOwnCode: an outcome that refuses the order is the code
// it is answered with.
func TestRenderOutcome_RefusalAnsweredWithItsOwnCode(t *testing.T) {
	t.Parallel()
	for _, outcome := range []workflows.Outcome{workflows.OutcomePriceChanged, workflows.OutcomeOutOfStock,
		workflows.OutcomePaymentDeclined, workflows.OutcomePaymentUnavailable, workflows.OutcomeUnavailable} {
		c := echo.New().NewContext(httptest.NewRequest(http.MethodPost, "/api/v1/orders", nil), httptest.NewRecorder())
		code := problem.CodeOf(renderOutcome(c, workflows.PlaceOrderResult{Outcome: outcome}))
		assert.Equal(t, problem.Code(outcome), code, outcome)
		assert.True(t, code.Answered(), outcome)
	}
}
