package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/marketplace/checkout/internal/problem"
)

// answer runs errorHandler on err and returns the status, the Retry-After header and the body.
func answer(t *testing.T, err error) (int, string, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	c := echo.New().NewContext(httptest.NewRequest(http.MethodPost, "/api/v1/orders", nil), rec)
	errorHandler(slog.New(slog.NewTextHandler(io.Discard, nil)))(err, c)
	var body map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), rec.Body.String())
	return rec.Code, rec.Header().Get("Retry-After"), body
}

// TestErrorHandler_AnswersEachCodeWithItsStatus: every code has a row in the table, and a coded
// error, however wrapped, is answered with that row's status, its code, its message and its
// details.
func TestErrorHandler_AnswersEachCodeWithItsStatus(t *testing.T) {
	t.Parallel()
	answered := 0
	for _, code := range problem.Codes() {
		if code.Kind() == problem.KindEnded {
			assert.NotContains(t, statusOf, code, "%s only says why an order ended: no request is answered with it", code)
			continue
		}
		answered++
		status, ok := statusOf[code]
		require.True(t, ok, "%s has no status in statusOf", code)
		got, retryAfter, body := answer(t, fmt.Errorf("handler: %w",
			problem.Wrap(errors.New("secret cause"), code, "what the client reads").WithDetails(problem.SKUsDetails{SKUIDs: []int64{7}})))
		assert.Equal(t, status, got, code)
		if status == http.StatusServiceUnavailable {
			assert.NotEmpty(t, retryAfter, "%s: a 503 says when to come back", code)
		}
		if code.Internal() {
			continue // TestErrorHandler_InternalCodesAnsweredAsOurFailures
		}
		assert.Equal(t, string(code), body["code"])
		assert.Equal(t, "what the client reads", body["message"], "the cause is not answered")
		assert.Equal(t, []any{float64(7)}, body["skuIds"], "%s: the details are answered", code)
	}
	assert.Len(t, statusOf, answered, "a row for a code that is not in the vocabulary")
}

// TestErrorHandler_InternalCodesAnsweredAsOurFailures: a failure of the saga's own (an internal
// code) that reaches a client is answered as a dependency down (503 UNAVAILABLE, Retry-After) or a
// fault of ours (500 INTERNAL), without its code, message or details.
func TestErrorHandler_InternalCodesAnsweredAsOurFailures(t *testing.T) {
	t.Parallel()
	down := map[problem.Code]bool{problem.PaymentProviderUnavailable: true, problem.PaymentOutcomeUnknown: true,
		problem.PaymentStillUnknown: true}
	internal := 0
	for _, code := range problem.Codes() {
		if !code.Internal() {
			continue
		}
		internal++
		status, retryAfter, body := answer(t, fmt.Errorf("handler: %w",
			problem.Wrap(errors.New("secret cause"), code, "secret message").WithDetails(map[string]bool{"secret": true})))
		want := problem.Internal
		if down[code] {
			want = problem.Unavailable
			assert.Equal(t, http.StatusServiceUnavailable, status, code)
			assert.NotEmpty(t, retryAfter, "%s: a 503 says when to come back", code)
		} else {
			assert.Equal(t, http.StatusInternalServerError, status, code)
		}
		assert.Equal(t, string(want), body["code"], code)
		assert.NotContains(t, body["message"], "secret", code)
		assert.NotContains(t, body, "secret", "%s: its details are not answered", code)
	}
	assert.NotZero(t, internal)
}

// TestErrorHandler_WorkflowFailureWithInternalCode_AnsweredByItsRow: a workflow's or an update's
// failure that carries one of the saga's own codes, under the code or the name an earlier release
// raised it under, is answered by the code's row: the provider down is 503 UNAVAILABLE with
// Retry-After, a fault of ours 500 INTERNAL. A refusal's code that a handler did not answer stays a
// fault of ours.
func TestErrorHandler_WorkflowFailureWithInternalCode_AnsweredByItsRow(t *testing.T) {
	t.Parallel()
	cases := []struct {
		typ    string
		status int
		code   problem.Code
	}{
		{string(problem.PaymentProviderUnavailable), http.StatusServiceUnavailable, problem.Unavailable},
		{"PaymentProviderUnavailable", http.StatusServiceUnavailable, problem.Unavailable},
		{string(problem.PaymentRefused), http.StatusInternalServerError, problem.Internal},
		{"PaymentRefused", http.StatusInternalServerError, problem.Internal},
		{string(problem.OutOfStock), http.StatusInternalServerError, problem.Internal},
	}
	for _, c := range cases {
		status, retryAfter, body := answer(t, fmt.Errorf("cancelling units of line 7 of order 5: %w",
			temporal.NewApplicationError("secret message", c.typ)))
		assert.Equal(t, c.status, status, c.typ)
		assert.Equal(t, string(c.code), body["code"], c.typ)
		assert.NotContains(t, body["message"], "secret", c.typ)
		assert.Equal(t, c.status == http.StatusServiceUnavailable, retryAfter != "", c.typ)
	}
}

// TestErrorHandler_NoRowOrNoCodeIsInternal: a code the table has no row for, and an error with no
// code, are faults of ours: 500 INTERNAL, their text never answered.
func TestErrorHandler_NoRowOrNoCodeIsInternal(t *testing.T) {
	t.Parallel()
	for _, err := range []error{problem.New("MADE_UP", "secret"), errors.New("secret")} {
		status, _, body := answer(t, err)
		assert.Equal(t, http.StatusInternalServerError, status)
		assert.Equal(t, string(problem.Internal), body["code"])
		assert.NotContains(t, body["message"], "secret")
	}
}
