package attack

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/marketplace/checkout/internal/auth"
)

// forged is a token made by hand: claims, header extras, the method and the key.
type forged struct {
	claims jwt.MapClaims
	header map[string]any
	method jwt.SigningMethod
	key    any
}

// shopperClaims are a valid shopper's claims for the target, valid an hour.
func (r *Run) shopperClaims(n int64) jwt.MapClaims {
	now := time.Now()
	c := jwt.MapClaims{"sub": strconv.FormatInt(r.user(n), 10), "role": auth.RoleShopper,
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	if r.T.Keys.Issuer != "" {
		c["iss"] = r.T.Keys.Issuer
	}
	if r.T.Keys.Audience != "" {
		c["aud"] = r.T.Keys.Audience
	}
	return c
}

// sign makes the forged token with the target's key unless another is given, HS256 unless another
// method is.
func (r *Run) sign(f forged) string {
	method, key := f.method, f.key
	if method == nil {
		method = jwt.SigningMethodHS256
	}
	if key == nil {
		key = r.T.Keys.Signing.Secret
	}
	t := jwt.NewWithClaims(method, f.claims)
	if r.T.Keys.Signing.ID != "" {
		t.Header["kid"] = r.T.Keys.Signing.ID
	}
	for k, v := range f.header {
		t.Header[k] = v
	}
	s, err := t.SignedString(key)
	if err != nil {
		panic("forging a token: " + err.Error())
	}
	return s
}

// tokenRefused: a request with the token to a shopper's endpoint is 401 UNAUTHORIZED.
func (r *Run) tokenRefused(ctx context.Context, token string) Outcome {
	a, err := r.call(ctx, http.MethodGet, "/api/v1/addresses", token, nil)
	return refused(a, err, http.StatusUnauthorized, "UNAUTHORIZED")
}

// forgeAttack is an attack with a token forged from a valid shopper's claims by change.
func forgeAttack(name, what string, change func(r *Run, f *forged) (skipWhy string)) Attack {
	return Attack{Name: name, Kind: KindAPI, What: what, Run: func(ctx context.Context, r *Run) Outcome {
		f := forged{claims: r.shopperClaims(1)}
		if why := change(r, &f); why != "" {
			return skip("%s", why)
		}
		return r.tokenRefused(ctx, r.sign(f))
	}}
}

var tokenAttacks = []Attack{
	{Name: "token-alg-none", Kind: KindAPI, What: "an unsigned token (alg none) is 401",
		Run: func(ctx context.Context, r *Run) Outcome {
			t := jwt.NewWithClaims(jwt.SigningMethodNone, r.shopperClaims(1))
			s, err := t.SignedString(jwt.UnsafeAllowNoneSignatureType)
			if err != nil {
				return failed("forging", err)
			}
			return r.tokenRefused(ctx, s)
		}},
	forgeAttack("token-wrong-key", "a token signed with another key is 401", func(_ *Run, f *forged) string {
		key := make([]byte, 32)
		_, _ = rand.Read(key)
		f.key = key
		return ""
	}),
	forgeAttack("token-other-algorithm", "a token signed with the right key but HS512 (only HS256 is accepted) is 401",
		func(_ *Run, f *forged) string {
			f.method = jwt.SigningMethodHS512
			return ""
		}),
	forgeAttack("token-expired", "a token that expired an hour ago is 401", func(_ *Run, f *forged) string {
		f.claims["iat"] = time.Now().Add(-2 * time.Hour).Unix()
		f.claims["exp"] = time.Now().Add(-time.Hour).Unix()
		return ""
	}),
	forgeAttack("token-no-expiry", "a token without exp is 401", func(_ *Run, f *forged) string {
		delete(f.claims, "exp")
		return ""
	}),
	forgeAttack("token-over-long-lifetime", "a token valid for ten years is 401 (AUTH_JWT_MAX_LIFETIME)", func(_ *Run, f *forged) string {
		f.claims["exp"] = time.Now().Add(10 * 365 * 24 * time.Hour).Unix()
		return ""
	}),
	forgeAttack("token-foreign-issuer", "a token of another issuer is 401", func(r *Run, f *forged) string {
		if r.T.Keys.Issuer == "" {
			return r.T.Name + " checks no issuer on its HS256 tokens (AUTH_JWT_ISSUER unset): nothing to forge"
		}
		f.claims["iss"] = "https://attacker.example"
		return ""
	}),
	forgeAttack("token-foreign-audience", "a token for another audience is 401", func(r *Run, f *forged) string {
		if r.T.Keys.Audience == "" {
			return r.T.Name + " checks no audience on its HS256 tokens (AUTH_JWT_AUDIENCE unset): nothing to forge"
		}
		f.claims["aud"] = "another-service"
		return ""
	}),
	forgeAttack("token-missing-sub", "a token without sub is 401", func(_ *Run, f *forged) string {
		delete(f.claims, "sub")
		return ""
	}),
	forgeAttack("token-sub-not-a-user-id", "a token whose sub is no positive decimal id is 401", func(_ *Run, f *forged) string {
		f.claims["sub"] = "7 OR 1=1"
		return ""
	}),
	forgeAttack("token-unknown-role", "a token with a role the API does not have (admin) is 401", func(_ *Run, f *forged) string {
		f.claims["role"] = "admin"
		return ""
	}),
	forgeAttack("token-unknown-kid", "a token naming a key id the target does not hold is 401", func(_ *Run, f *forged) string {
		f.header = map[string]any{"kid": "attacker-key"}
		return ""
	}),
	{Name: "token-staff-shared-secret", Kind: KindAPI,
		What: "an ops token signed with the shared secret is 401 where staff come from the identity provider alone",
		Run: func(ctx context.Context, r *Run) Outcome {
			if r.T.StaffIssuer == "" {
				return skip("%s takes staff tokens of the shared secret (dev): nothing to forge", r.T.Name)
			}
			a, err := r.call(ctx, http.MethodGet, "/api/v1/ops/features", r.mint(auth.Principal{UserID: r.user(902), Role: auth.RoleOps}), nil)
			return refused(a, err, http.StatusUnauthorized, "UNAUTHORIZED")
		}},
	{Name: "token-shared-secret", Kind: KindAPI,
		What: "a shopper's and a seller's token signed with the shared secret are 401 where tokens come from the identity provider alone",
		Run: func(ctx context.Context, r *Run) Outcome {
			if r.T.StaffIssuer == "" {
				return skip("%s takes tokens of the shared secret (dev): nothing to forge", r.T.Name)
			}
			a, err := r.call(ctx, http.MethodGet, "/api/v1/addresses", r.mint(auth.Principal{UserID: r.user(1), Role: auth.RoleShopper}), nil)
			if o := refused(a, err, http.StatusUnauthorized, "UNAUTHORIZED"); o.Verdict != Pass {
				return o
			}
			a, err = r.call(ctx, http.MethodGet, "/seller-api/v1/campaigns",
				r.mint(auth.Principal{UserID: 1042, Role: auth.RoleSeller, SellerID: 42}), nil)
			return refused(a, err, http.StatusUnauthorized, "UNAUTHORIZED")
		}},
	{Name: "token-staff-foreign-key", Kind: KindAPI,
		What: "an ops token in the provider's name, RS256 with a key not in its JWKS, is 401",
		Run: func(ctx context.Context, r *Run) Outcome {
			if r.T.StaffIssuer == "" {
				return skip("%s has no identity provider: nothing to forge", r.T.Name)
			}
			key, err := rsa.GenerateKey(rand.Reader, 2048)
			if err != nil {
				return failed("a key", err)
			}
			now := time.Now()
			t := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"sub": "902", "role": auth.RoleOps,
				"iss": r.T.StaffIssuer, "aud": r.T.StaffAudience, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()})
			t.Header["kid"] = "attacker-key"
			s, err := t.SignedString(key)
			if err != nil {
				return failed("forging", err)
			}
			a, err := r.call(ctx, http.MethodGet, "/api/v1/ops/features", s, nil)
			return refused(a, err, http.StatusUnauthorized, "UNAUTHORIZED")
		}},
	{Name: "token-claims-changed", Kind: KindAPI, What: "a shopper's valid token with its role rewritten to ops (signature kept) is 401",
		Run: func(ctx context.Context, r *Run) Outcome {
			parts := strings.Split(r.shopper(1), ".")
			if len(parts) != 3 {
				return fail("not a JWT")
			}
			raw, err := base64.RawURLEncoding.DecodeString(parts[1])
			if err != nil {
				return failed("reading the token", err)
			}
			var c map[string]any
			if err := json.Unmarshal(raw, &c); err != nil {
				return failed("reading the token", err)
			}
			c["role"] = auth.RoleOps
			changed, _ := json.Marshal(c)
			parts[1] = base64.RawURLEncoding.EncodeToString(changed)
			a, err := r.call(ctx, http.MethodGet, "/api/v1/ops/features", strings.Join(parts, "."), nil)
			return refused(a, err, http.StatusUnauthorized, "UNAUTHORIZED")
		}},
}
