package config_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/dev/cluster"
)

// TestCheckTemporalTLS_MutualTLSOrTheExplicitOptOut: api and worker need all three TLS files, or
// TEMPORAL_ALLOW_PLAINTEXT=true and none of them; each refusal is one line naming the settings.
func TestCheckTemporalTLS_MutualTLSOrTheExplicitOptOut(t *testing.T) {
	t.Parallel()
	pki, err := cluster.EnsurePKI(t.TempDir())
	require.NoError(t, err)
	full := map[string]string{"TEMPORAL_ADDRESS": "127.0.0.1:7233",
		"TEMPORAL_TLS_CERT": pki.CertFile(cluster.IdentityWorker), "TEMPORAL_TLS_KEY": pki.KeyFile(cluster.IdentityWorker),
		"TEMPORAL_TLS_CA": pki.CAFile()}
	with := func(extra map[string]string, drop ...string) map[string]string {
		out := map[string]string{}
		for k, v := range full {
			out[k] = v
		}
		for k, v := range extra {
			out[k] = v
		}
		for _, k := range drop {
			delete(out, k)
		}
		return out
	}
	for name, tc := range map[string]struct {
		env  map[string]string
		want string
	}{
		"nothing":           {map[string]string{}, "TEMPORAL_TLS_CERT, TEMPORAL_TLS_KEY and TEMPORAL_TLS_CA are not set"},
		"opt-out":           {map[string]string{"TEMPORAL_ALLOW_PLAINTEXT": "true"}, ""},
		"all three":         {full, ""},
		"no CA":             {with(nil, "TEMPORAL_TLS_CA"), "set all three"},
		"both":              {with(map[string]string{"TEMPORAL_ALLOW_PLAINTEXT": "true"}), "choose one"},
		"key of another":    {with(map[string]string{"TEMPORAL_TLS_KEY": pki.KeyFile(cluster.IdentityAPI)}), "TEMPORAL_TLS_CERT/TEMPORAL_TLS_KEY"},
		"CA file not there": {with(map[string]string{"TEMPORAL_TLS_CA": "/nonexistent/ca.pem"}), "TEMPORAL_TLS_CA"},
	} {
		err := load(t, tc.env).CheckTemporalTLS()
		if tc.want == "" {
			assert.NoError(t, err, name)
			continue
		}
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), tc.want, name)
		assert.NotContains(t, err.Error(), "\n", name)
	}
}

// TestTemporalTLSConfig_TheCertificateIsReadAgainAtEveryHandshake: a renewed certificate written
// over the old file is presented from the next connection on; the server name defaults to the
// address's host.
func TestTemporalTLSConfig_TheCertificateIsReadAgainAtEveryHandshake(t *testing.T) {
	t.Parallel()
	pki, err := cluster.EnsurePKI(t.TempDir())
	require.NoError(t, err)
	dir := t.TempDir()
	cert, key := dir+"/client.pem", dir+"/client-key.pem"
	copyFile := func(from, to string) {
		raw, err := os.ReadFile(from)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(to, raw, 0o600))
	}
	copyFile(pki.CertFile(cluster.IdentityWorker), cert)
	copyFile(pki.KeyFile(cluster.IdentityWorker), key)
	c := load(t, map[string]string{"TEMPORAL_ADDRESS": "temporal.internal:7233", "TEMPORAL_TLS_CERT": cert,
		"TEMPORAL_TLS_KEY": key, "TEMPORAL_TLS_CA": pki.CAFile()})
	cfg, err := c.TemporalTLSConfig()
	require.NoError(t, err)
	assert.Equal(t, "temporal.internal", cfg.ServerName)
	first, err := cfg.GetClientCertificate(nil)
	require.NoError(t, err)

	copyFile(pki.CertFile(cluster.IdentityAPI), cert)
	copyFile(pki.KeyFile(cluster.IdentityAPI), key)
	second, err := cfg.GetClientCertificate(nil)
	require.NoError(t, err)
	assert.NotEqual(t, first.Certificate[0], second.Certificate[0], "the new certificate, without a restart")
}
