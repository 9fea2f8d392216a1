package main

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const sellerSecret = "the-erp-secret-of-seller-42-0123456789"

// token posts a grant to the token endpoint and answers its JSON and status.
func (p *testProvider) token(form url.Values, clientID, secret string) (map[string]any, int) {
	req, err := http.NewRequest(http.MethodPost, p.srv.URL+"/oauth/token", strings.NewReader(form.Encode()))
	require.NoError(p.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if clientID != "" {
		req.SetBasicAuth(clientID, secret)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(p.t, err)
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(raw, &out)
	return out, resp.StatusCode
}

func lifetime(claims map[string]any) time.Duration {
	return time.Duration(claims["exp"].(float64)-claims["iat"].(float64)) * time.Second
}

func TestProvider_SellerERP_ClientCredentials_SellerToken(t *testing.T) {
	p := startProvider(t)
	require.NoError(t, putSeller(p.dir, sellerClient{ClientID: "seller-42", Subject: "1042", SellerID: "42"}, sellerSecret))
	grant := url.Values{"grant_type": {"client_credentials"}}

	out, status := p.token(grant, "seller-42", sellerSecret)
	require.Equal(t, http.StatusOK, status, out)
	claims, _ := p.verify(out["access_token"].(string))
	assert.Equal(t, p.srv.URL, claims["iss"])
	assert.Equal(t, "1042", claims["sub"])
	assert.Equal(t, "seller", claims["role"])
	assert.Equal(t, "42", claims["seller_id"])
	aud, _ := json.Marshal(claims["aud"])
	assert.Contains(t, string(aud), `"temporal-ui"`, "the audience the API verifies")
	assert.InDelta(t, machineTokenTTL.Seconds(), lifetime(claims).Seconds(), 2, "short-lived")
	assert.InDelta(t, machineTokenTTL.Seconds(), out["expires_in"], 2)

	for name, c := range map[string][2]string{"a wrong secret": {"seller-42", sellerSecret + "x"},
		"an unknown client": {"seller-99", sellerSecret}, "the UI's client": {"temporal-ui", testSecret}} {
		out, status := p.token(grant, c[0], c[1])
		assert.NotEqual(t, http.StatusOK, status, "%s: %v", name, out)
		assert.Nil(t, out["access_token"], name)
	}
}

// shopperKeyOf registers a new RSA key for the JWT-profile grant and answers its private half.
func shopperKeyOf(t *testing.T, dir, kid string, minSubject int64) *rsa.PrivateKey {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	require.NoError(t, err)
	require.NoError(t, putShopperKey(dir, shopperKey{KeyID: kid, MinSubject: minSubject,
		PublicKey: string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))}))
	return key
}

func assertion(t *testing.T, key *rsa.PrivateKey, kid string, claims map[string]any) string {
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key},
		(&jose.SignerOptions{}).WithHeader("kid", kid).WithType("JWT"))
	require.NoError(t, err)
	raw, err := json.Marshal(claims)
	require.NoError(t, err)
	obj, err := signer.Sign(raw)
	require.NoError(t, err)
	s, err := obj.CompactSerialize()
	require.NoError(t, err)
	return s
}

func TestProvider_LoadGenerator_JWTProfile_ShopperTokens(t *testing.T) {
	p := startProvider(t)
	key := shopperKeyOf(t, p.dir, "loadgen", 1_000_000)
	require.NoError(t, putUser(p.dir, user{Name: "big", Subject: "5000000", Role: "ops"}, "big-password-1234"))
	claimsFor := func(sub string) map[string]any {
		now := time.Now()
		return map[string]any{"iss": sub, "sub": sub, "aud": []string{p.srv.URL, "temporal-ui"},
			"iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix()}
	}
	grant := func(a string) (map[string]any, int) {
		return p.token(url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:jwt-bearer"}, "assertion": {a}}, "", "")
	}

	for _, sub := range []string{"1000000", "1790000000000042"} {
		c := claimsFor(sub)
		c["role"] = "ops" // the assertion's own claims are not the token's
		out, status := grant(assertion(t, key, "loadgen", c))
		require.Equal(t, http.StatusOK, status, "%s: %v", sub, out)
		claims, _ := p.verify(out["access_token"].(string))
		assert.Equal(t, p.srv.URL, claims["iss"])
		assert.Equal(t, sub, claims["sub"])
		assert.Equal(t, "shopper", claims["role"])
		assert.Nil(t, claims["seller_id"])
		aud, _ := json.Marshal(claims["aud"])
		assert.Contains(t, string(aud), `"temporal-ui"`)
		assert.InDelta(t, machineTokenTTL.Seconds(), lifetime(claims).Seconds(), 2)
	}

	other, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	with := func(sub, k string, v any) map[string]any {
		c := claimsFor(sub)
		c[k] = v
		return c
	}
	for name, a := range map[string]string{
		"a subject below the key's":   assertion(t, key, "loadgen", claimsFor("7")),
		"a person's subject":          assertion(t, key, "loadgen", claimsFor("5000000")),
		"no decimal user id":          assertion(t, key, "loadgen", claimsFor("shopper-1000001")),
		"an unregistered key":         assertion(t, other, "loadgen", claimsFor("1000001")),
		"an unknown kid":              assertion(t, key, "someone", claimsFor("1000001")),
		"sub other than iss":          assertion(t, key, "loadgen", with("1000001", "sub", "1000002")),
		"a foreign audience":          assertion(t, key, "loadgen", with("1000001", "aud", []string{p.srv.URL, "temporal-ui", "elsewhere"})),
		"without the API's audience":  assertion(t, key, "loadgen", with("1000001", "aud", []string{p.srv.URL})),
		"an assertion living an hour": assertion(t, key, "loadgen", with("1000001", "exp", time.Now().Add(time.Hour).Unix())),
		"an expired assertion":        assertion(t, key, "loadgen", with("1000001", "exp", time.Now().Add(-time.Minute).Unix())),
	} {
		out, status := grant(a)
		assert.NotEqual(t, http.StatusOK, status, "%s: %v", name, out)
		assert.Nil(t, out["access_token"], name)
	}
}
