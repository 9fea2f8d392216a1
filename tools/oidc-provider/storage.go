package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// storage is what the OpenID provider of zitadel/oidc asks of us: the one client people sign in
// to (the Temporal UI), the people (users.json), the programs (machines.json: sellers' ERPs and
// shopper keys, machines.go), the signing keys (keys/) and the sign-ins under way. Sign-ins
// under way live in memory, for authRequestTTL: a restart of the provider costs only the sign-ins
// half done. Tokens are JWTs that verifiers check against the JWKS, so none is stored; no refresh
// tokens are issued (a person signs in again when the token ends).
type storage struct {
	dir      string
	client   *client
	keys     *keyRing
	tokenTTL time.Duration
	now      func() time.Time

	mu       sync.Mutex
	requests map[string]*authRequest
	codes    map[string]string // code -> request id
}

const authRequestTTL = 10 * time.Minute

var _ op.Storage = (*storage)(nil)
var _ op.CanSetUserinfoFromRequest = (*storage)(nil)

// authRequest is one sign-in under way, from /authorize to the code's exchange.
type authRequest struct {
	id       string
	created  time.Time
	req      oidc.AuthRequest
	subject  string
	authTime time.Time
	done     bool
}

func (a *authRequest) GetID() string                      { return a.id }
func (a *authRequest) GetACR() string                     { return "" }
func (a *authRequest) GetAMR() []string                   { return []string{"pwd"} }
func (a *authRequest) GetAudience() []string              { return []string{a.req.ClientID} }
func (a *authRequest) GetAuthTime() time.Time             { return a.authTime }
func (a *authRequest) GetClientID() string                { return a.req.ClientID }
func (a *authRequest) GetNonce() string                   { return a.req.Nonce }
func (a *authRequest) GetRedirectURI() string             { return a.req.RedirectURI }
func (a *authRequest) GetResponseType() oidc.ResponseType { return a.req.ResponseType }
func (a *authRequest) GetResponseMode() oidc.ResponseMode { return a.req.ResponseMode }
func (a *authRequest) GetScopes() []string                { return a.req.Scopes }
func (a *authRequest) GetState() string                   { return a.req.State }
func (a *authRequest) GetSubject() string                 { return a.subject }
func (a *authRequest) Done() bool                         { return a.done }
func (a *authRequest) GetCodeChallenge() *oidc.CodeChallenge {
	if a.req.CodeChallenge == "" {
		return nil
	}
	return &oidc.CodeChallenge{Challenge: a.req.CodeChallenge, Method: a.req.CodeChallengeMethod}
}

func newID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

type notFound struct{ what string }

func (e notFound) Error() string { return e.what + " not found" }
func (notFound) IsNotFound()     {}

// expire drops sign-ins older than authRequestTTL; the caller holds mu.
func (s *storage) expire() {
	for id, r := range s.requests {
		if s.now().Sub(r.created) > authRequestTTL {
			delete(s.requests, id)
		}
	}
	for code, id := range s.codes {
		if _, ok := s.requests[id]; !ok {
			delete(s.codes, code)
		}
	}
}

func (s *storage) CreateAuthRequest(_ context.Context, req *oidc.AuthRequest, _ string) (op.AuthRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire()
	if len(s.requests) >= 10_000 {
		return nil, oidc.ErrServerError().WithDescription("too many sign-ins under way")
	}
	r := &authRequest{id: newID(), created: s.now(), req: *req}
	s.requests[r.id] = r
	return r, nil
}

func (s *storage) AuthRequestByID(_ context.Context, id string) (op.AuthRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire()
	r, ok := s.requests[id]
	if !ok {
		return nil, notFound{"sign-in"}
	}
	return r, nil
}

func (s *storage) AuthRequestByCode(_ context.Context, code string) (op.AuthRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire()
	r, ok := s.requests[s.codes[code]]
	if !ok {
		return nil, notFound{"code"}
	}
	return r, nil
}

func (s *storage) SaveAuthCode(_ context.Context, id, code string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.requests[id]; !ok {
		return notFound{"sign-in"}
	}
	s.codes[code] = id
	return nil
}

// DeleteAuthRequest ends a sign-in once its code is exchanged: a code is good once.
func (s *storage) DeleteAuthRequest(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.requests, id)
	for code, rid := range s.codes {
		if rid == id {
			delete(s.codes, code)
		}
	}
	return nil
}

// completeLogin marks a sign-in done for the person sub.
func (s *storage) completeLogin(id, sub string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.requests[id]
	if !ok {
		return notFound{"sign-in"}
	}
	r.subject, r.authTime, r.done = sub, s.now(), true
	return nil
}

// CreateAccessToken names a token and says when it ends: a person's after OIDC_TOKEN_TTL, a
// program's (machines.go) sooner.
func (s *storage) CreateAccessToken(_ context.Context, req op.TokenRequest) (string, time.Time, error) {
	switch req.(type) {
	case *sellerRequest, *oidc.JWTTokenRequest:
		return newID(), s.now().Add(s.machineTTL()), nil
	}
	return newID(), s.now().Add(s.tokenTTL), nil
}

var errNoRefresh = errors.New("this provider issues no refresh tokens: sign in again")

func (s *storage) CreateAccessAndRefreshTokens(context.Context, op.TokenRequest, string) (string, string, time.Time, error) {
	return "", "", time.Time{}, errNoRefresh
}

func (s *storage) TokenRequestByRefreshToken(context.Context, string) (op.RefreshTokenRequest, error) {
	return nil, op.ErrInvalidRefreshToken
}

func (s *storage) TerminateSession(context.Context, string, string) error { return nil }

func (s *storage) RevokeToken(context.Context, string, string, string) *oidc.Error {
	return oidc.ErrRequestNotSupported().WithDescription("tokens are short-lived JWTs and cannot be revoked")
}

func (s *storage) GetRefreshTokenInfo(context.Context, string, string) (string, string, error) {
	return "", "", op.ErrInvalidRefreshToken
}

func (s *storage) SigningKey(context.Context) (op.SigningKey, error) { return s.keys.signing() }

func (s *storage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256}, nil
}

func (s *storage) KeySet(context.Context) ([]op.Key, error) {
	keys, err := s.keys.all()
	if err != nil {
		return nil, err
	}
	out := make([]op.Key, len(keys))
	for i, k := range keys {
		out[i] = publicKey{k}
	}
	return out, nil
}

func (s *storage) GetClientByClientID(_ context.Context, id string) (op.Client, error) {
	if id != s.client.id {
		return nil, notFound{"client"}
	}
	return s.client, nil
}

func (s *storage) AuthorizeClientIDSecret(_ context.Context, id, secret string) error {
	if id != s.client.id || !s.client.secretIs(secret) {
		return errors.New("unknown client or wrong secret")
	}
	return nil
}

// SetUserinfoFromScopes is deprecated upstream in favour of SetUserinfoFromRequest.
func (s *storage) SetUserinfoFromScopes(context.Context, *oidc.UserInfo, string, string, []string) error {
	return nil
}

// SetUserinfoFromRequest fills the ID token: the person's name and, always, their role.
func (s *storage) SetUserinfoFromRequest(_ context.Context, info *oidc.UserInfo, req op.IDTokenRequest, _ []string) error {
	return s.userinfo(info, req.GetSubject())
}

func (s *storage) SetUserinfoFromToken(_ context.Context, info *oidc.UserInfo, _, sub, _ string) error {
	return s.userinfo(info, sub)
}

func (s *storage) userinfo(info *oidc.UserInfo, sub string) error {
	u, ok, err := userBySubject(s.dir, sub)
	if err != nil {
		return err
	}
	if !ok {
		return notFound{"person"}
	}
	info.Subject = u.Subject
	info.Name = u.DisplayName
	info.PreferredUsername = u.Name
	info.AppendClaims(roleClaim, u.Role)
	return nil
}

func (s *storage) SetIntrospectionFromToken(context.Context, *oidc.IntrospectionResponse, string, string, string) error {
	return errors.New("no introspection: verify the JWT against the JWKS")
}

// GetPrivateClaimsFromScopes fills the access token (a JWT): the role, the name and the user
// name, which Temporal's claim mapper and the API read.
func (s *storage) GetPrivateClaimsFromScopes(_ context.Context, sub, _ string, _ []string) (map[string]any, error) {
	u, ok, err := userBySubject(s.dir, sub)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, notFound{"person"}
	}
	return map[string]any{roleClaim: u.Role, "name": u.DisplayName, "preferred_username": u.Name}, nil
}

func (s *storage) Health(context.Context) error {
	_, err := s.keys.signing()
	return err
}

// roleClaim is the claim the checkout reads a person's role from (Temporal's claim mapper in
// tools/temporal-server, the API's verifier): support, ops, shopper or seller.
const roleClaim = "role"
