package config_test

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/config"
)

const good = "a-secret-of-thirty-two-bytes-or-more-0123"

// codecKey is a valid TEMPORAL_CODEC_KEY: base64 of 32 bytes.
var codecKey = base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))

// secrets are a complete, valid set of the secrets api and worker need, plus more settings.
func secrets(more ...string) map[string]string {
	env := map[string]string{"AUTH_JWT_SECRET": good, "PAYMENT_WEBHOOK_SECRET": good,
		"TEMPORAL_CODEC_KEY": codecKey, "TEMPORAL_CODEC_KID": "k2"}
	for i := 0; i+1 < len(more); i += 2 {
		env[more[i]] = more[i+1]
	}
	return env
}

func load(t *testing.T, env map[string]string) config.Config {
	t.Helper()
	c, err := config.Load(func(k string) string { return env[k] })
	require.NoError(t, err)
	return c
}

func TestCheckSecrets_RefusesUnsetDevelopmentAndShortSecrets(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		env  map[string]string
		want string
	}{
		"jwt secret unset":      {map[string]string{"PAYMENT_WEBHOOK_SECRET": good}, "AUTH_JWT_SECRET is not set"},
		"webhook secret unset":  {map[string]string{"AUTH_JWT_SECRET": good}, "PAYMENT_WEBHOOK_SECRET is not set"},
		"published dev jwt":     {map[string]string{"AUTH_JWT_SECRET": "dev-only-jwt-secret-change-me", "PAYMENT_WEBHOOK_SECRET": good}, "AUTH_JWT_SECRET is a development value"},
		"published dev webhook": {map[string]string{"AUTH_JWT_SECRET": good, "PAYMENT_WEBHOOK_SECRET": "dev-only-webhook-secret-change-me"}, "PAYMENT_WEBHOOK_SECRET is a development value"},
		"short":                 {map[string]string{"AUTH_JWT_SECRET": "only-sixteen-byt", "PAYMENT_WEBHOOK_SECRET": good}, "AUTH_JWT_SECRET is 16 bytes: at least 32"},
		"short rotation key":    {map[string]string{"AUTH_JWT_SECRET": good, "AUTH_JWT_KEYS": "old=too-short", "PAYMENT_WEBHOOK_SECRET": good}, "AUTH_JWT_KEYS old is 9 bytes"},
		"codec key unset":       {map[string]string{"AUTH_JWT_SECRET": good, "PAYMENT_WEBHOOK_SECRET": good}, "TEMPORAL_CODEC_KEY is not set"},
		"codec key short":       {secrets("TEMPORAL_CODEC_KEY", "c2l4dGVlbi1ieXRlLWtleQ=="), "TEMPORAL_CODEC_KEY is 16 bytes: AES-256 takes exactly 32"},
		"codec key unnamed":     {secrets("TEMPORAL_CODEC_KID", ""), "TEMPORAL_CODEC_KID is not set"},
		"older codec key short": {secrets("TEMPORAL_CODEC_KEYS", "k1=c2hvcnQ="), "TEMPORAL_CODEC_KEYS k1 is 5 bytes"},
		"codec key id twice":    {secrets("TEMPORAL_CODEC_KEYS", "k2="+codecKey), "TEMPORAL_CODEC_KEYS names k2 twice"},
	} {
		err := load(t, tc.env).CheckSecrets()
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), tc.want, name)
		assert.NotContains(t, err.Error(), "\n", "%s: one line", name)
	}
	ok := load(t, secrets("AUTH_JWT_KID", "k2", "AUTH_JWT_KEYS", "k1="+good+"-old"))
	require.NoError(t, ok.CheckSecrets())
	keys := ok.AuthKeys()
	assert.Equal(t, "k2", keys.Signing.ID)
	require.Len(t, keys.Verifying, 1)
	assert.Equal(t, "k1", keys.Verifying[0].ID)
}

func TestLoad_BadRotationKeys_Refused(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct{ key, value, want string }{
		"jwt keys without kid":     {"AUTH_JWT_KEYS", "no-equals-sign", "AUTH_JWT_KEYS"},
		"codec keys without kid":   {"TEMPORAL_CODEC_KEYS", codecKey, "TEMPORAL_CODEC_KEYS: want kid=base64"},
		"codec key not base64":     {"TEMPORAL_CODEC_KEY", "not base64!", "TEMPORAL_CODEC_KEY: not base64"},
		"older codec key unbase64": {"TEMPORAL_CODEC_KEYS", "k1=***", "TEMPORAL_CODEC_KEYS k1: not base64"},
		"codec kid with comma":     {"TEMPORAL_CODEC_KEYS", "a b=" + codecKey, "letters, digits"},
		"ui origin with a path":    {"TEMPORAL_UI_ORIGIN", "http://localhost:8233/", "an origin has no path"},
		"ui origin without scheme": {"TEMPORAL_UI_ORIGIN", "localhost:8233", "TEMPORAL_UI_ORIGIN"},
	} {
		_, err := config.Load(func(k string) string { return map[string]string{tc.key: tc.value}[k] })
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), tc.want, name)
	}
}

func TestPayloadCodec_EncryptsWithThePrimary_DecryptsWithOlderKeys(t *testing.T) {
	t.Parallel()
	older := base64.StdEncoding.EncodeToString([]byte("an-older-key-of-thirty-two-bytes"))
	before, err := load(t, secrets("TEMPORAL_CODEC_KEY", older, "TEMPORAL_CODEC_KID", "k1")).PayloadCodec()
	require.NoError(t, err)
	sealed, err := before.DataConverter().ToPayload("tok_3ds")
	require.NoError(t, err)

	c := load(t, secrets("TEMPORAL_CODEC_KEYS", "k1="+older, "TEMPORAL_UI_ORIGIN", "http://localhost:8233, http://127.0.0.1:8233"))
	require.NoError(t, c.CheckSecrets())
	assert.Equal(t, []string{"http://localhost:8233", "http://127.0.0.1:8233"}, c.TemporalUIOrigins)
	pc, err := c.PayloadCodec()
	require.NoError(t, err)
	assert.Equal(t, "k2", pc.PrimaryKeyID())
	var got string
	require.NoError(t, pc.DataConverter().FromPayload(sealed, &got), "a payload of the older key decrypts")
	assert.Equal(t, "tok_3ds", got)
}

func TestPayloadCodec_EncryptOff_WritesInClear(t *testing.T) {
	t.Parallel()
	pc, err := load(t, secrets("TEMPORAL_CODEC_ENCRYPT", "false")).PayloadCodec()
	require.NoError(t, err)
	p, err := pc.DataConverter().ToPayload("tok_3ds")
	require.NoError(t, err)
	assert.Equal(t, "json/plain", string(p.Metadata["encoding"]))
}

func TestDevSecrets_MadeOncePerDataFolder_ReadableByItsOwnerOnly(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := load(t, map[string]string{"DATA_DIR": dir})
	first, err := c.WithDevSecrets()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, len(first.JWTSecret), config.MinSecretBytes)
	assert.NotEqual(t, first.JWTSecret, first.PaymentWebhookSecret)
	require.NoError(t, first.CheckSecrets(), "as strong as a production secret")
	again, err := c.WithDevSecrets()
	require.NoError(t, err)
	assert.Equal(t, first.JWTSecret, again.JWTSecret, "the same folder keeps its secrets across starts")

	other, err := load(t, map[string]string{"DATA_DIR": t.TempDir()}).WithDevSecrets()
	require.NoError(t, err)
	assert.NotEqual(t, first.JWTSecret, other.JWTSecret, "another folder, other secrets")

	fi, err := os.Stat(filepath.Join(dir, "dev-secrets.json"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	set, err := load(t, map[string]string{"DATA_DIR": dir, "AUTH_JWT_SECRET": good}).WithDevSecrets()
	require.NoError(t, err)
	assert.Equal(t, good, set.JWTSecret, "a secret the environment sets wins")
	assert.True(t, strings.HasPrefix(set.PaymentWebhookSecret, first.PaymentWebhookSecret[:8]))
	assert.Equal(t, first.CodecKey, set.CodecKey)
	assert.True(t, strings.HasPrefix(first.CodecKey.ID, "dev-"), first.CodecKey.ID)
	assert.NotEqual(t, first.CodecKey, other.CodecKey, "another folder, another codec key")
}

// TestDevSecrets_OlderFolderWithoutCodecKey_GetsOneAdded: a data folder made before the codec key
// existed keeps its token and webhook secrets (its tokens stay valid) and gains a codec key, once.
func TestDevSecrets_OlderFolderWithoutCodecKey_GetsOneAdded(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "dev-secrets.json")
	older := `{"jwtSecret":"` + good + `-jwt","webhookSecret":"` + good + `-webhook"}`
	require.NoError(t, os.WriteFile(file, []byte(older), 0o600))

	c := load(t, map[string]string{"DATA_DIR": dir})
	var got [4]config.Config
	var wg sync.WaitGroup
	for i := range got { // starts at once take turns: one key for all
		wg.Go(func() {
			var err error
			got[i], err = c.WithDevSecrets()
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	for _, g := range got[1:] {
		assert.Equal(t, got[0].CodecKey, g.CodecKey)
	}
	first := got[0]
	assert.Equal(t, good+"-jwt", first.JWTSecret)
	assert.Equal(t, good+"-webhook", first.PaymentWebhookSecret)
	require.NoError(t, first.CheckSecrets())

	kept, err := config.ReadDevSecrets(dir)
	require.NoError(t, err)
	assert.Equal(t, first.CodecKey.ID, kept.CodecKeyID, "the key is written to the folder")
	again, err := c.WithDevSecrets()
	require.NoError(t, err)
	assert.Equal(t, first.CodecKey, again.CodecKey, "and kept across starts")
	fi, err := os.Stat(file)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	leftovers, err := filepath.Glob(filepath.Join(dir, ".dev-secrets-*"))
	require.NoError(t, err)
	assert.Empty(t, leftovers)
}

// TestClusterSecrets_MadeOnceInItsFolder_NotTheDevOnes: the cluster's secrets are made once in its
// own folder (owner-only), kept across starts, strong enough for api and worker, and never those
// `checkout-dev dev` made in the same data folder.
func TestClusterSecrets_MadeOnceInItsFolder_NotTheDevOnes(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	dir := filepath.Join(data, "cluster")
	first, err := config.ClusterSecretsOf(dir)
	require.NoError(t, err)
	again, err := config.ClusterSecretsOf(dir)
	require.NoError(t, err)
	assert.Equal(t, first, again, "kept across starts")
	assert.True(t, strings.HasPrefix(first.CodecKeyID, "cluster-"), first.CodecKeyID)
	fi, err := os.Stat(config.ClusterSecretsFile(dir))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	c := load(t, map[string]string{"AUTH_JWT_SECRET": first.JWT, "PAYMENT_WEBHOOK_SECRET": first.Webhook,
		"TEMPORAL_CODEC_KEY": first.CodecKey, "TEMPORAL_CODEC_KID": first.CodecKeyID, "PAYMENT_PROVIDER": "paysim"})
	require.NoError(t, c.CheckSecrets(), "as api and worker require")

	dev, err := load(t, map[string]string{"DATA_DIR": data}).WithDevSecrets()
	require.NoError(t, err)
	assert.NotEqual(t, dev.JWTSecret, first.JWT)
	assert.NotEqual(t, dev.CodecKey.ID, first.CodecKeyID)
}

// provider are the settings of an identity provider, as every mode but `checkout-dev dev` has.
var provider = []string{"AUTH_OIDC_ISSUER", "https://id.example", "AUTH_OIDC_AUDIENCE", "checkout",
	"AUTH_OIDC_JWKS_URL", "http://127.0.0.1:1/keys"}

func TestCheckIdentityProvider_RefusesAuthJWTRoles(t *testing.T) {
	t.Parallel()
	for _, roles := range []string{"shopper,seller", "shopper", "seller", "support"} {
		c, err := config.Load(func(k string) string { return secrets(append(provider, "AUTH_JWT_ROLES", roles)...)[k] })
		if err != nil {
			assert.NotContains(t, err.Error(), "\n", "%s: one line", roles)
			continue // refused as it is read
		}
		err = c.CheckIdentityProvider()
		require.Error(t, err, roles)
		assert.Contains(t, err.Error(), "AUTH_JWT_ROLES="+roles+": outside `checkout-dev dev` no HS256 token is accepted", roles)
		assert.NotContains(t, err.Error(), "\n", "%s: one line", roles)
	}
	for _, roles := range []string{"", "none"} {
		assert.NoError(t, load(t, secrets(append(provider, "AUTH_JWT_ROLES", roles)...)).CheckIdentityProvider(), "%q", roles)
	}
}

// Outside dev the shared secret verifies nothing: a shopper's or a seller's HS256 token, which
// AUTH_JWT_ROLES once let through by default, is refused like staff's.
func TestAuthKeys_WithAProvider_RefuseEveryHS256Token(t *testing.T) {
	t.Parallel()
	keys := load(t, secrets(provider...)).AuthKeys()
	for _, p := range []auth.Principal{{UserID: 7, Role: auth.RoleShopper}, {UserID: 1042, Role: auth.RoleSeller, SellerID: 42},
		{UserID: 900, Role: auth.RoleSupport}} {
		tok, err := keys.Mint(p, time.Hour)
		require.NoError(t, err)
		_, err = keys.Verify(tok)
		assert.ErrorIs(t, err, auth.ErrSharedSecretRefused, p.Role)
	}
	dev := load(t, secrets()).AuthKeys()
	tok, err := dev.Mint(auth.Principal{UserID: 7, Role: auth.RoleShopper}, time.Hour)
	require.NoError(t, err)
	_, err = dev.Verify(tok)
	assert.NoError(t, err, "without a provider (dev, tests) the shared secret's tokens are accepted")
}
