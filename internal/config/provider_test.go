package config_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/config"
)

func TestLoad_PaymentProvider_StripeNeedsItsSecretKey_OthersRefused(t *testing.T) {
	t.Parallel()
	load := func(env map[string]string) (config.Config, error) {
		return config.Load(func(k string) string { return env[k] })
	}
	_, err := load(map[string]string{"PAYMENT_PROVIDER": "stripe"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "STRIPE_SECRET_KEY")
	_, err = load(map[string]string{"PAYMENT_PROVIDER": "stripe", "STRIPE_SECRET_KEY": "pk_test_publishable"})
	assert.ErrorContains(t, err, "STRIPE_SECRET_KEY", "a publishable key cannot move money")

	cfg, err := load(map[string]string{"PAYMENT_PROVIDER": "stripe", "STRIPE_SECRET_KEY": "sk_test_123",
		"PUBLIC_BASE_URL": "https://shop.example"})
	require.NoError(t, err)
	assert.Equal(t, config.Stripe{SecretKey: "sk_test_123", ReturnURL: "https://shop.example"}, cfg.Stripe,
		"Stripe's own API, the shop's page after 3-D Secure")

	_, err = load(map[string]string{"PAYMENT_PROVIDER": "adyen"})
	assert.ErrorContains(t, err, `PAYMENT_PROVIDER "adyen"`)
}
