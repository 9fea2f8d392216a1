package main

import (
	"context"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// Besides people, the provider issues tokens to programs, through two OAuth grants of zitadel/oidc
// (<dir>/machines.json, read again at each request, written by `oidc-provider seller` and
// `oidc-provider shopper-key`):
//
//   - a seller's ERP is a confidential client with the client_credentials grant (RFC 6749 4.4):
//     its client id and secret get a token whose sub is the seller's user id, with role seller and
//     the seller_id the API reads;
//   - a trusted program that acts for many shoppers (a load generator) holds a key registered
//     for it, and signs an assertion per shopper for the JWT-profile grant (RFC 7523,
//     urn:ietf:params:oauth:grant-type:jwt-bearer). zitadel/oidc's grant takes the assertion's
//     iss as the client and requires sub to equal it, so the assertion names the shopper in both,
//     and the key answers for a kid and a subject: only a decimal user id at or above the key's
//     minSubject and of no person of users.json. The token is the shopper's: role shopper, always.
//
// Both tokens are JWT access tokens signed with the provider's key, for machineTokenTTL, for the
// audience of the provider's other tokens (OIDC_CLIENT_ID, which the API verifies).
const machinesFile = "machines.json"

// machineTokenTTL is how long a program's token lives (at most OIDC_TOKEN_TTL): short, for a program
// asks again whenever it needs one.
const machineTokenTTL = 10 * time.Minute

// maxAssertionLifetime bounds an assertion's exp - iat: an assertion is made for one request.
const maxAssertionLifetime = 10 * time.Minute

type machines struct {
	Sellers     []sellerClient `json:"sellers"`
	ShopperKeys []shopperKey   `json:"shopperKeys"`
}

// sellerClient is a seller's ERP: its client id, its secret's SHA-256 (a random secret of at
// least 32 bytes: no slow hash needed), the seller's user id (sub) and seller id.
type sellerClient struct {
	ClientID     string `json:"clientId"`
	SecretSHA256 string `json:"secretSha256"`
	Subject      string `json:"sub"`
	SellerID     string `json:"sellerId"`
}

// shopperKey is a program's public key (PKIX PEM, RSA) that may assert shopper subjects from
// MinSubject up.
type shopperKey struct {
	KeyID      string `json:"kid"`
	PublicKey  string `json:"publicKey"`
	MinSubject int64  `json:"minSubject"`
}

func readMachines(dir string) (machines, error) {
	var m machines
	raw, err := os.ReadFile(filepath.Join(dir, machinesFile))
	if errors.Is(err, os.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return m, fmt.Errorf("%s: %w", machinesFile, err)
	}
	return m, nil
}

// changeMachines applies change to the file and writes it whole (owner-only).
func changeMachines(dir string, change func(*machines) error) error {
	m, err := readMachines(dir)
	if err != nil {
		return err
	}
	if err := change(&m); err != nil {
		return err
	}
	raw, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(dir, machinesFile, raw)
}

// putSeller adds the client of a seller's ERP, or replaces the one of that client id.
func putSeller(dir string, c sellerClient, secret string) error {
	if len(secret) < 32 {
		return errors.New("a client secret of at least 32 bytes is required")
	}
	for what, v := range map[string]string{"sub": c.Subject, "seller": c.SellerID} {
		if id, err := strconv.ParseInt(v, 10, 64); err != nil || id <= 0 {
			return fmt.Errorf("--%s %q: a positive decimal id", what, v)
		}
	}
	if c.ClientID == "" {
		return errors.New("--client-id is required")
	}
	sum := sha256.Sum256([]byte(secret))
	c.SecretSHA256 = hex.EncodeToString(sum[:])
	return changeMachines(dir, func(m *machines) error {
		m.Sellers = slices.DeleteFunc(m.Sellers, func(o sellerClient) bool { return o.ClientID == c.ClientID })
		m.Sellers = append(m.Sellers, c)
		return nil
	})
}

// putShopperKey registers a public key (PEM) for the JWT-profile grant, or replaces the one of
// that kid.
func putShopperKey(dir string, k shopperKey) error {
	if k.KeyID == "" {
		return errors.New("--kid is required")
	}
	if k.MinSubject < 1 {
		return errors.New("--min-subject: a positive user id")
	}
	if _, err := parsePublicKey(k.PublicKey); err != nil {
		return err
	}
	return changeMachines(dir, func(m *machines) error {
		m.ShopperKeys = slices.DeleteFunc(m.ShopperKeys, func(o shopperKey) bool { return o.KeyID == k.KeyID })
		m.ShopperKeys = append(m.ShopperKeys, k)
		return nil
	})
}

func parsePublicKey(p string) (*rsa.PublicKey, error) {
	block, _ := pem.Decode([]byte(p))
	if block == nil {
		return nil, errors.New("the public key: no PEM block")
	}
	parsed, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("the public key: %w", err)
	}
	k, ok := parsed.(*rsa.PublicKey)
	if !ok {
		return nil, errors.New("the public key: not an RSA key (assertions are RS256)")
	}
	return k, nil
}

// sellerApp is a seller's ERP as zitadel/oidc's client: the client_credentials grant only.
type sellerApp struct {
	sellerClient
	tokenTTL time.Duration
}

var _ op.Client = (*sellerApp)(nil)

func (c *sellerApp) GetID() string                       { return c.ClientID }
func (c *sellerApp) RedirectURIs() []string              { return nil }
func (c *sellerApp) PostLogoutRedirectURIs() []string    { return nil }
func (c *sellerApp) ApplicationType() op.ApplicationType { return op.ApplicationTypeWeb }
func (c *sellerApp) AuthMethod() oidc.AuthMethod         { return oidc.AuthMethodBasic }
func (c *sellerApp) ResponseTypes() []oidc.ResponseType  { return nil }
func (c *sellerApp) GrantTypes() []oidc.GrantType {
	return []oidc.GrantType{oidc.GrantTypeClientCredentials}
}
func (c *sellerApp) LoginURL(string) string               { return "" }
func (c *sellerApp) AccessTokenType() op.AccessTokenType  { return op.AccessTokenTypeJWT }
func (c *sellerApp) IDTokenLifetime() time.Duration       { return c.tokenTTL }
func (c *sellerApp) DevMode() bool                        { return false }
func (c *sellerApp) ClockSkew() time.Duration             { return 0 }
func (c *sellerApp) IDTokenUserinfoClaimsAssertion() bool { return false }
func (c *sellerApp) IsScopeAllowed(string) bool           { return false }
func (c *sellerApp) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func([]string) []string { return nil }
}
func (c *sellerApp) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func([]string) []string { return nil }
}

// sellerRequest is a seller's token request: the token's subject, audience and claims.
type sellerRequest struct {
	subject, sellerID string
	audience          []string
}

func (r *sellerRequest) GetSubject() string    { return r.subject }
func (r *sellerRequest) GetAudience() []string { return r.audience }
func (r *sellerRequest) GetScopes() []string   { return nil }

var (
	_ op.ClientCredentialsStorage       = (*storage)(nil)
	_ op.JWTProfileTokenStorage         = (*storage)(nil)
	_ op.CanGetPrivateClaimsFromRequest = (*storage)(nil)
)

// ClientCredentials authenticates a seller's ERP by its secret.
func (s *storage) ClientCredentials(_ context.Context, clientID, secret string) (op.Client, error) {
	m, err := readMachines(s.dir)
	if err != nil {
		return nil, oidc.ErrServerError().WithParent(err)
	}
	sum := sha256.Sum256([]byte(secret))
	for _, c := range m.Sellers {
		want, err := hex.DecodeString(c.SecretSHA256)
		if c.ClientID == clientID && err == nil && subtle.ConstantTimeCompare(sum[:], want) == 1 {
			return &sellerApp{sellerClient: c, tokenTTL: s.machineTTL()}, nil
		}
	}
	return nil, errors.New("unknown client or wrong secret")
}

// ClientCredentialsTokenRequest is the seller's token: its user id, for the API's audience.
func (s *storage) ClientCredentialsTokenRequest(_ context.Context, clientID string, _ []string) (op.TokenRequest, error) {
	m, err := readMachines(s.dir)
	if err != nil {
		return nil, oidc.ErrServerError().WithParent(err)
	}
	for _, c := range m.Sellers {
		if c.ClientID == clientID {
			return &sellerRequest{subject: c.Subject, sellerID: c.SellerID, audience: []string{s.client.id}}, nil
		}
	}
	return nil, oidc.ErrInvalidClient()
}

// GetKeyByIDAndClientID is the key that verifies a JWT-profile assertion: a registered key of that
// kid, when the assertion's issuer (its subject too) is a shopper the key may assert.
func (s *storage) GetKeyByIDAndClientID(_ context.Context, kid, clientID string) (*jose.JSONWebKey, error) {
	m, err := readMachines(s.dir)
	if err != nil {
		return nil, err
	}
	for _, k := range m.ShopperKeys {
		if k.KeyID != kid {
			continue
		}
		if err := s.shopperSubject(k, clientID); err != nil {
			return nil, err
		}
		pub, err := parsePublicKey(k.PublicKey)
		if err != nil {
			return nil, err
		}
		return &jose.JSONWebKey{Key: pub, KeyID: k.KeyID, Algorithm: string(jose.RS256), Use: "sig"}, nil
	}
	return nil, fmt.Errorf("no key %q for the JWT-profile grant", kid)
}

// shopperSubject: sub is a shopper the key may assert, a decimal user id from its minSubject up
// that no person has.
func (s *storage) shopperSubject(k shopperKey, sub string) error {
	id, err := strconv.ParseInt(sub, 10, 64)
	if err != nil || strconv.FormatInt(id, 10) != sub || id < k.MinSubject {
		return fmt.Errorf("key %s asserts shoppers %d and up only, not %q", k.KeyID, k.MinSubject, sub)
	}
	if _, person, err := userBySubject(s.dir, sub); err != nil || person {
		return fmt.Errorf("key %s asserts no person's subject (%s)", k.KeyID, sub)
	}
	return nil
}

// ValidateJWTProfileScopes grants no scope: the token's claims say all.
func (s *storage) ValidateJWTProfileScopes(context.Context, string, []string) ([]string, error) {
	return []string{}, nil
}

// JWTProfileTokenType: the JWT-profile grant's access token is a JWT, as every token here.
func (s *storage) JWTProfileTokenType(context.Context, op.TokenRequest) (op.AccessTokenType, error) {
	return op.AccessTokenTypeJWT, nil
}

// GetPrivateClaimsFromRequest fills an access token: a seller's role and seller id; a shopper's
// role (after checking the assertion's audience and lifetime); a person's claims otherwise.
func (s *storage) GetPrivateClaimsFromRequest(ctx context.Context, req op.TokenRequest, scopes []string) (map[string]any, error) {
	switch r := req.(type) {
	case *sellerRequest:
		return map[string]any{roleClaim: "seller", "seller_id": r.sellerID}, nil
	case *oidc.JWTTokenRequest:
		issuer := op.IssuerFromContext(ctx)
		for _, aud := range r.Audience {
			if aud != issuer && aud != s.client.id {
				return nil, oidc.ErrInvalidRequest().WithDescription("the assertion's audience: this provider and %s only", s.client.id)
			}
		}
		if !slices.Contains(r.Audience, s.client.id) {
			return nil, oidc.ErrInvalidRequest().WithDescription("the assertion's audience must name %s, the tokens' audience", s.client.id)
		}
		if r.ExpiresAt.AsTime().Sub(r.IssuedAt.AsTime()) > maxAssertionLifetime {
			return nil, oidc.ErrInvalidRequest().WithDescription("an assertion lives %s at most", maxAssertionLifetime)
		}
		return map[string]any{roleClaim: "shopper"}, nil
	}
	return s.GetPrivateClaimsFromScopes(ctx, req.GetSubject(), "", scopes)
}

// machineTTL is machineTokenTTL, or OIDC_TOKEN_TTL when that is shorter.
func (s *storage) machineTTL() time.Duration { return min(machineTokenTTL, s.tokenTTL) }
