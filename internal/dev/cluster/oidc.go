package cluster

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The cluster's staff sign-in: bin/oidc-provider (tools/oidc-provider, an OpenID Connect provider
// built on zitadel/oidc) with its keys and people in <dir>/oidc. The Temporal UI is its client;
// Temporal's claim mapper and the API verify its tokens against its JWKS.
const (
	OIDCDir = "oidc"
	// OIDCClientID is the Temporal UI's client id: the audience of the provider's tokens.
	OIDCClientID = "temporal-ui"
	// OIDCRoleClaim is the claim a person's role is in.
	OIDCRoleClaim = "role"
)

// Person is one demo person of the provider: the name they sign in with, the checkout's user id
// their tokens carry (sub), their role and their name as actions record it.
type Person struct {
	Name, Sub, Role, Display string
}

// DemoPeople are the people the cluster makes once: a support agent, an ops engineer, and a
// shopper who signs in but has no staff role (Temporal and the codec refuse her).
var DemoPeople = []Person{
	{Name: "alice", Sub: "901", Role: "support", Display: "Alice Support"},
	{Name: "oscar", Sub: "902", Role: "ops", Display: "Oscar Ops"},
	{Name: "sam", Sub: "7", Role: "shopper", Display: "Sam Shopper"},
}

// DemoSellers are the sellers of the demo data, whose ERPs the cluster makes clients of the
// provider for (client id seller-<id>, their tokens' sub 1000+id, as the harness numbers them).
var DemoSellers = []int64{42, 43}

// SellerClientID is the client id of a seller's ERP.
func SellerClientID(seller int64) string { return "seller-" + strconv.FormatInt(seller, 10) }

// SellerUserID is the user id a seller's tokens carry.
func SellerUserID(seller int64) int64 { return 1000 + seller }

// ShopperKeyID is the kid of the key the harness asserts shoppers with (the JWT-profile grant),
// and MinShopperSubject the lowest user id it may assert: the harness's shoppers are numbered
// from there up, clear of the demo's people.
const (
	ShopperKeyID      = "harness-shoppers"
	MinShopperSubject = 1_000_000
	shopperKeyFile    = "shopper-key.pem"
)

// OIDCSecrets are the provider's secrets the cluster makes once (<dir>/oidc/secrets.json,
// owner-only): the UI's client secret, each demo person's password and each demo seller's ERP's
// client secret (by seller id). The harness's shopper key is <dir>/oidc/shopper-key.pem beside it.
type OIDCSecrets struct {
	ClientSecret  string            `json:"clientSecret"`
	Passwords     map[string]string `json:"passwords"`
	SellerSecrets map[string]string `json:"sellerSecrets,omitempty"`
}

// Issuer is the provider's issuer: the host name browsers use for the API and the UI (cookies
// stay on one site), the provider's port.
func (o Options) Issuer() string {
	return "http://localhost:" + strconv.Itoa(o.Ports.OIDC)
}

// JWKSURL is where the provider's keys are published, as Temporal and the API fetch them.
func (o Options) JWKSURL() string { return "http://127.0.0.1:" + strconv.Itoa(o.Ports.OIDC) + "/keys" }

// UICallbackURL is the Temporal UI's redirect URI.
func (o Options) UICallbackURL() string {
	return "http://localhost:" + strconv.Itoa(o.Ports.UI) + "/auth/sso/callback"
}

func (o Options) oidcDir() string { return filepath.Join(o.Dir, OIDCDir) }

// EnsureOIDC makes the provider's secrets, demo people and programs the first time (the provider's
// own `user`, `seller` and `shopper-key` commands write each into its users.json and
// machines.json, hashed or public halves only) and reads the secrets every time after. A person or
// program the provider's files have lost is written again with the kept secret; a folder made
// before programs had tokens gets them added.
func EnsureOIDC(ctx context.Context, o Options) (OIDCSecrets, error) {
	dir := o.oidcDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return OIDCSecrets{}, err
	}
	path := filepath.Join(dir, "secrets.json")
	var s OIDCSecrets
	raw, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := json.Unmarshal(raw, &s); err != nil || s.ClientSecret == "" {
			return OIDCSecrets{}, fmt.Errorf("%s: not the secrets checkout-dev cluster writes", path)
		}
	case errors.Is(err, os.ErrNotExist):
		s = OIDCSecrets{ClientSecret: randomHex(32), Passwords: map[string]string{}}
		for _, p := range DemoPeople {
			s.Passwords[p.Name] = randomHex(9)
		}
		if raw, err = json.MarshalIndent(s, "", "  "); err != nil {
			return OIDCSecrets{}, err
		}
		if err := writeAtomic(path, raw, 0o600); err != nil {
			return OIDCSecrets{}, err
		}
	default:
		return OIDCSecrets{}, err
	}
	users, _ := os.ReadFile(filepath.Join(dir, "users.json"))
	for _, p := range DemoPeople {
		if strings.Contains(string(users), `"name": "`+p.Name+`"`) || s.Passwords[p.Name] == "" {
			continue
		}
		cmd := exec.CommandContext(ctx, o.OIDCProvider, "user", "--dir", dir, "--name", p.Name, "--sub", p.Sub,
			"--role", p.Role, "--display", p.Display)
		cmd.Stdin = strings.NewReader(s.Passwords[p.Name] + "\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			return OIDCSecrets{}, fmt.Errorf("oidc-provider user %s: %v: %s", p.Name, err, strings.TrimSpace(string(out)))
		}
	}
	if err := ensurePrograms(ctx, o, &s, path); err != nil {
		return OIDCSecrets{}, err
	}
	return s, nil
}

// ensurePrograms makes the demo sellers' ERP secrets and the harness's shopper key when the
// folder lacks them, and registers with the provider those its machines.json lacks.
func ensurePrograms(ctx context.Context, o Options, s *OIDCSecrets, path string) error {
	dir := o.oidcDir()
	changed := false
	if s.SellerSecrets == nil {
		s.SellerSecrets = map[string]string{}
	}
	for _, id := range DemoSellers {
		if k := strconv.FormatInt(id, 10); s.SellerSecrets[k] == "" {
			s.SellerSecrets[k], changed = randomHex(32), true
		}
	}
	if changed {
		raw, err := json.MarshalIndent(s, "", "  ")
		if err != nil {
			return err
		}
		if err := writeAtomic(path, raw, 0o600); err != nil {
			return err
		}
	}
	key, err := ensureShopperKey(filepath.Join(dir, shopperKeyFile))
	if err != nil {
		return err
	}
	machines, _ := os.ReadFile(filepath.Join(dir, "machines.json"))
	run := func(stdin string, args ...string) error {
		cmd := exec.CommandContext(ctx, o.OIDCProvider, append(args[:1:1], append([]string{"--dir", dir}, args[1:]...)...)...)
		cmd.Stdin = strings.NewReader(stdin)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("oidc-provider %s: %v: %s", args[0], err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	for _, id := range DemoSellers {
		if strings.Contains(string(machines), `"clientId": "`+SellerClientID(id)+`"`) {
			continue
		}
		if err := run(s.SellerSecrets[strconv.FormatInt(id, 10)]+"\n", "seller", "--client-id", SellerClientID(id),
			"--seller", strconv.FormatInt(id, 10), "--sub", strconv.FormatInt(SellerUserID(id), 10)); err != nil {
			return err
		}
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	public := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	quoted, _ := json.Marshal(string(public))
	// Registered unless the provider holds this very key (a new key file replaces the old entry).
	if !strings.Contains(string(machines), `"kid": "`+ShopperKeyID+`"`) || !strings.Contains(string(machines), string(quoted)) {
		if err := run(string(public), "shopper-key",
			"--kid", ShopperKeyID, "--min-subject", strconv.Itoa(MinShopperSubject)); err != nil {
			return err
		}
	}
	return nil
}

// ensureShopperKey reads the harness's shopper key, making it the first time (owner-only).
func ensureShopperKey(path string) (*rsa.PrivateKey, error) {
	if key, err := readShopperKey(path); err == nil || !errors.Is(err, os.ErrNotExist) {
		return key, err
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return key, writeAtomic(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
}

func readShopperKey(path string) (*rsa.PrivateKey, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(raw)
	if block == nil {
		return nil, fmt.Errorf("%s: no PEM block", path)
	}
	parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	key, ok := parsed.(*rsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: not an RSA key", path)
	}
	return key, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// oidcProcess is the provider; the client secret comes from the folder's secrets at start.
func oidcProcess(o Options, clientSecret string) Process {
	listen := "127.0.0.1:" + strconv.Itoa(o.Ports.OIDC)
	return Process{Name: "oidc-provider", Service: "oidc-provider", Path: o.OIDCProvider, Args: []string{"serve"},
		Env: []string{"OIDC_DIR=" + o.oidcDir(), "OIDC_ISSUER=" + o.Issuer(), "OIDC_LISTEN=" + listen,
			"OIDC_CLIENT_ID=" + OIDCClientID, "OIDC_CLIENT_SECRET=" + clientSecret,
			"OIDC_REDIRECT_URIS=" + o.UICallbackURL()},
		Listens: []string{listen},
		Ready:   HTTPOK("http://" + listen + "/.well-known/openid-configuration")}
}

// SignInRefused is the provider's answer to a sign-in it refused (a wrong name or password: 401).
type SignInRefused struct{ Status int }

func (e SignInRefused) Error() string { return fmt.Sprintf("the sign-in was refused (%d)", e.Status) }

// SignIn signs a person in to the Temporal UI at uiURL as a browser does: the UI sends it to the
// identity provider, whose page takes the name and password, the provider sends the code back to
// the UI, which exchanges it and hands the browser the person's tokens (its user0 cookie). It
// answers the access token the UI forwards to Temporal and to the codec endpoint.
func SignIn(ctx context.Context, uiURL, name, password string) (string, error) {
	jar, err := cookiejar.New(nil)
	if err != nil {
		return "", err
	}
	browser := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	get := func(method, url string, body io.Reader, header ...string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, method, url, body)
		if err != nil {
			return nil, err
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := browser.Do(req)
		if err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp, resp.Body.Close()
	}
	resp, err := get(http.MethodGet, uiURL+"/auth/sso", nil)
	if err != nil {
		return "", err
	}
	page := resp.Request.URL
	if resp.StatusCode != http.StatusOK || page.Path != "/login" {
		return "", fmt.Errorf("the UI's sign-in led to %s (%d), not the provider's page", page, resp.StatusCode)
	}
	issuer := page.Scheme + "://" + page.Host
	form := url.Values{"authRequestID": {page.Query().Get("authRequestID")}, "username": {name}, "password": {password}}
	resp, err = get(http.MethodPost, issuer+"/login", strings.NewReader(form.Encode()),
		"Content-Type", "application/x-www-form-urlencoded", "Origin", issuer)
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(resp.Request.URL.String(), uiURL) {
		return "", SignInRefused{Status: resp.StatusCode}
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("back in the UI: %d", resp.StatusCode)
	}
	u, err := url.Parse(uiURL)
	if err != nil {
		return "", err
	}
	for _, ck := range jar.Cookies(u) {
		if ck.Name != "user0" {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(ck.Value)
		if err != nil {
			return "", err
		}
		var user struct{ AccessToken string }
		if err := json.Unmarshal(raw, &user); err != nil || user.AccessToken == "" {
			return "", fmt.Errorf("the UI's user cookie holds no access token")
		}
		return user.AccessToken, nil
	}
	return "", errors.New("the UI handed over no tokens")
}

// StaffToken signs one of the cluster's demo people (DemoPeople) in to its UI with the password
// the cluster keeps for them in dir: how the harness acts as support or ops.
func StaffToken(ctx context.Context, dir string, ports Ports, name string) (string, error) {
	return StaffTokenAt(ctx, dir, "http://localhost:"+strconv.Itoa(ports.UI), name)
}

// StaffTokenAt is StaffToken through the UI at uiURL.
func StaffTokenAt(ctx context.Context, dir, uiURL, name string) (string, error) {
	raw, err := os.ReadFile(filepath.Join(dir, OIDCDir, "secrets.json"))
	if err != nil {
		return "", err
	}
	var s OIDCSecrets
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", err
	}
	return SignIn(ctx, uiURL, name, s.Passwords[name])
}
