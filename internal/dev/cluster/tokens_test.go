package cluster

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTokens_OnePerSubjectUntilNearExpiry: the harness asks the provider once per subject, and
// again only when the held token is about to expire; a shopper's assertion names the shopper as
// iss and sub, the harness's kid, and the provider and the API as audience; a seller's request
// is its ERP's client_credentials.
func TestTokens_OnePerSubjectUntilNearExpiry(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	var mu sync.Mutex
	requests := map[string]int{}
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.NoError(t, r.ParseForm())
		subject := ""
		switch r.Form.Get("grant_type") {
		case "urn:ietf:params:oauth:grant-type:jwt-bearer":
			var c jwt.MapClaims
			tok, err := jwt.ParseWithClaims(r.Form.Get("assertion"), &c, func(*jwt.Token) (any, error) { return &key.PublicKey, nil })
			require.NoError(t, err)
			assert.Equal(t, ShopperKeyID, tok.Header["kid"])
			assert.Equal(t, c["iss"], c["sub"])
			assert.Equal(t, []any{srv.URL, "temporal-ui"}, c["aud"])
			subject = c["sub"].(string)
		case "client_credentials":
			id, secret, ok := r.BasicAuth()
			assert.True(t, ok)
			assert.Equal(t, "seller-42", id)
			assert.Equal(t, "erp-secret", secret)
			subject = id
		}
		mu.Lock()
		requests[subject]++
		mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": "token-of-" + subject, "token_type": "Bearer", "expires_in": 600})
	}))
	defer srv.Close()
	now := time.Now()
	tk := &Tokens{issuer: srv.URL, audience: "temporal-ui", key: key, sellers: map[int64]string{42: "erp-secret"}, hc: srv.Client(),
		now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }, cache: map[string]heldToken{}, calls: map[string]*tokenCall{}}
	ctx := context.Background()

	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			tok, err := tk.Shopper(ctx, 1_000_007)
			assert.NoError(t, err)
			assert.Equal(t, "token-of-1000007", tok)
		})
	}
	wg.Wait()
	tok, err := tk.Seller(ctx, 42)
	require.NoError(t, err)
	assert.Equal(t, "token-of-seller-42", tok)
	_, err = tk.Seller(ctx, 42)
	require.NoError(t, err)
	counts := func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(requests)
	}
	assert.Equal(t, map[string]int{"1000007": 1, "seller-42": 1}, counts(), "one request per subject")

	mu.Lock()
	now = now.Add(9 * time.Minute) // within renewBefore of the expiry
	mu.Unlock()
	_, err = tk.Shopper(ctx, 1_000_007)
	require.NoError(t, err)
	assert.Equal(t, 2, counts()["1000007"], "renewed near its expiry")

	_, err = tk.Shopper(ctx, 7)
	assert.Error(t, err, "below the harness's shoppers")
	_, err = tk.Seller(ctx, 99)
	assert.Error(t, err, "no client for seller 99")
}
