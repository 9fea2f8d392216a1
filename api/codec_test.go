package api_test

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/marketplace/checkout/api"
	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/problem"
)

const uiOrigin = "http://localhost:8233"

// codecRequest is one request to the codec endpoint, as the UI or a program sends it.
type codecRequest struct {
	method, path, token, body string
	origin                    string
	cookie                    *http.Cookie
	form                      bool
	headers                   map[string]string
	tls                       bool   // the request came over TLS
	peer                      string // the connection's address (default: httptest's)
}

func (h *harness) codecCall(r codecRequest) *httptest.ResponseRecorder {
	h.t.Helper()
	if r.method == "" {
		r.method = http.MethodPost
	}
	req := httptest.NewRequest(r.method, r.path, strings.NewReader(r.body))
	switch {
	case r.form:
		req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationForm)
	case r.body != "":
		req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	}
	if r.token != "" {
		req.Header.Set(echo.HeaderAuthorization, "Bearer "+r.token)
	}
	if r.origin != "" {
		req.Header.Set(echo.HeaderOrigin, r.origin)
	}
	if r.cookie != nil {
		req.AddCookie(r.cookie)
	}
	for k, v := range r.headers {
		req.Header.Set(k, v)
	}
	if r.tls {
		req.TLS = &tls.ConnectionState{}
	}
	if r.peer != "" {
		req.RemoteAddr = r.peer
	}
	rec := httptest.NewRecorder()
	h.e.ServeHTTP(rec, req)
	return rec
}

// sealed is a request body of payloads the product's codec encrypted.
func (h *harness) sealed(values ...any) string {
	h.t.Helper()
	dc := h.codec.DataConverter()
	var ps []*commonpb.Payload
	for _, v := range values {
		p, err := dc.ToPayload(v)
		require.NoError(h.t, err)
		ps = append(ps, p)
	}
	raw, err := protojson.Marshal(&commonpb.Payloads{Payloads: ps})
	require.NoError(h.t, err)
	return string(raw)
}

// payloadsOf reads a codec answer.
func payloadsOf(t *testing.T, rec *httptest.ResponseRecorder) []*commonpb.Payload {
	t.Helper()
	var out commonpb.Payloads
	require.NoError(t, protojson.Unmarshal(rec.Body.Bytes(), &out), rec.Body.String())
	return out.Payloads
}

func TestCodecDecode_SupportAndOpsOnly_InTheErrorModel(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	body := h.sealed(map[string]any{"paymentMethodToken": "tok_3ds", "addressId": 41}, "second")
	support := h.token(auth.Principal{UserID: 900, Role: auth.RoleSupport})
	ops := h.token(auth.Principal{UserID: 950, Role: auth.RoleOps})

	for _, tok := range []string{support, ops} {
		rec := h.codecCall(codecRequest{path: "/codec/decode", token: tok, body: body})
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		ps := payloadsOf(t, rec)
		require.Len(t, ps, 2, "the same payloads, in the same order")
		assert.Equal(t, "json/plain", string(ps[0].Metadata["encoding"]))
		assert.JSONEq(t, `{"paymentMethodToken": "tok_3ds", "addressId": 41}`, string(ps[0].Data))
		assert.Equal(t, `"second"`, string(ps[1].Data))
	}
	for name, tc := range map[string]struct {
		token  string
		status int
		code   problem.Code
	}{
		"no token":      {"", http.StatusUnauthorized, problem.Unauthorized},
		"invalid token": {"not-a-token", http.StatusUnauthorized, problem.Unauthorized},
		"shopper":       {h.shopper(7), http.StatusForbidden, problem.Forbidden},
		"seller":        {h.seller(42), http.StatusForbidden, problem.Forbidden},
	} {
		for _, path := range []string{"/codec/decode", "/codec/encode"} {
			rec := h.codecCall(codecRequest{path: path, token: tc.token, body: body})
			assert.Equal(t, tc.status, rec.Code, "%s %s", name, path)
			assert.Contains(t, rec.Body.String(), `"code":"`+string(tc.code)+`"`, "%s %s: %s", name, path, rec.Body.String())
			assert.NotContains(t, rec.Body.String(), "tok_3ds", name)
		}
	}
}

func TestCodecEncode_ThenDecode_RoundTrip_AndRefusals(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	support := h.token(auth.Principal{UserID: 900, Role: auth.RoleSupport})
	plain := `{"payloads":[{"metadata":{"encoding":"anNvbi9wbGFpbg=="},"data":"eyJhY3Rpb24iOiJyZXRyeSJ9"}]}` // {"action":"retry"}
	enc := h.codecCall(codecRequest{path: "/codec/encode", token: support, body: plain})
	require.Equal(t, http.StatusOK, enc.Code, enc.Body.String())
	sealed := payloadsOf(t, enc)
	require.Len(t, sealed, 1)
	assert.Equal(t, "binary/encrypted", string(sealed[0].Metadata["encoding"]))
	assert.NotContains(t, string(sealed[0].Data), "retry")

	dec := h.codecCall(codecRequest{path: "/codec/decode", token: support, body: enc.Body.String()})
	require.Equal(t, http.StatusOK, dec.Code, dec.Body.String())
	assert.JSONEq(t, `{"action":"retry","actor":{"sub":"900","role":"support","name":"user 900","via":"temporal-ui","ip":"192.0.2.1"}}`,
		string(payloadsOf(t, dec)[0].Data), "encoded with the caller named")

	passed := h.codecCall(codecRequest{path: "/codec/decode", token: support, body: plain})
	require.Equal(t, http.StatusOK, passed.Code)
	assert.Equal(t, `{"action":"retry"}`, string(payloadsOf(t, passed)[0].Data), "a plain payload passes through")

	sealed[0].Data[len(sealed[0].Data)-1] ^= 1
	raw, err := protojson.Marshal(&commonpb.Payloads{Payloads: sealed})
	require.NoError(t, err)
	tampered := h.codecCall(codecRequest{path: "/codec/decode", token: support, body: string(raw)})
	assert.Equal(t, http.StatusUnprocessableEntity, tampered.Code)
	assert.Contains(t, tampered.Body.String(), string(problem.PayloadNotDecodable))

	bad := h.codecCall(codecRequest{path: "/codec/decode", token: support, body: `{"payloads": 3}`})
	assert.Equal(t, http.StatusBadRequest, bad.Code)
	assert.Contains(t, bad.Body.String(), string(problem.InvalidJSON))
}

// TestCodecEncode_ActorIsTheVerifiedCaller_NeverTheInput: an actor typed into the input (another
// person, another role) is replaced by the signed-in caller's; payloads that are not JSON objects
// are encoded as they are.
func TestCodecEncode_ActorIsTheVerifiedCaller_NeverTheInput(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ops := h.token(auth.Principal{UserID: 950, Role: auth.RoleOps})
	forged := map[string]any{"orderId": 98213, "actor": map[string]any{"sub": "1", "role": "ops", "name": "Someone Else"}}
	plain, err := protojson.Marshal(&commonpb.Payloads{Payloads: []*commonpb.Payload{
		mustPayload(t, forged), mustPayload(t, "retry"), mustPayload(t, []int{1, 2})}})
	require.NoError(t, err)
	enc := h.codecCall(codecRequest{path: "/codec/encode", token: ops, body: string(plain)})
	require.Equal(t, http.StatusOK, enc.Code, enc.Body.String())
	dec := h.codecCall(codecRequest{path: "/codec/decode", token: ops, body: enc.Body.String()})
	require.Equal(t, http.StatusOK, dec.Code, dec.Body.String())
	ps := payloadsOf(t, dec)
	require.Len(t, ps, 3)
	assert.JSONEq(t, `{"orderId":98213,"actor":{"sub":"950","role":"ops","name":"user 950","via":"temporal-ui","ip":"192.0.2.1"}}`, string(ps[0].Data))
	assert.Equal(t, `"retry"`, string(ps[1].Data))
	assert.Equal(t, `[1,2]`, string(ps[2].Data))
}

func mustPayload(t *testing.T, v any) *commonpb.Payload {
	t.Helper()
	p, err := converter.GetDefaultDataConverter().ToPayload(v)
	require.NoError(t, err)
	return p
}

// TestCodecSession_CookieForSupport_SentByTheUI: support signs in on the page (from the API's own
// origin: another site's page, or a form without Origin, is refused); the cookie holds a session's
// random id kept in PostgreSQL (never the token), is HttpOnly, SameSite=Strict, scoped to /codec
// and ends with the token; the UI's request with it decodes and may be read by the UI's origin
// (CORS with credentials), another page's may not; signing out ends the session itself.
func TestCodecSession_CookieForSupport_SentByTheUI(t *testing.T) {
	t.Parallel()
	h := newHarnessOf(t, nil, map[string]string{"TEMPORAL_UI_ORIGIN": uiOrigin})
	page := h.codecCall(codecRequest{method: http.MethodGet, path: "/codec/session"})
	require.Equal(t, http.StatusOK, page.Code)
	assert.Contains(t, page.Body.String(), `name="token"`)
	assert.Contains(t, page.Body.String(), "Include cross-origin credentials")

	base, err := url.Parse(h.cfg.PublicBaseURL)
	require.NoError(t, err)
	self := base.Scheme + "://" + base.Host // the API's own page
	refused := h.codecCall(codecRequest{path: "/codec/session", form: true, origin: self,
		body: url.Values{"token": {h.shopper(7)}}.Encode()})
	assert.Equal(t, http.StatusForbidden, refused.Code)
	assert.Empty(t, refused.Result().Cookies(), "no session for a shopper")
	assert.Contains(t, refused.Body.String(), "support and ops")

	tok, err := auth.Keys{Signing: auth.Key{Secret: []byte(h.cfg.JWTSecret)}}.Mint(auth.Principal{UserID: 900, Role: auth.RoleSupport}, 2*time.Hour)
	require.NoError(t, err)
	for origin, why := range map[string]string{"https://evil.example": "another site's page", "": "a form without Origin"} {
		foreign := h.codecCall(codecRequest{path: "/codec/session", form: true, origin: origin,
			body: url.Values{"token": {tok}}.Encode()})
		assert.Equal(t, http.StatusForbidden, foreign.Code, why)
		assert.Empty(t, foreign.Result().Cookies(), why)
	}
	in := h.codecCall(codecRequest{path: "/codec/session", form: true, origin: self, body: url.Values{"token": {tok}}.Encode()})
	require.Equal(t, http.StatusOK, in.Code, in.Body.String())
	assert.Contains(t, in.Body.String(), "Decoding is on in this browser until")
	cookies := in.Result().Cookies()
	require.Len(t, cookies, 1)
	ck := cookies[0]
	assert.Equal(t, api.CodecSessionCookie, ck.Name)
	assert.True(t, ck.HttpOnly)
	assert.Equal(t, http.SameSiteStrictMode, ck.SameSite)
	assert.Equal(t, "/codec", ck.Path)
	assert.False(t, ck.Secure, "http here; Secure when PUBLIC_BASE_URL is https")
	assert.WithinDuration(t, time.Now().Add(2*time.Hour), ck.Expires, time.Minute, "ends with the token")
	assert.NotContains(t, ck.Value, tok, "the cookie holds a session id, not the token")
	var held int
	require.NoError(t, h.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM codec_sessions WHERE user_id = 900 AND role = 'support'`).Scan(&held))
	assert.Equal(t, 1, held, "the session is in PostgreSQL, for every replica")

	body := h.sealed("tok_3ds")
	ui := h.codecCall(codecRequest{path: "/codec/decode", cookie: ck, origin: uiOrigin, body: body,
		headers: map[string]string{"X-Namespace": "default"}})
	require.Equal(t, http.StatusOK, ui.Code, ui.Body.String())
	assert.Equal(t, `"tok_3ds"`, string(payloadsOf(t, ui)[0].Data))
	assert.Equal(t, uiOrigin, ui.Header().Get(echo.HeaderAccessControlAllowOrigin))
	assert.Equal(t, "true", ui.Header().Get(echo.HeaderAccessControlAllowCredentials))

	other := h.codecCall(codecRequest{path: "/codec/decode", cookie: ck, origin: "http://localhost:3000", body: body})
	assert.Equal(t, http.StatusForbidden, other.Code, "a cookie sent by another page counts for nothing")
	assert.Empty(t, other.Header().Get(echo.HeaderAccessControlAllowOrigin))

	tokenCookie := &http.Cookie{Name: api.CodecSessionCookie, Value: tok}
	assert.Equal(t, http.StatusUnauthorized, h.codecCall(codecRequest{path: "/codec/decode", cookie: tokenCookie,
		origin: uiOrigin, body: body}).Code, "a token in the cookie opens no session")
	stale := &http.Cookie{Name: api.CodecSessionCookie, Value: "expired.or.forged"}
	assert.Equal(t, http.StatusUnauthorized, h.codecCall(codecRequest{path: "/codec/decode", cookie: stale,
		origin: uiOrigin, body: body}).Code)

	out := h.codecCall(codecRequest{method: http.MethodDelete, path: "/codec/session", cookie: ck})
	assert.Equal(t, http.StatusNoContent, out.Code)
	require.Len(t, out.Result().Cookies(), 1)
	assert.Negative(t, out.Result().Cookies()[0].MaxAge, "the cookie is cleared")
	assert.Equal(t, http.StatusUnauthorized, h.codecCall(codecRequest{path: "/codec/decode", cookie: ck,
		origin: uiOrigin, body: body}).Code, "and the session itself ends: a copy of the cookie opens nothing")

	// A program signs in with its bearer token and gets the expiry.
	prog := h.codecCall(codecRequest{path: "/codec/session", token: tok})
	require.Equal(t, http.StatusOK, prog.Code, prog.Body.String())
	assert.Contains(t, prog.Body.String(), `"expiresAt"`)
	assert.Equal(t, http.StatusUnauthorized, h.codecCall(codecRequest{path: "/codec/session"}).Code)
}

// TestCodecCORS_PreflightForTheUIOriginOnly: the browser's preflight (no cookie, no token) is
// answered for the UI's origin, with credentials and the headers the UI sends; not for others.
func TestCodecCORS_PreflightForTheUIOriginOnly(t *testing.T) {
	t.Parallel()
	h := newHarnessOf(t, nil, map[string]string{"TEMPORAL_UI_ORIGIN": uiOrigin + ",http://127.0.0.1:8233"})
	preflight := func(origin string) *httptest.ResponseRecorder {
		return h.codecCall(codecRequest{method: http.MethodOptions, path: "/codec/decode", origin: origin,
			headers: map[string]string{"Access-Control-Request-Method": "POST",
				"Access-Control-Request-Headers": "content-type,x-namespace"}})
	}
	for _, o := range []string{uiOrigin, "http://127.0.0.1:8233"} {
		rec := preflight(o)
		assert.Equal(t, http.StatusNoContent, rec.Code)
		assert.Equal(t, o, rec.Header().Get(echo.HeaderAccessControlAllowOrigin), "the exact origin, never *")
		assert.Equal(t, "true", rec.Header().Get(echo.HeaderAccessControlAllowCredentials))
		assert.Contains(t, rec.Header().Get(echo.HeaderAccessControlAllowHeaders), "X-Namespace")
		assert.Contains(t, rec.Header().Get(echo.HeaderAccessControlAllowMethods), "POST")
	}
	rec := preflight("http://evil.example")
	assert.Empty(t, rec.Header().Get(echo.HeaderAccessControlAllowOrigin))
	assert.Empty(t, rec.Header().Get(echo.HeaderAccessControlAllowCredentials))

	noUI := newHarness(t, nil)
	rec = noUI.codecCall(codecRequest{method: http.MethodOptions, path: "/codec/decode", origin: uiOrigin,
		headers: map[string]string{"Access-Control-Request-Method": "POST"}})
	assert.Empty(t, rec.Header().Get(echo.HeaderAccessControlAllowOrigin), "no TEMPORAL_UI_ORIGIN: no browser origin")
}

// TestCodecSession_CookieSecureOverHTTPS: the session cookie is Secure when the sign-in came over
// https, the API's own TLS or a trusted proxy's (X-Forwarded-Proto from TRUSTED_PROXIES, as the
// cluster's HAProxy says it for its codec endpoint), though PUBLIC_BASE_URL is http; over http,
// or with the header from a client, it is not.
func TestCodecSession_CookieSecureOverHTTPS(t *testing.T) {
	t.Parallel()
	h := newHarnessOf(t, nil, map[string]string{"TEMPORAL_UI_ORIGIN": uiOrigin, "TRUSTED_PROXIES": "192.0.2.10"})
	base, err := url.Parse(h.cfg.PublicBaseURL)
	require.NoError(t, err)
	require.Equal(t, "http", base.Scheme)
	self := base.Scheme + "://" + base.Host
	tok, err := auth.Keys{Signing: auth.Key{Secret: []byte(h.cfg.JWTSecret)}}.Mint(auth.Principal{UserID: 900, Role: auth.RoleSupport}, time.Hour)
	require.NoError(t, err)
	https := map[string]string{"X-Forwarded-Proto": "https"}
	for name, tc := range map[string]struct {
		r      codecRequest
		secure bool
	}{
		"over http":                          {codecRequest{}, false},
		"over the API's own TLS":             {codecRequest{tls: true}, true},
		"through the trusted proxy's TLS":    {codecRequest{peer: "192.0.2.10:4711", headers: https}, true},
		"X-Forwarded-Proto from a client":    {codecRequest{peer: "198.51.100.7:4711", headers: https}, false},
		"the trusted proxy's plain frontend": {codecRequest{peer: "192.0.2.10:4711"}, false},
	} {
		r := tc.r
		r.path, r.form, r.origin, r.body = "/codec/session", true, self, url.Values{"token": {tok}}.Encode()
		in := h.codecCall(r)
		require.Equal(t, http.StatusOK, in.Code, "%s: %s", name, in.Body.String())
		cookies := in.Result().Cookies()
		require.Len(t, cookies, 1, name)
		assert.Equal(t, tc.secure, cookies[0].Secure, name)
		r.method, r.form, r.body, r.cookie = http.MethodDelete, false, "", cookies[0]
		out := h.codecCall(r)
		require.Equal(t, http.StatusNoContent, out.Code, name)
		assert.Equal(t, tc.secure, out.Result().Cookies()[0].Secure, "%s: the sign-out's cookie", name)
	}
}
