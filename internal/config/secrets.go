package config

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/marketplace/checkout/internal/auth"
)

// MinSecretBytes is the shortest secret api and worker accept.
const MinSecretBytes = 32

// developmentSecrets were once written in this repository as defaults: known to anyone, they are
// refused everywhere but in tests of this refusal.
var developmentSecrets = []string{"dev-only-jwt-secret-change-me", "dev-only-webhook-secret-change-me"}

// CheckServe is what api and worker ask before they start: their secrets (CheckSecrets), and a
// payment provider chosen, never assumed.
func (c Config) CheckServe() error {
	if err := c.CheckSecrets(); err != nil {
		return err
	}
	if c.PaymentProvider == "" {
		return fmt.Errorf("PAYMENT_PROVIDER is not set: name the payment provider (this build has only the simulator, %s, with which no money moves)", ProviderPaysim)
	}
	return nil
}

// CheckSecrets: every secret set, none a development value, none shorter than MinSecretBytes. It
// answers with one line naming what is wrong.
func (c Config) CheckSecrets() error {
	check := func(name, v string) error {
		switch {
		case v == "":
			return fmt.Errorf("%s is not set (only `checkout dev` makes development secrets)", name)
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
	return check("PAYMENT_WEBHOOK_SECRET", c.PaymentWebhookSecret)
}

func isDevelopmentSecret(v string) bool {
	for _, d := range developmentSecrets {
		if v == d {
			return true
		}
	}
	return false
}

// AuthKeys are the keys and checks of the API's bearer tokens.
func (c Config) AuthKeys() auth.Keys {
	return auth.Keys{Signing: auth.Key{ID: c.JWTKeyID, Secret: []byte(c.JWTSecret)}, Verifying: c.JWTKeys,
		Issuer: c.JWTIssuer, Audience: c.JWTAudience, MaxLifetime: c.JWTMaxLifetime}
}

// parseKeys reads AUTH_JWT_KEYS: kid=secret pairs, comma-separated.
func parseKeys(v string) ([]auth.Key, error) {
	var keys []auth.Key
	for _, part := range strings.Split(v, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		id, secret, ok := strings.Cut(part, "=")
		if !ok || strings.TrimSpace(id) == "" || secret == "" {
			return nil, errors.New("AUTH_JWT_KEYS: want kid=secret pairs, comma-separated")
		}
		keys = append(keys, auth.Key{ID: strings.TrimSpace(id), Secret: []byte(secret)})
	}
	return keys, nil
}

// DevSecrets are the secrets `checkout dev` makes once per data folder and keeps in it.
type DevSecrets struct {
	JWT     string `json:"jwtSecret"`
	Webhook string `json:"webhookSecret"`
}

// devSecretsFile is where a data folder keeps its development secrets.
func devSecretsFile(dataDir string) string { return filepath.Join(dataDir, "dev-secrets.json") }

// ReadDevSecrets reads the development secrets of a data folder (`make run`'s `.data`), for the
// commands that mint tokens or sign webhooks against that stack.
func ReadDevSecrets(dataDir string) (DevSecrets, error) {
	raw, err := os.ReadFile(devSecretsFile(dataDir))
	if err != nil {
		return DevSecrets{}, err
	}
	var s DevSecrets
	if err := json.Unmarshal(raw, &s); err != nil || s.JWT == "" || s.Webhook == "" {
		return DevSecrets{}, fmt.Errorf("%s: not the secrets checkout dev writes", devSecretsFile(dataDir))
	}
	return s, nil
}

// DevSecretsOf makes the development secrets of a data folder the first time (random, readable
// by its owner only) and reads them every time after.
func DevSecretsOf(dataDir string) (DevSecrets, error) {
	if s, err := ReadDevSecrets(dataDir); err == nil {
		return s, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return DevSecrets{}, err
	}
	s := DevSecrets{JWT: randomSecret(), Webhook: randomSecret()}
	raw, err := json.Marshal(s)
	if err != nil {
		return DevSecrets{}, err
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return DevSecrets{}, err
	}
	f, err := os.OpenFile(devSecretsFile(dataDir), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) { // made meanwhile by another start
		return ReadDevSecrets(dataDir)
	}
	if err != nil {
		return DevSecrets{}, err
	}
	_, err = f.Write(raw)
	return s, errors.Join(err, f.Close())
}

func randomSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// WithDevSecrets fills the secrets that are not set from the data folder's development secrets
// (made there the first time): what `dev` runs on, and what the tools that drive a `dev` stack
// mint and sign with.
func (c Config) WithDevSecrets() (Config, error) {
	if c.JWTSecret != "" && c.PaymentWebhookSecret != "" {
		return c, nil
	}
	s, err := DevSecretsOf(c.DataDir)
	if err != nil {
		return c, fmt.Errorf("development secrets in %s: %w", c.DataDir, err)
	}
	if c.JWTSecret == "" {
		c.JWTSecret = s.JWT
	}
	if c.PaymentWebhookSecret == "" {
		c.PaymentWebhookSecret = s.Webhook
	}
	return c, nil
}
