package cluster

import (
	"context"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Tokens gets the harness's shoppers' and sellers' tokens from the cluster's identity provider,
// whose tokens alone its API takes: a shopper's through the JWT-profile grant, asserted with the
// harness's shopper key (user ids from MinShopperSubject up); a demo seller's through the
// client_credentials grant, as the seller's ERP. It keeps each subject's token until shortly
// before it expires, and is safe for concurrent use.
type Tokens struct {
	issuer, audience string
	key              *rsa.PrivateKey
	sellers          map[int64]string // seller id -> its ERP's client secret
	hc               *http.Client
	now              func() time.Time

	mu    sync.Mutex
	cache map[string]heldToken
	calls map[string]*tokenCall
}

type heldToken struct {
	token string
	exp   time.Time
}

// tokenCall is a token request under way, which others for the subject wait for.
type tokenCall struct {
	done chan struct{}
	tok  heldToken
	err  error
}

// renewBefore is how long before its expiry a held token is replaced.
const renewBefore = 2 * time.Minute

// ClusterTokens reads the harness's keys and secrets from the cluster's folder dir; issuer is the
// provider's (Options.Issuer, or AUTH_OIDC_ISSUER of its checkout.env), audience the API's
// (AUTH_OIDC_AUDIENCE, OIDCClientID).
func ClusterTokens(dir, issuer, audience string) (*Tokens, error) {
	raw, err := os.ReadFile(filepath.Join(dir, OIDCDir, "secrets.json"))
	if err != nil {
		return nil, err
	}
	var s OIDCSecrets
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, OIDCDir, "secrets.json"), err)
	}
	key, err := readShopperKey(filepath.Join(dir, OIDCDir, shopperKeyFile))
	if err != nil {
		return nil, fmt.Errorf("the harness's shopper key (a cluster of this build makes it): %w", err)
	}
	t := &Tokens{issuer: strings.TrimRight(issuer, "/"), audience: audience, key: key, sellers: map[int64]string{},
		hc: &http.Client{Timeout: 30 * time.Second}, now: time.Now, cache: map[string]heldToken{}, calls: map[string]*tokenCall{}}
	for id, secret := range s.SellerSecrets {
		n, err := strconv.ParseInt(id, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("secrets.json: seller %q", id)
		}
		t.sellers[n] = secret
	}
	return t, nil
}

// Shopper is the token of the shopper user (MinShopperSubject and up).
func (t *Tokens) Shopper(ctx context.Context, user int64) (string, error) {
	if user < MinShopperSubject {
		return "", fmt.Errorf("shopper %d: the harness's shoppers are numbered from %d", user, MinShopperSubject)
	}
	sub := strconv.FormatInt(user, 10)
	return t.get(ctx, "shopper:"+sub, func() (url.Values, string, string, error) {
		now := t.now()
		c := jwt.MapClaims{"iss": sub, "sub": sub, "aud": []string{t.issuer, t.audience},
			"iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix()}
		a := jwt.NewWithClaims(jwt.SigningMethodRS256, c)
		a.Header["kid"] = ShopperKeyID
		signed, err := a.SignedString(t.key)
		return url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:jwt-bearer"}, "assertion": {signed}}, "", "", err
	})
}

// Seller is the token of a demo seller's ERP (DemoSellers).
func (t *Tokens) Seller(ctx context.Context, seller int64) (string, error) {
	secret, ok := t.sellers[seller]
	if !ok {
		return "", fmt.Errorf("seller %d has no client at the cluster's provider (the demo sellers do: %v)", seller, DemoSellers)
	}
	return t.get(ctx, "seller:"+strconv.FormatInt(seller, 10), func() (url.Values, string, string, error) {
		return url.Values{"grant_type": {"client_credentials"}}, SellerClientID(seller), secret, nil
	})
}

// get answers the held token of key while it has more than renewBefore to live, else asks the
// provider once (concurrent callers for key wait for that one request).
func (t *Tokens) get(ctx context.Context, key string, grant func() (url.Values, string, string, error)) (string, error) {
	t.mu.Lock()
	if h, ok := t.cache[key]; ok && t.now().Add(renewBefore).Before(h.exp) {
		t.mu.Unlock()
		return h.token, nil
	}
	if c, ok := t.calls[key]; ok {
		t.mu.Unlock()
		select {
		case <-c.done:
			return c.tok.token, c.err
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	c := &tokenCall{done: make(chan struct{})}
	t.calls[key] = c
	t.mu.Unlock()

	c.tok, c.err = t.request(ctx, grant)
	t.mu.Lock()
	delete(t.calls, key)
	if c.err == nil {
		t.cache[key] = c.tok
		if len(t.cache) > 100_000 { // a long run's shoppers: drop the expired
			for k, h := range t.cache {
				if !t.now().Before(h.exp) {
					delete(t.cache, k)
				}
			}
		}
	}
	t.mu.Unlock()
	close(c.done)
	return c.tok.token, c.err
}

func (t *Tokens) request(ctx context.Context, grant func() (url.Values, string, string, error)) (heldToken, error) {
	form, clientID, secret, err := grant()
	if err != nil {
		return heldToken{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.issuer+"/oauth/token", strings.NewReader(form.Encode()))
	if err != nil {
		return heldToken{}, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if clientID != "" {
		req.SetBasicAuth(url.QueryEscape(clientID), url.QueryEscape(secret))
	}
	began := t.now()
	resp, err := t.hc.Do(req)
	if err != nil {
		return heldToken{}, fmt.Errorf("the cluster's provider: %w", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var out struct {
		AccessToken string `json:"access_token"`
		ExpiresIn   int64  `json:"expires_in"`
		Error       string `json:"error"`
		Description string `json:"error_description"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || resp.StatusCode != http.StatusOK || out.AccessToken == "" {
		return heldToken{}, fmt.Errorf("the cluster's provider refused a %s grant: %d %s %s", form.Get("grant_type"),
			resp.StatusCode, out.Error, out.Description)
	}
	if out.ExpiresIn <= 0 {
		return heldToken{}, errors.New("the cluster's provider said no expires_in")
	}
	return heldToken{token: out.AccessToken, exp: began.Add(time.Duration(out.ExpiresIn) * time.Second)}, nil
}
