package auth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
)

// IdentityProvider verifies the tokens of an OpenID Connect provider: signed RS256 or ES256 with a
// key of its JWKS, named by kid (a kid the set does not hold yet makes it fetch the JWKS again, so
// a rotated key is taken without a restart), from its issuer, for its audience, not expired. The
// role comes from the provider's role claim; sub is the checkout's user id.
type IdentityProvider struct {
	Issuer   string
	Audience string
	verifier *oidc.IDTokenVerifier
}

// NewIdentityProvider verifies tokens of issuer for audience against the keys published at
// jwksURL (fetched when first needed). now is the clock (nil: time.Now).
func NewIdentityProvider(issuer, audience, jwksURL string, now func() time.Time) *IdentityProvider {
	ctx := oidc.ClientContext(context.Background(), &http.Client{Timeout: 10 * time.Second})
	keys := oidc.NewRemoteKeySet(ctx, jwksURL)
	return &IdentityProvider{Issuer: issuer, Audience: audience,
		verifier: oidc.NewVerifier(issuer, keys, &oidc.Config{ClientID: audience,
			SupportedSigningAlgs: []string{oidc.RS256, oidc.ES256}, Now: now})}
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

// hmacAllows: an HS256 token of role may be accepted (HMACRoles nil: every role).
func (k Keys) hmacAllows(role string) bool {
	return k.HMACRoles == nil || slices.Contains(k.HMACRoles, role)
}
