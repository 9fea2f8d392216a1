package main

import (
	"crypto/sha256"
	"crypto/subtle"
	"slices"
	"time"

	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// client is the provider's one relying party, the Temporal UI: a confidential web client that
// signs people in with the authorization code flow and its secret, and gets JWT access tokens for
// its own audience (its client id), which it forwards to Temporal and to the codec endpoint.
type client struct {
	id           string
	secretSum    [32]byte
	redirectURIs []string
	tokenTTL     time.Duration
}

var _ op.Client = (*client)(nil)

func newClient(id, secret string, redirects []string, ttl time.Duration) *client {
	return &client{id: id, secretSum: sha256.Sum256([]byte(secret)), redirectURIs: redirects, tokenTTL: ttl}
}

func (c *client) secretIs(secret string) bool {
	sum := sha256.Sum256([]byte(secret))
	return subtle.ConstantTimeCompare(sum[:], c.secretSum[:]) == 1
}

func (c *client) GetID() string                       { return c.id }
func (c *client) RedirectURIs() []string              { return slices.Clone(c.redirectURIs) }
func (c *client) PostLogoutRedirectURIs() []string    { return nil }
func (c *client) ApplicationType() op.ApplicationType { return op.ApplicationTypeWeb }
func (c *client) AuthMethod() oidc.AuthMethod         { return oidc.AuthMethodBasic }
func (c *client) ResponseTypes() []oidc.ResponseType {
	return []oidc.ResponseType{oidc.ResponseTypeCode}
}
func (c *client) GrantTypes() []oidc.GrantType        { return []oidc.GrantType{oidc.GrantTypeCode} }
func (c *client) LoginURL(id string) string           { return loginPath + "?authRequestID=" + id }
func (c *client) AccessTokenType() op.AccessTokenType { return op.AccessTokenTypeJWT }
func (c *client) IDTokenLifetime() time.Duration      { return c.tokenTTL }
func (c *client) DevMode() bool                       { return false }
func (c *client) ClockSkew() time.Duration            { return 0 }

// The ID token carries the person's claims itself (the UI reads the name from it).
func (c *client) IDTokenUserinfoClaimsAssertion() bool { return true }

func (c *client) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}

func (c *client) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}

func (c *client) IsScopeAllowed(string) bool { return false }
