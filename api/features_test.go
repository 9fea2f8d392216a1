package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/problem"
)

// TestFeatures_OpsOnly_ValidatedAndRecorded: only the ops role reads and sets the switches; a body
// naming no switch, an unknown one or a value that is not true or false changes nothing; a change
// is recorded with the ops user, and a switch never set is on.
func TestFeatures_OpsOnly_ValidatedAndRecorded(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ops := h.token(auth.Principal{UserID: 950, Role: auth.RoleOps})
	for _, tok := range []string{h.shopper(7), h.token(auth.Principal{UserID: 900, Role: auth.RoleSupport})} {
		assert.Equal(t, http.StatusForbidden, h.do(http.MethodGet, "/api/v1/ops/features", tok, "").status)
		assert.Equal(t, http.StatusForbidden, h.do(http.MethodPut, "/api/v1/ops/features", tok, `{"cart_stock_hints":false}`).status)
	}
	assert.Equal(t, http.StatusUnauthorized, h.do(http.MethodGet, "/api/v1/ops/features", "", "").status)

	for _, body := range []string{`{}`, `{"free_shipping":false}`, `{"cart_stock_hints":"off"}`, `{"cart_stock_hints":null}`,
		`{"cart_stock_hints":false,"free_shipping":false}`} {
		a := h.do(http.MethodPut, "/api/v1/ops/features", ops, body)
		assert.Equal(t, http.StatusBadRequest, a.status, "%s: %s", body, a.raw)
		assert.EqualValues(t, problem.ValidationFailed, a.body["code"], body)
	}
	assert.Zero(t, h.scalar(`SELECT count(*) FROM feature_switches`), "a refused body changes nothing")

	a := h.do(http.MethodGet, "/api/v1/ops/features", ops, "")
	require.Equal(t, http.StatusOK, a.status, a.raw)
	list := a.body["features"].([]any)
	require.Len(t, list, 3)
	for _, f := range list {
		f := f.(map[string]any)
		assert.Equal(t, true, f["enabled"], "%s is on until set", f["name"])
		assert.Nil(t, f["updatedBy"])
		assert.NotEmpty(t, f["whenOff"])
	}

	a = h.do(http.MethodPut, "/api/v1/ops/features", ops, `{"preview_stock_warnings":false}`)
	require.Equal(t, http.StatusOK, a.status, a.raw)
	for _, f := range a.body["features"].([]any) {
		f := f.(map[string]any)
		if f["name"] == "preview_stock_warnings" {
			assert.Equal(t, false, f["enabled"])
			assert.Equal(t, "ops:950", f["updatedBy"])
			assert.NotNil(t, f["updatedAt"])
		} else {
			assert.Equal(t, true, f["enabled"], "the others stay as they are")
		}
	}
	assert.Equal(t, int64(1), h.scalar(`SELECT count(*) FROM feature_switches WHERE name = 'preview_stock_warnings'
		AND NOT enabled AND updated_by = 'ops:950'`))
}
