package api_test

import (
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/api"
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

// TestHTTPServer_HugeHeaders_431: a request whose headers pass MaxHeaderBytes is refused 431 by the
// listener, before any handler reads it; one just under the bound is served.
func TestHTTPServer_HugeHeaders_431(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := api.HTTPServer("", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	get := func(header int) int {
		req, err := http.NewRequest(http.MethodGet, "http://"+ln.Addr().String()+"/", nil)
		require.NoError(t, err)
		req.Header.Set("X-Padding", strings.Repeat("a", header))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusNoContent, get(api.MaxHeaderBytes/2))
	assert.Equal(t, http.StatusRequestHeaderFieldsTooLarge, get(256<<10), "a quarter of a MiB of headers")
}

// TestRequestID_OnlyIdsWeCouldHaveMade: a client's X-Request-ID is adopted when it is short and
// plain; one too long, or with characters outside the id alphabet, is replaced by a new id, in
// the answer and in the log.
func TestRequestID_OnlyIdsWeCouldHaveMade(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	idRe := regexp.MustCompile(`^[0-9a-f]{32}$`)
	cases := []struct {
		name, sent string
		adopted    bool
	}{
		{"a UUID", "0b9c6a6e-55c2-4b5e-9f0e-3f8f6b1f7c11", true},
		{"a trace id", "root:1-5759e988.bd862e3f_e1", true},
		{"none", "", false},
		{"too long", strings.Repeat("a", api.MaxRequestIDLength+1), false},
		{"huge", strings.Repeat("b", 16<<10), false},
		{"a space", "abc def", false},
		{"a quote", `abc"def`, false},
		{"markup", "<script>", false},
		{"non-ASCII", "idé", false},
	}
	for _, c := range cases {
		r := h.send(http.MethodGet, "/healthz", "", "", "X-Request-ID", c.sent)
		got := r.header.Get("X-Request-ID")
		if c.adopted {
			assert.Equal(t, c.sent, got, c.name)
			continue
		}
		assert.Regexp(t, idRe, got, "%s: a new id", c.name)
	}
	h.send(http.MethodGet, "/api/v1/cart", "", "", "X-Request-ID", strings.Repeat("z", 4096))
	assert.False(t, strings.Contains(h.logs.String(), strings.Repeat("z", api.MaxRequestIDLength+1)), "never logged")
}
