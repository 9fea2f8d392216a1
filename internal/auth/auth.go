// Package auth mints and verifies the API's bearer tokens: JWTs with the user id in sub, a role,
// and a seller id for sellers; RS256 or ES256 from the identity provider's JWKS (IdentityProvider),
// HS256 with the shared secret for `checkout-dev dev` and tests only: keys with a provider take no
// HS256 token at all.
package auth

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Roles of the API.
const (
	RoleShopper = "shopper"
	RoleSeller  = "seller"
	RoleSupport = "support"
	RoleOps     = "ops"
)

// ValidRole reports whether r is one of the roles.
func ValidRole(r string) bool {
	switch r {
	case RoleShopper, RoleSeller, RoleSupport, RoleOps:
		return true
	}
	return false
}

// Principal is who a verified token speaks for.
type Principal struct {
	UserID   int64
	Role     string
	SellerID int64
	// Name is the person's name as the identity provider gives it (staff), when it does.
	Name string
}

// Key is one HMAC key tokens are signed with; ID is its kid (empty: tokens without a kid).
type Key struct {
	ID     string
	Secret []byte
}

// Keys are how tokens are signed and checked: the signing key, older keys still accepted while
// tokens signed with them live out (a rotation), and, when set, the issuer and audience tokens
// must name and the longest lifetime a token may have. Provider, when set, verifies the identity
// provider's asymmetric tokens, and is then the only source of tokens: the shared secret (Signing,
// Verifying) still mints, for dev and tests, but verifies nothing.
type Keys struct {
	Signing     Key
	Verifying   []Key
	Issuer      string
	Audience    string
	MaxLifetime time.Duration
	Provider    *IdentityProvider

	now func() time.Time // the clock tokens are minted and checked by; nil: time.Now (tests fix it)
}

func (k Keys) clock() time.Time {
	if k.now != nil {
		return k.now()
	}
	return time.Now()
}

// leeway absorbs clock skew between the token's issuer and this process.
const leeway = 30 * time.Second

type claims struct {
	Role     string   `json:"role"`
	SellerID sellerID `json:"seller_id,omitempty"`
	jwt.RegisteredClaims
}

// sellerID is a seller id as identity providers write it: a JSON number or a decimal string.
type sellerID string

func (s *sellerID) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var v string
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		*s = sellerID(v)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return errors.New("seller_id must be a number or a decimal string")
	}
	*s = sellerID(n.String())
	return nil
}

// Mint signs a token for p valid for ttl with a key without kid, issuer or audience (tools and
// tests that know the secret).
func Mint(secret []byte, p Principal, ttl time.Duration) (string, error) {
	return Keys{Signing: Key{Secret: secret}}.Mint(p, ttl)
}

// Verify checks a token signed with a key without kid (see Keys.Verify).
func Verify(secret []byte, token string) (Principal, error) {
	return Keys{Signing: Key{Secret: secret}}.Verify(token)
}

// Mint signs a token for p valid for ttl with the signing key, naming its kid, the issuer and the
// audience.
func (k Keys) Mint(p Principal, ttl time.Duration) (string, error) {
	if !ValidRole(p.Role) {
		return "", fmt.Errorf("unknown role %q", p.Role)
	}
	if p.UserID <= 0 {
		return "", errors.New("user id must be positive")
	}
	if p.Role == RoleSeller && p.SellerID <= 0 {
		return "", errors.New("a seller token needs a seller id")
	}
	if len(k.Signing.Secret) == 0 {
		return "", errors.New("no signing key")
	}
	now := k.clock()
	c := claims{Role: p.Role, RegisteredClaims: jwt.RegisteredClaims{
		Subject:   strconv.FormatInt(p.UserID, 10),
		Issuer:    k.Issuer,
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}}
	if k.Audience != "" {
		c.Audience = jwt.ClaimStrings{k.Audience}
	}
	if p.SellerID > 0 {
		c.SellerID = sellerID(strconv.FormatInt(p.SellerID, 10))
	}
	t := jwt.NewWithClaims(jwt.SigningMethodHS256, c)
	if k.Signing.ID != "" {
		t.Header["kid"] = k.Signing.ID
	}
	return t.SignedString(k.Signing.Secret)
}

// Verify checks the signature (HS256 only, with the key its kid names), expiry and claims of a
// token, and its issuer, audience and lifetime when the keys set them.
func (k Keys) Verify(token string) (Principal, error) {
	p, _, err := k.verify(token)
	return p, err
}

// VerifyUntil is Verify, also returning the token's expiry: for a session that must end when the
// token does.
func (k Keys) VerifyUntil(token string) (Principal, time.Time, error) {
	return k.verify(token)
}

// key is the key of a kid: the signing key or one still accepted.
func (k Keys) key(kid string) ([]byte, bool) {
	if k.Signing.ID == kid && len(k.Signing.Secret) > 0 {
		return k.Signing.Secret, true
	}
	for _, v := range k.Verifying {
		if v.ID == kid && len(v.Secret) > 0 {
			return v.Secret, true
		}
	}
	return nil, false
}

// ErrSharedSecretRefused answers an HS256 token where an identity provider is the only source of
// tokens (every mode but `checkout-dev dev` and tests).
var ErrSharedSecretRefused = errors.New("an HS256 token of the shared secret is refused here: tokens come from the identity provider")

// verify is Verify, also returning the token's expiry: with a provider, its tokens alone, by its
// keys; without one (dev, tests), HS256 ones by ours.
func (k Keys) verify(token string) (Principal, time.Time, error) {
	if k.Provider == nil {
		return k.verifyHMAC(token)
	}
	if tokenAlg(token) == jwt.SigningMethodHS256.Alg() {
		return Principal{}, time.Time{}, ErrSharedSecretRefused
	}
	return k.Provider.verify(token, k.MaxLifetime, k.clock())
}

func (k Keys) verifyHMAC(token string) (Principal, time.Time, error) {
	var c claims
	// Strict base64: a signature whose unused last bits are set decodes to the same bytes, and
	// would make one token valid under several spellings.
	opts := []jwt.ParserOption{jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(), jwt.WithLeeway(leeway), jwt.WithTimeFunc(k.clock), jwt.WithStrictDecoding()}
	if k.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(k.Issuer))
	}
	if k.Audience != "" {
		opts = append(opts, jwt.WithAudience(k.Audience))
	}
	_, err := jwt.ParseWithClaims(token, &c, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		secret, ok := k.key(kid)
		if !ok {
			return nil, fmt.Errorf("no key %q", kid)
		}
		return secret, nil
	}, opts...)
	if err != nil {
		return Principal{}, time.Time{}, err
	}
	exp := c.ExpiresAt.Time
	if k.MaxLifetime > 0 {
		now := k.clock()
		start := now
		if c.IssuedAt != nil {
			start = c.IssuedAt.Time
		}
		if exp.Sub(start) > k.MaxLifetime+leeway || exp.Sub(now) > k.MaxLifetime+leeway {
			return Principal{}, time.Time{}, fmt.Errorf("the token lives longer than %s", k.MaxLifetime)
		}
	}
	uid, err := strconv.ParseInt(c.Subject, 10, 64)
	if err != nil || uid <= 0 {
		return Principal{}, time.Time{}, errors.New("sub must be a positive decimal user id")
	}
	if !ValidRole(c.Role) {
		return Principal{}, time.Time{}, fmt.Errorf("unknown role %q", c.Role)
	}
	p := Principal{UserID: uid, Role: c.Role}
	if c.Role == RoleSeller {
		if p.SellerID, err = strconv.ParseInt(string(c.SellerID), 10, 64); err != nil || p.SellerID <= 0 {
			return Principal{}, time.Time{}, errors.New("a seller token needs a seller_id")
		}
	}
	return p, exp, nil
}
