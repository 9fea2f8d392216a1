package main

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const testSecret = "a-client-secret-of-at-least-32-bytes!"

type testProvider struct {
	t        *testing.T
	srv      *httptest.Server
	dir      string
	redirect string
	mu       sync.Mutex
	now      time.Time
}

func (p *testProvider) clock() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.now
}

func (p *testProvider) advance(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.now = p.now.Add(d)
}

func startProvider(t *testing.T) *testProvider {
	t.Helper()
	p := &testProvider{t: t, dir: t.TempDir(), redirect: "http://localhost:1/auth/sso/callback", now: time.Now()}
	for _, u := range []struct{ name, sub, role string }{{"alice", "901", "support"}, {"sam", "7", "shopper"}} {
		require.NoError(t, putUser(p.dir, user{Name: u.name, Subject: u.sub, Role: u.role, DisplayName: strings.ToUpper(u.name)},
			u.name+"-password-1234"))
	}
	var h http.Handler
	p.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }))
	p.srv.Start()
	t.Cleanup(p.srv.Close)
	var err error
	h, err = newHandler(settings{dir: p.dir, issuer: p.srv.URL, clientID: "temporal-ui", clientSecret: testSecret,
		redirects: []string{p.redirect}, tokenTTL: time.Hour, publishLead: 2 * time.Minute},
		slog.New(slog.DiscardHandler), p.clock)
	require.NoError(t, err)
	return p
}

var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// signIn runs the authorization code flow as the Temporal UI server and a browser do, and
// answers the token endpoint's JSON.
func (p *testProvider) signIn(name, password string) (map[string]any, int) {
	t := p.t
	q := url.Values{"client_id": {"temporal-ui"}, "redirect_uri": {p.redirect}, "response_type": {"code"},
		"scope": {"openid profile email"}, "state": {"st"}, "nonce": {"nc"}}
	resp, err := noRedirects.Get(p.srv.URL + "/authorize?" + q.Encode())
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusFound, resp.StatusCode)
	loginURL, err := url.Parse(resp.Header.Get("Location"))
	require.NoError(t, err)
	require.Equal(t, loginPath, loginURL.Path)
	id := loginURL.Query().Get("authRequestID")

	form := url.Values{"authRequestID": {id}, "username": {name}, "password": {password}}
	req, err := http.NewRequest(http.MethodPost, p.srv.URL+loginPath, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", p.srv.URL)
	resp, err = noRedirects.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		return nil, resp.StatusCode
	}
	resp, err = noRedirects.Get(resp.Header.Get("Location")) // the provider's callback
	require.NoError(t, err)
	resp.Body.Close()
	back, err := url.Parse(resp.Header.Get("Location"))
	require.NoError(t, err)
	require.Equal(t, "st", back.Query().Get("state"))
	code := back.Query().Get("code")
	require.NotEmpty(t, code, back.String())

	tokens, status := p.exchange(code)
	require.Equal(t, http.StatusOK, status, tokens)
	again, status := p.exchange(code)
	assert.Equal(t, http.StatusBadRequest, status, "a code is good once: %v", again)
	return tokens, http.StatusOK
}

func (p *testProvider) exchange(code string) (map[string]any, int) {
	return p.token(url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {p.redirect}},
		"temporal-ui", testSecret)
}

// verify checks a token's signature against the provider's JWKS and answers its claims and kid.
func (p *testProvider) verify(token string) (map[string]any, string) {
	t := p.t
	resp, err := http.Get(p.srv.URL + "/keys")
	require.NoError(t, err)
	defer resp.Body.Close()
	var set jose.JSONWebKeySet
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&set))
	sig, err := jose.ParseSignedCompact(token, []jose.SignatureAlgorithm{jose.RS256})
	require.NoError(t, err)
	kid := sig.Signatures[0].Header.KeyID
	keys := set.Key(kid)
	require.Len(t, keys, 1, "the JWKS publishes the key %s", kid)
	payload, err := sig.Verify(keys[0].Key)
	require.NoError(t, err)
	var claims map[string]any
	require.NoError(t, json.Unmarshal(payload, &claims))
	return claims, kid
}

func TestProvider_SupportSignsIn_TokensCarryTheRoleForTheUIsAudience(t *testing.T) {
	p := startProvider(t)
	tokens, _ := p.signIn("alice", "alice-password-1234")
	for _, name := range []string{"access_token", "id_token"} {
		raw, _ := tokens[name].(string)
		claims, _ := p.verify(raw)
		assert.Equal(t, p.srv.URL, claims["iss"], name)
		assert.Equal(t, "901", claims["sub"], name)
		assert.Equal(t, "support", claims["role"], name)
		assert.Equal(t, "ALICE", claims["name"], name)
		aud, _ := json.Marshal(claims["aud"])
		assert.Contains(t, string(aud), `"temporal-ui"`, name)
	}
	id, _ := p.verify(tokens["id_token"].(string))
	assert.Equal(t, "nc", id["nonce"])
}

func TestProvider_TheShopperSignsIn_WithTheShopperRole(t *testing.T) {
	p := startProvider(t)
	tokens, _ := p.signIn("sam", "sam-password-1234")
	claims, _ := p.verify(tokens["access_token"].(string))
	assert.Equal(t, "shopper", claims["role"])
}

func TestProvider_WrongPasswordOrForeignOrigin_Refused(t *testing.T) {
	p := startProvider(t)
	_, status := p.signIn("alice", "not-her-password")
	assert.Equal(t, http.StatusUnauthorized, status)
	_, status = p.signIn("nobody", "alice-password-1234")
	assert.Equal(t, http.StatusUnauthorized, status)

	form := url.Values{"authRequestID": {"x"}, "username": {"alice"}, "password": {"alice-password-1234"}}
	req, err := http.NewRequest(http.MethodPost, p.srv.URL+loginPath, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://evil.example")
	resp, err := noRedirects.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
}

// A browser applies the sign-in page's form-action to each redirect after the post, the last to
// the client's callback: the page must allow the client's origin, or the browser stops there.
func TestProvider_SignInPage_LetsItsFormRedirectToTheClient(t *testing.T) {
	p := startProvider(t)
	resp, err := http.Get(p.srv.URL + loginPath + "?authRequestID=x")
	require.NoError(t, err)
	resp.Body.Close()
	csp := resp.Header.Get("Content-Security-Policy")
	assert.Contains(t, csp, "form-action 'self' http://localhost:1;", "the client's origin, no more")
	assert.Contains(t, csp, "frame-ancestors 'none'")
}

func TestProvider_RotatedKey_PublishedAtOnce_SignsAfterTheLead(t *testing.T) {
	p := startProvider(t)
	tokens, _ := p.signIn("alice", "alice-password-1234")
	_, first := p.verify(tokens["access_token"].(string))

	p.advance(time.Hour)
	second, err := makeKey(p.dir, p.clock())
	require.NoError(t, err)
	p.advance(15 * time.Second) // past the folder's reload
	tokens, _ = p.signIn("alice", "alice-password-1234")
	_, kid := p.verify(tokens["access_token"].(string))
	assert.Equal(t, first, kid, "a new key is published before it signs")

	p.advance(2 * time.Minute)
	tokens, _ = p.signIn("alice", "alice-password-1234")
	_, kid = p.verify(tokens["access_token"].(string))
	assert.Equal(t, second, kid, "then it signs")

	// Both stay published until the old file is removed.
	require.NoError(t, os.Remove(filepath.Join(p.dir, keysDir, first+".pem")))
	p.advance(15 * time.Second)
	resp, err := http.Get(p.srv.URL + "/keys")
	require.NoError(t, err)
	defer resp.Body.Close()
	var set jose.JSONWebKeySet
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&set))
	assert.Empty(t, set.Key(first), "a removed key is retired")
	assert.Len(t, set.Key(second), 1)
}

func TestProvider_IssuerOverPlainHTTP_OnlyOnLoopback(t *testing.T) {
	for issuer, ok := range map[string]bool{"http://localhost:8234": true, "http://127.0.0.1:8234": true,
		"https://id.example": true, "http://id.example": false} {
		t.Setenv("OIDC_DIR", t.TempDir())
		t.Setenv("OIDC_ISSUER", issuer)
		t.Setenv("OIDC_CLIENT_SECRET", testSecret)
		t.Setenv("OIDC_REDIRECT_URIS", "https://ui.example/auth/sso/callback")
		_, err := readSettings()
		assert.Equal(t, ok, err == nil, "%s: %v", issuer, err)
	}
}
