package auth

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeIdP publishes a JWKS and signs tokens with the keys it holds, as an identity provider does.
type fakeIdP struct {
	t       *testing.T
	srv     *httptest.Server
	mu      sync.Mutex
	keys    map[string]*rsa.PrivateKey
	fetches int
}

func newFakeIdP(t *testing.T, kids ...string) *fakeIdP {
	f := &fakeIdP{t: t, keys: map[string]*rsa.PrivateKey{}}
	for _, kid := range kids {
		f.addKey(kid)
	}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.fetches++
		var set jose.JSONWebKeySet
		for kid, k := range f.keys {
			set.Keys = append(set.Keys, jose.JSONWebKey{Key: &k.PublicKey, KeyID: kid, Algorithm: "RS256", Use: "sig"})
		}
		_ = json.NewEncoder(w).Encode(set)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// keysOnAClock are keys of the provider whose clock moves only when advance says.
func (f *fakeIdP) keysOnAClock() (Keys, func(time.Duration)) {
	now := time.Now()
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	return Keys{MaxLifetime: 24 * time.Hour, now: clock,
		Provider: NewIdentityProvider(testIssuer, testAudience, f.srv.URL, clock)}, advance
}

func (f *fakeIdP) fetchCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fetches
}

func (f *fakeIdP) addKey(kid string) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(f.t, err)
	f.mu.Lock()
	f.keys[kid] = k
	f.mu.Unlock()
}

const testIssuer, testAudience = "https://id.example", "temporal-ui"

func (f *fakeIdP) sign(kid string, claims map[string]any) string {
	f.mu.Lock()
	key := f.keys[kid]
	f.mu.Unlock()
	if key == nil { // a key the provider never published
		var err error
		key, err = rsa.GenerateKey(rand.Reader, 2048)
		require.NoError(f.t, err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key},
		(&jose.SignerOptions{}).WithHeader("kid", kid).WithType("JWT"))
	require.NoError(f.t, err)
	payload, err := json.Marshal(claims)
	require.NoError(f.t, err)
	obj, err := signer.Sign(payload)
	require.NoError(f.t, err)
	tok, err := obj.CompactSerialize()
	require.NoError(f.t, err)
	return tok
}

func staffClaims(role string) map[string]any {
	now := time.Now()
	return map[string]any{"iss": testIssuer, "aud": []string{testAudience}, "sub": "901", "role": role,
		"name": "Alice Support", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
}

func providerKeys(f *fakeIdP) Keys {
	return Keys{Signing: Key{Secret: []byte("a-secret-of-at-least-thirty-two-bytes")}, MaxLifetime: 24 * time.Hour,
		Provider: NewIdentityProvider(testIssuer, testAudience, f.srv.URL, nil)}
}

func TestIdentityProvider_StaffTokenOfItsJWKS_Accepted(t *testing.T) {
	t.Parallel()
	f := newFakeIdP(t, "k1")
	p, err := providerKeys(f).Verify(f.sign("k1", staffClaims("support")))
	require.NoError(t, err)
	assert.Equal(t, Principal{UserID: 901, Role: RoleSupport, Name: "Alice Support"}, p)
}

func TestIdentityProvider_Refusals(t *testing.T) {
	t.Parallel()
	f := newFakeIdP(t, "k1")
	keys := providerKeys(f)
	with := func(k string, v any) map[string]any {
		c := staffClaims("support")
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	hmacSupport, err := Keys{Signing: keys.Signing}.Mint(Principal{UserID: 900, Role: RoleSupport}, time.Hour)
	require.NoError(t, err)
	for name, token := range map[string]string{
		"another issuer":               f.sign("k1", with("iss", "https://other.example")),
		"another audience":             f.sign("k1", with("aud", []string{"someone-else"})),
		"no audience":                  f.sign("k1", with("aud", nil)),
		"expired":                      f.sign("k1", with("exp", time.Now().Add(-time.Hour).Unix())),
		"no exp":                       f.sign("k1", with("exp", nil)),
		"lives too long":               f.sign("k1", with("exp", time.Now().Add(48*time.Hour).Unix())),
		"no role":                      f.sign("k1", with("role", nil)),
		"a role the checkout lacks":    f.sign("k1", with("role", "admin")),
		"sub not a user id":            f.sign("k1", with("sub", "alice")),
		"a key it never published":     f.sign("k9", staffClaims("support")),
		"support by the shared secret": hmacSupport,
	} {
		_, err := keys.Verify(token)
		assert.Error(t, err, name)
	}
	for _, p := range []Principal{{UserID: 7, Role: RoleShopper}, {UserID: 1042, Role: RoleSeller, SellerID: 42}} {
		tok, err := Keys{Signing: keys.Signing}.Mint(p, time.Hour)
		require.NoError(t, err)
		_, err = keys.Verify(tok)
		assert.ErrorIs(t, err, ErrSharedSecretRefused, "a %s's HS256 token, where a provider is set", p.Role)
	}
	shopper := map[string]any{"iss": testIssuer, "aud": []string{testAudience}, "sub": "7", "role": RoleShopper,
		"iat": time.Now().Unix(), "exp": time.Now().Add(10 * time.Minute).Unix()}
	p, err := keys.Verify(f.sign("k1", shopper))
	require.NoError(t, err, "the provider's shopper token")
	assert.Equal(t, Principal{UserID: 7, Role: RoleShopper}, p)
}

// A token naming a kid the JWKS lacks makes one fetch; more such tokens within RefetchEvery make
// none, whatever kid they name; after it, the next one fetches again.
func TestIdentityProvider_UnknownKid_RefetchThrottled(t *testing.T) {
	t.Parallel()
	f := newFakeIdP(t, "k1")
	keys, advance := f.keysOnAClock()
	_, err := keys.Verify(f.sign("k1", staffClaims("ops")))
	require.NoError(t, err)
	require.Equal(t, 1, f.fetchCount())

	advance(RefetchEvery)
	for i := range 50 {
		_, err := keys.Verify(f.sign(fmt.Sprintf("made-up-%d", i), staffClaims("ops")))
		assert.Error(t, err)
	}
	assert.Equal(t, 2, f.fetchCount(), "fifty unknown kids: the first fetches, the others wait for the interval")

	advance(RefetchEvery / 2)
	_, err = keys.Verify(f.sign("made-up-again", staffClaims("ops")))
	assert.Error(t, err)
	assert.Equal(t, 2, f.fetchCount(), "still within the interval: no fetch")

	advance(RefetchEvery)
	_, err = keys.Verify(f.sign("made-up-later", staffClaims("ops")))
	assert.Error(t, err)
	assert.Equal(t, 3, f.fetchCount(), "past the interval: a fetch")
	_, err = keys.Verify(f.sign("k1", staffClaims("ops")))
	assert.NoError(t, err, "a known kid needs no fetch")
	assert.Equal(t, 3, f.fetchCount())
}

// A key the provider publishes later (a rotation) is taken once the interval since the last fetch
// has passed: a token it signs meanwhile is refused, one after it accepted.
func TestIdentityProvider_RotatedKey_TakenAfterTheInterval(t *testing.T) {
	t.Parallel()
	f := newFakeIdP(t, "k1")
	keys, advance := f.keysOnAClock()
	_, err := keys.Verify(f.sign("k1", staffClaims("ops")))
	require.NoError(t, err)
	f.addKey("k2")
	_, err = keys.Verify(f.sign("k2", staffClaims("ops")))
	assert.Error(t, err, "within the interval of the first fetch")
	advance(RefetchEvery + time.Second)
	token := f.sign("k2", staffClaims("ops"))
	var wg sync.WaitGroup
	for range 20 { // at once: one fetch, which the others wait for
		wg.Go(func() {
			p, err := keys.Verify(token)
			if assert.NoError(t, err, "the rotated key, fetched once the interval passed") {
				assert.Equal(t, RoleOps, p.Role)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, 2, f.fetchCount())
}
