package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/config"
)

const good = "a-secret-of-thirty-two-bytes-or-more-0123"

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
	} {
		err := load(t, tc.env).CheckSecrets()
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), tc.want, name)
		assert.NotContains(t, err.Error(), "\n", "%s: one line", name)
	}
	ok := load(t, map[string]string{"AUTH_JWT_SECRET": good, "AUTH_JWT_KID": "k2", "AUTH_JWT_KEYS": "k1=" + good + "-old",
		"PAYMENT_WEBHOOK_SECRET": good})
	require.NoError(t, ok.CheckSecrets())
	keys := ok.AuthKeys()
	assert.Equal(t, "k2", keys.Signing.ID)
	require.Len(t, keys.Verifying, 1)
	assert.Equal(t, "k1", keys.Verifying[0].ID)
}

func TestLoad_BadRotationKeys_Refused(t *testing.T) {
	t.Parallel()
	_, err := config.Load(func(k string) string { return map[string]string{"AUTH_JWT_KEYS": "no-equals-sign"}[k] })
	require.Error(t, err)
	assert.Contains(t, err.Error(), "AUTH_JWT_KEYS")
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
}
