package auth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"
)

// IdentityProvider verifies the tokens of an OpenID Connect provider: signed RS256 or ES256 with a
// key of its JWKS, named by kid, from its issuer, for its audience, not expired. A kid the set
// does not hold yet makes it fetch the JWKS again, so a rotated key is taken without a restart;
// at most once per RefetchEvery, so that tokens naming made-up kids cannot make every request a
// fetch (a kid still unknown after a fetch is refused without another until the interval has
// passed). The role comes from the provider's role claim; sub is the checkout's user id.
type IdentityProvider struct {
	Issuer   string
	Audience string
	verifier *oidc.IDTokenVerifier
}

// RefetchEvery is the shortest time between two fetches of a provider's JWKS.
const RefetchEvery = 10 * time.Second

// NewIdentityProvider verifies tokens of issuer for audience against the keys published at
// jwksURL (fetched when first needed). now is the clock (nil: time.Now).
func NewIdentityProvider(issuer, audience, jwksURL string, now func() time.Time) *IdentityProvider {
	if now == nil {
		now = time.Now
	}
	keys := &jwks{url: jwksURL, client: &http.Client{Timeout: 10 * time.Second}, now: now, every: RefetchEvery}
	return &IdentityProvider{Issuer: issuer, Audience: audience,
		verifier: oidc.NewVerifier(issuer, keys, &oidc.Config{ClientID: audience,
			SupportedSigningAlgs: []string{oidc.RS256, oidc.ES256}, Now: now})}
}

// jwks is a provider's key set as last fetched, fetched again for a kid it lacks, no more often
// than every.
type jwks struct {
	url    string
	client *http.Client
	now    func() time.Time
	every  time.Duration

	mu       sync.Mutex
	keys     []jose.JSONWebKey
	fetched  time.Time     // when the last fetch began (zero: never)
	inflight chan struct{} // closed when the fetch under way ends (nil: none)
}

var _ oidc.KeySet = (*jwks)(nil)

// VerifySignature is oidc.KeySet's: the token's signature by the key its kid names.
func (s *jwks) VerifySignature(ctx context.Context, token string) ([]byte, error) {
	jws, err := jose.ParseSigned(token, []jose.SignatureAlgorithm{jose.RS256, jose.ES256})
	if err != nil {
		return nil, fmt.Errorf("malformed token: %w", err)
	}
	if len(jws.Signatures) != 1 {
		return nil, errors.New("a token has one signature")
	}
	kid := jws.Signatures[0].Header.KeyID
	key, err := s.key(ctx, kid)
	if err != nil {
		return nil, err
	}
	return jws.Verify(key)
}

// key is the key of kid: from the set held, else from a new fetch when the last began longer
// than every ago. Callers of kids the set holds never wait for a fetch; those of a kid it lacks
// while a fetch is under way wait for that one.
func (s *jwks) key(ctx context.Context, kid string) (*jose.JSONWebKey, error) {
	s.mu.Lock()
	if k := findKey(s.keys, kid); k != nil {
		s.mu.Unlock()
		return k, nil
	}
	if wait := s.inflight; wait != nil {
		s.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if k := findKey(s.keys, kid); k != nil {
			return k, nil
		}
		return nil, fmt.Errorf("no key %q in the provider's JWKS", kid)
	}
	if !s.fetched.IsZero() && s.now().Sub(s.fetched) < s.every {
		s.mu.Unlock()
		return nil, fmt.Errorf("no key %q in the provider's JWKS (fetched again at most every %s)", kid, s.every)
	}
	// A failed fetch waits its turn too: a provider down is not asked on every request.
	done := make(chan struct{})
	s.inflight, s.fetched = done, s.now()
	s.mu.Unlock()

	keys, err := s.fetch(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight = nil
	close(done)
	if err != nil {
		return nil, fmt.Errorf("the provider's JWKS: %w", err)
	}
	s.keys = keys
	if k := findKey(keys, kid); k != nil {
		return k, nil
	}
	return nil, fmt.Errorf("no key %q in the provider's JWKS", kid)
}

func findKey(keys []jose.JSONWebKey, kid string) *jose.JSONWebKey {
	for i := range keys {
		if keys[i].KeyID == kid && keys[i].Use != "enc" {
			return &keys[i]
		}
	}
	return nil
}

func (s *jwks) fetch(ctx context.Context) ([]jose.JSONWebKey, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s", s.url, resp.Status)
	}
	var set jose.JSONWebKeySet
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&set); err != nil {
		return nil, fmt.Errorf("%s: %w", s.url, err)
	}
	return set.Keys, nil
}

// providerClaims are the claims the checkout reads from a provider's token.
type providerClaims struct {
	Role     string   `json:"role"`
	Name     string   `json:"name"`
	SellerID sellerID `json:"seller_id"`
	IssuedAt *int64   `json:"iat"`
}

func (p *IdentityProvider) verify(token string, maxLifetime time.Duration, now time.Time) (Principal, time.Time, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t, err := p.verifier.Verify(ctx, token)
	if err != nil {
		return Principal{}, time.Time{}, err
	}
	var c providerClaims
	if err := t.Claims(&c); err != nil {
		return Principal{}, time.Time{}, err
	}
	if maxLifetime > 0 {
		start := now
		if c.IssuedAt != nil {
			start = time.Unix(*c.IssuedAt, 0)
		}
		if t.Expiry.Sub(start) > maxLifetime+leeway || t.Expiry.Sub(now) > maxLifetime+leeway {
			return Principal{}, time.Time{}, fmt.Errorf("the token lives longer than %s", maxLifetime)
		}
	}
	uid, err := strconv.ParseInt(t.Subject, 10, 64)
	if err != nil || uid <= 0 {
		return Principal{}, time.Time{}, errors.New("sub must be a positive decimal user id")
	}
	if !ValidRole(c.Role) {
		return Principal{}, time.Time{}, fmt.Errorf("unknown role %q", c.Role)
	}
	pr := Principal{UserID: uid, Role: c.Role, Name: c.Name}
	if c.Role == RoleSeller {
		if pr.SellerID, err = strconv.ParseInt(string(c.SellerID), 10, 64); err != nil || pr.SellerID <= 0 {
			return Principal{}, time.Time{}, errors.New("a seller token needs a seller_id")
		}
	}
	return pr, t.Expiry, nil
}

// tokenAlg is the alg a JWT's header names ("" when it is no JWT).
func tokenAlg(token string) string {
	head, _, ok := strings.Cut(token, ".")
	if !ok {
		return ""
	}
	raw, err := base64.RawURLEncoding.DecodeString(head)
	if err != nil {
		return ""
	}
	var h struct {
		Alg string `json:"alg"`
	}
	if json.Unmarshal(raw, &h) != nil {
		return ""
	}
	return h.Alg
}
