package config

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/codec"
)

// MinSecretBytes is the shortest secret api and worker accept.
const MinSecretBytes = 32

// developmentSecrets were once written in this repository as defaults: known to anyone, they are
// refused everywhere but in tests of this refusal.
var developmentSecrets = []string{"dev-only-jwt-secret-change-me", "dev-only-webhook-secret-change-me"}

// CheckServe is what api and worker ask before they start: their secrets (CheckSecrets), mutual
// TLS to Temporal (CheckTemporalTLS), and a payment provider chosen, never assumed.
func (c Config) CheckServe() error {
	if err := c.CheckSecrets(); err != nil {
		return err
	}
	if err := c.CheckTemporalTLS(); err != nil {
		return err
	}
	if !c.CodecEncrypt && !c.CodecAcceptPlaintext {
		return errors.New("TEMPORAL_CODEC_ENCRYPT=false writes payloads in clear, which api and worker refuse to read: also set TEMPORAL_CODEC_ACCEPT_PLAINTEXT=true while it lasts")
	}
	if c.PaymentProvider == "" {
		return fmt.Errorf("PAYMENT_PROVIDER is not set: name the payment provider (%s, or %s, the simulator, with which no money moves)", ProviderStripe, ProviderPaysim)
	}
	if c.Webhooks.AllowPrivateTargets {
		return errors.New("WEBHOOKS_ALLOW_PRIVATE_TARGETS=true lets sellers' webhooks reach this network's own addresses: only `checkout-dev dev` may")
	}
	return nil
}

// CheckSecrets: every secret set, none a development value, none shorter than MinSecretBytes. It
// answers with one line naming what is wrong.
func (c Config) CheckSecrets() error {
	check := func(name, v string) error {
		switch {
		case v == "":
			return fmt.Errorf("%s is not set (only `checkout-dev dev` makes development secrets)", name)
		case isDevelopmentSecret(v):
			return fmt.Errorf("%s is a development value written in the repository: set a secret of your own", name)
		case len(v) < MinSecretBytes:
			return fmt.Errorf("%s is %d bytes: at least %d are required", name, len(v), MinSecretBytes)
		}
		return nil
	}
	if err := check("AUTH_JWT_SECRET", c.JWTSecret); err != nil {
		return err
	}
	for _, k := range c.JWTKeys {
		if err := check("AUTH_JWT_KEYS "+k.ID, string(k.Secret)); err != nil {
			return err
		}
	}
	if err := check("PAYMENT_WEBHOOK_SECRET", c.PaymentWebhookSecret); err != nil {
		return err
	}
	return c.checkCodecKeys()
}

// checkCodecKeys: the primary codec key set and named, every key 32 bytes, no id given twice.
func (c Config) checkCodecKeys() error {
	size := func(name string, k []byte) error {
		if len(k) != codec.KeySize {
			return fmt.Errorf("%s is %d bytes: AES-256 takes exactly %d (base64 of 32 random bytes: `openssl rand -base64 32`)",
				name, len(k), codec.KeySize)
		}
		return nil
	}
	switch {
	case len(c.CodecKey.Secret) == 0:
		return errors.New("TEMPORAL_CODEC_KEY is not set: it encrypts what the product writes to Temporal (only `checkout-dev dev` makes development secrets)")
	case c.CodecKey.ID == "":
		return errors.New("TEMPORAL_CODEC_KID is not set: name the key (every encrypted payload carries the name, so the key can be rotated)")
	}
	if err := codec.ValidKeyID(c.CodecKey.ID); err != nil {
		return fmt.Errorf("TEMPORAL_CODEC_KID: %w", err)
	}
	if err := size("TEMPORAL_CODEC_KEY", c.CodecKey.Secret); err != nil {
		return err
	}
	seen := map[string]bool{c.CodecKey.ID: true}
	for _, k := range c.CodecKeys {
		if seen[k.ID] {
			return fmt.Errorf("TEMPORAL_CODEC_KEYS names %s twice (or as TEMPORAL_CODEC_KID): one key per id", k.ID)
		}
		seen[k.ID] = true
		if err := size("TEMPORAL_CODEC_KEYS "+k.ID, k.Secret); err != nil {
			return err
		}
	}
	return nil
}

func isDevelopmentSecret(v string) bool {
	for _, d := range developmentSecrets {
		if v == d {
			return true
		}
	}
	return false
}

// AuthKeys are the keys and checks of the API's bearer tokens: with an identity provider set, its
// tokens alone (the shared secret verifies nothing); without one (`checkout-dev dev`, tests), the
// shared secret's HS256 tokens, for every role.
func (c Config) AuthKeys() auth.Keys {
	k := auth.Keys{Signing: auth.Key{ID: c.JWTKeyID, Secret: []byte(c.JWTSecret)}, Verifying: c.JWTKeys,
		Issuer: c.JWTIssuer, Audience: c.JWTAudience, MaxLifetime: c.JWTMaxLifetime}
	if c.OIDCIssuer != "" {
		k.Provider = auth.NewIdentityProvider(c.OIDCIssuer, c.OIDCAudience, c.OIDCJWKSURL, nil)
	}
	return k
}

// CheckIdentityProvider is what the API asks before it starts outside `checkout-dev dev`: every
// token comes from an identity provider, whose JWKS it verifies them with; the shared secret's
// HS256 tokens are refused for every role, and AUTH_JWT_ROLES, which once let shoppers' and
// sellers' through, is refused when it names a role.
func (c Config) CheckIdentityProvider() error {
	if c.OIDCIssuer == "" {
		return errors.New("AUTH_OIDC_ISSUER is not set: outside `checkout-dev dev` staff tokens come from an identity provider (set AUTH_OIDC_ISSUER, AUTH_OIDC_AUDIENCE, AUTH_OIDC_JWKS_URL)")
	}
	if len(c.JWTRoles) > 0 {
		return fmt.Errorf("AUTH_JWT_ROLES=%s: outside `checkout-dev dev` no HS256 token is accepted for any role (shoppers and sellers get theirs from the identity provider): unset it",
			strings.Join(c.JWTRoles, ","))
	}
	return nil
}

// PayloadCodec is the codec of every Temporal client and worker of the product: it encrypts with
// TEMPORAL_CODEC_KEY (unless TEMPORAL_CODEC_ENCRYPT is false) and decrypts with it and the older
// TEMPORAL_CODEC_KEYS. It reads payloads in clear too; api and worker run on its Strict form
// unless TEMPORAL_CODEC_ACCEPT_PLAINTEXT (ServeCodec).
func (c Config) PayloadCodec() (*codec.Codec, error) {
	if len(c.CodecKey.Secret) == 0 {
		return nil, errors.New("TEMPORAL_CODEC_KEY is not set (or use `checkout-dev dev`)")
	}
	pc, err := codec.New(c.CodecKey, c.CodecKeys...)
	if err != nil {
		return nil, fmt.Errorf("TEMPORAL_CODEC_KEY, TEMPORAL_CODEC_KID, TEMPORAL_CODEC_KEYS: %w", err)
	}
	if !c.CodecEncrypt {
		pc = pc.DecodeOnly()
	}
	return pc, nil
}

// ServeCodec is the codec of api and worker processes: PayloadCodec, strict (refusing payloads
// in clear) unless TEMPORAL_CODEC_ACCEPT_PLAINTEXT is set, as `checkout-dev dev` sets it.
func (c Config) ServeCodec() (*codec.Codec, error) {
	pc, err := c.PayloadCodec()
	if err != nil || c.CodecAcceptPlaintext {
		return pc, err
	}
	return pc.Strict(), nil
}

// parseCodecKeys reads TEMPORAL_CODEC_KEYS: kid=base64 pairs, comma-separated.
func parseCodecKeys(v string) ([]codec.Key, error) {
	pairs, err := kidPairs("TEMPORAL_CODEC_KEYS", "base64", v)
	if err != nil {
		return nil, err
	}
	keys := make([]codec.Key, 0, len(pairs))
	for _, p := range pairs {
		if err := codec.ValidKeyID(p.id); err != nil {
			return nil, fmt.Errorf("TEMPORAL_CODEC_KEYS: %w", err)
		}
		secret, err := decodeKey(p.value)
		if err != nil {
			return nil, fmt.Errorf("TEMPORAL_CODEC_KEYS %s: not base64", p.id)
		}
		keys = append(keys, codec.Key{ID: p.id, Secret: secret})
	}
	return keys, nil
}

// decodeKey reads a key in base64, padded or not, standard or URL-safe.
func decodeKey(v string) ([]byte, error) {
	v = strings.TrimSpace(v)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(v); err == nil {
			return b, nil
		}
	}
	return nil, errors.New("not base64")
}

// checkOrigin: a browser origin, scheme://host[:port], as the Origin header carries it.
func checkOrigin(o string) error {
	u, err := url.Parse(o)
	switch {
	case err != nil:
		return err
	case u.Scheme != "http" && u.Scheme != "https":
		return errors.New("want http:// or https://")
	case u.Host == "" || u.User != nil:
		return errors.New("want scheme://host[:port]")
	case u.Path != "" || u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("an origin has no path: %s://%s", u.Scheme, u.Host)
	}
	return nil
}

// parseKeys reads AUTH_JWT_KEYS: kid=secret pairs, comma-separated.
func parseKeys(v string) ([]auth.Key, error) {
	pairs, err := kidPairs("AUTH_JWT_KEYS", "secret", v)
	if err != nil {
		return nil, err
	}
	keys := make([]auth.Key, 0, len(pairs))
	for _, p := range pairs {
		keys = append(keys, auth.Key{ID: p.id, Secret: []byte(p.value)})
	}
	return keys, nil
}

type kidPair struct{ id, value string }

// kidPairs reads a setting of older keys: kid=value pairs, comma-separated.
func kidPairs(setting, value, v string) ([]kidPair, error) {
	var out []kidPair
	for _, part := range strings.Split(v, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		id, val, ok := strings.Cut(part, "=")
		if id = strings.TrimSpace(id); !ok || id == "" || val == "" {
			return nil, fmt.Errorf("%s: want kid=%s pairs, comma-separated", setting, value)
		}
		out = append(out, kidPair{id: id, value: val})
	}
	return out, nil
}

// Secrets are the secrets a data folder keeps: those `checkout-dev dev` makes once per data folder
// (DevSecretsOf), and those `checkout-dev cluster` makes once for its own (ClusterSecretsOf). A dev
// folder made before the codec key existed gets one added the next time (the other secrets stay).
type Secrets struct {
	JWT     string `json:"jwtSecret"`
	Webhook string `json:"webhookSecret"`
	// CodecKey (base64) and CodecKeyID encrypt what the folder's stack writes to Temporal.
	CodecKey   string `json:"temporalCodecKey,omitempty"`
	CodecKeyID string `json:"temporalCodecKid,omitempty"`
}

// devSecretsFile is where a data folder keeps its development secrets.
func devSecretsFile(dataDir string) string { return filepath.Join(dataDir, "dev-secrets.json") }

// ClusterSecretsFile is where `checkout-dev cluster` keeps the secrets of its processes.
func ClusterSecretsFile(clusterDir string) string { return filepath.Join(clusterDir, "secrets.json") }

// ReadDevSecrets reads the development secrets of a data folder (`make run`'s `.data`), for the
// commands that mint tokens or sign webhooks against that stack. The codec key is missing from a
// folder no `checkout-dev dev` of this build has started yet.
func ReadDevSecrets(dataDir string) (Secrets, error) { return readSecrets(devSecretsFile(dataDir)) }

func readSecrets(path string) (Secrets, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Secrets{}, err
	}
	var s Secrets
	if err := json.Unmarshal(raw, &s); err != nil || s.JWT == "" || s.Webhook == "" || (s.CodecKey == "") != (s.CodecKeyID == "") {
		return Secrets{}, fmt.Errorf("%s: not the secrets checkout writes", path)
	}
	return s, nil
}

// DevSecretsOf makes the development secrets of a data folder the first time (random, readable
// by its owner only), adds those an older folder lacks, and reads them every time after.
func DevSecretsOf(dataDir string) (Secrets, error) {
	s, err := ReadDevSecrets(dataDir)
	switch {
	case err == nil && s.CodecKey != "":
		return s, nil
	case err == nil:
		return addDevCodecKey(dataDir)
	case !errors.Is(err, os.ErrNotExist):
		return Secrets{}, err
	}
	return makeSecrets(devSecretsFile(dataDir), "dev-")
}

// ClusterSecretsOf makes the secrets of `checkout-dev cluster`'s processes the first time (random,
// their own codec key named cluster-…, readable by the folder's owner only) and reads them every
// time after, so that tokens, webhooks and encrypted histories outlive a restart.
func ClusterSecretsOf(clusterDir string) (Secrets, error) {
	path := ClusterSecretsFile(clusterDir)
	s, err := readSecrets(path)
	switch {
	case err == nil && s.CodecKey != "":
		return s, nil
	case err == nil:
		return Secrets{}, fmt.Errorf("%s: no codec key", path)
	case !errors.Is(err, os.ErrNotExist):
		return Secrets{}, err
	}
	return makeSecrets(path, "cluster-")
}

// makeSecrets writes new random secrets to path, whose codec key id starts with kidPrefix; a
// start that finds the file made meanwhile by another start reads that one's.
func makeSecrets(path, kidPrefix string) (Secrets, error) {
	s := Secrets{JWT: randomSecret(), Webhook: randomSecret()}
	s.CodecKey, s.CodecKeyID = newCodecKey(kidPrefix)
	raw, err := json.Marshal(s)
	if err != nil {
		return Secrets{}, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return Secrets{}, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return readSecrets(path)
	}
	if err != nil {
		return Secrets{}, err
	}
	_, err = f.Write(raw)
	return s, errors.Join(err, f.Close())
}

// addDevCodecKey adds a codec key to a folder's secrets file that has none, keeping the rest.
// Starts that do so at once take turns on a lock of the file; the first writes, the others find
// its key. The new file replaces the old one whole, so a reader never sees half of it.
func addDevCodecKey(dataDir string) (Secrets, error) {
	path := devSecretsFile(dataDir)
	f, err := os.Open(path)
	if err != nil {
		return Secrets{}, err
	}
	defer f.Close() // and so releases the lock
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return Secrets{}, err
	}
	s, err := ReadDevSecrets(dataDir)
	if err != nil || s.CodecKey != "" {
		return s, err
	}
	s.CodecKey, s.CodecKeyID = newCodecKey("dev-")
	raw, err := json.Marshal(s)
	if err != nil {
		return Secrets{}, err
	}
	tmp, err := os.CreateTemp(dataDir, ".dev-secrets-*.json") // made with mode 0600
	if err != nil {
		return Secrets{}, err
	}
	_, err = tmp.Write(raw)
	if err = errors.Join(err, tmp.Close()); err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return Secrets{}, err
	}
	return s, nil
}

func randomSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newCodecKey is a random AES-256 key (base64) and an id of its own after prefix, so that a folder
// whose key was lost says so by name instead of failing to decrypt.
func newCodecKey(prefix string) (key, id string) {
	b := make([]byte, codec.KeySize)
	_, _ = rand.Read(b)
	n := make([]byte, 3)
	_, _ = rand.Read(n)
	return base64.StdEncoding.EncodeToString(b), prefix + hex.EncodeToString(n)
}

// WithDevSecrets fills the secrets that are not set from the data folder's development secrets
// (made there the first time): what `dev` runs on, and what the tools that drive a `dev` stack
// mint and sign with.
func (c Config) WithDevSecrets() (Config, error) {
	if c.JWTSecret != "" && c.PaymentWebhookSecret != "" && len(c.CodecKey.Secret) > 0 {
		return c, nil
	}
	s, err := DevSecretsOf(c.Dev.DataDir)
	if err != nil {
		return c, fmt.Errorf("development secrets in %s: %w", c.Dev.DataDir, err)
	}
	if c.JWTSecret == "" {
		c.JWTSecret = s.JWT
	}
	if c.PaymentWebhookSecret == "" {
		c.PaymentWebhookSecret = s.Webhook
	}
	if len(c.CodecKey.Secret) == 0 {
		if c.CodecKey, err = s.Codec(); err != nil {
			return c, fmt.Errorf("%s: %w", devSecretsFile(c.Dev.DataDir), err)
		}
	}
	return c, nil
}

// Codec is the folder's codec key (none in a folder no `checkout-dev dev` of this build has started).
func (s Secrets) Codec() (codec.Key, error) {
	if s.CodecKey == "" {
		return codec.Key{}, errors.New("no codec key yet (start `checkout-dev dev` once)")
	}
	secret, err := decodeKey(s.CodecKey)
	if err != nil {
		return codec.Key{}, errors.New("temporalCodecKey is not base64")
	}
	return codec.Key{ID: s.CodecKeyID, Secret: secret}, nil
}
