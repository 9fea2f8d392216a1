package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestObserve_UnknownMethods_OneLabel: a method the client makes up is counted and logged as
// OTHER, so that no client can add a series (and a line to every scrape) per request.
func TestObserve_UnknownMethods_OneLabel(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	for _, m := range []string{"FOOBAR", "X" + strings.Repeat("Y", 4000), "PROPFIND"} {
		r := h.send(m, "/api/v1/cart", "", "")
		assert.NotEqual(t, http.StatusOK, r.status, "%.10s is no method of the API", m)
	}
	h.send(http.MethodGet, "/healthz", "", "")
	h.send(http.MethodDelete, "/api/v1/nothing-here", "", "")
	scrape, logs := h.scrape(), h.logs.String()
	for _, made := range []string{"FOOBAR", "PROPFIND", "XYYY"} {
		assert.False(t, strings.Contains(scrape, made), "no series for %s", made)
		assert.False(t, strings.Contains(logs, made), "no log field %s", made)
	}
	assert.True(t, strings.Contains(scrape, `method="OTHER"`), "counted as OTHER")
	assert.True(t, strings.Contains(logs, `"method":"OTHER"`), "logged as OTHER")
	assert.True(t, strings.Contains(scrape, `method="GET"`), "the methods of HTTP keep their names")
	assert.True(t, strings.Contains(scrape, `method="DELETE"`))
}
