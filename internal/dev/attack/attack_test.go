package attack_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/dev/attack"
	"github.com/marketplace/checkout/internal/dev/cluster"
)

// TestSuite_FortyAttacksAtLeast_EachNamedOnce: the table has every family the suite promises,
// each attack named once, with what it tries.
func TestSuite_FortyAttacksAtLeast_EachNamedOnce(t *testing.T) {
	t.Parallel()
	assert.GreaterOrEqual(t, len(attack.Suite), 40)
	seen := map[string]bool{}
	kinds := map[attack.Kind]int{}
	for _, a := range attack.Suite {
		assert.False(t, seen[a.Name], "%s twice", a.Name)
		seen[a.Name] = true
		kinds[a.Kind]++
		assert.NotEmpty(t, a.What, a.Name)
		assert.NotNil(t, a.Run, a.Name)
	}
	for _, k := range []attack.Kind{attack.KindAPI, attack.KindWebhook, attack.KindCodec, attack.KindMetrics,
		attack.KindTemporal, attack.KindTemporalUI, attack.KindWorker} {
		assert.Positive(t, kinds[k], "attacks on %s", k)
	}
}

// TestExecute_RefusesTargetsOffThisMachine: no attack is sent anywhere but this machine.
func TestExecute_RefusesTargetsOffThisMachine(t *testing.T) {
	t.Parallel()
	keys := auth.Keys{Signing: auth.Key{Secret: []byte("0123456789abcdef0123456789abcdef")}}
	ok := attack.Target{Base: "http://127.0.0.1:1", Keys: keys, WebhookSecret: "w"}
	for name, change := range map[string]func(*attack.Target){
		"API":         func(t *attack.Target) { t.Base = "http://checkout.example.com" },
		"metrics":     func(t *attack.Target) { t.MetricsURL = "http://10.0.0.1:9091/metrics" },
		"Temporal UI": func(t *attack.Target) { t.TemporalUI = "http://192.168.1.5:8233" },
		"Temporal":    func(t *attack.Target) { t.TemporalAddress = "temporal.example.com:7233" },
	} {
		target := ok
		change(&target)
		_, err := attack.Execute(context.Background(), target, attack.Options{Only: []string{"metrics-public-port"}})
		assert.ErrorContains(t, err, "refusing", name)
	}
}

// TestClusterTarget_FromItsCheckoutEnv: a cluster is attacked as its checkout.env says (the
// settings, and secrets, its processes run with), with its first API replica's /metrics; its
// Temporal counts as authenticating once the file names a client certificate, which the
// plaintext-signal attack then connects with.
func TestClusterTarget_FromItsCheckoutEnv(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := "# comment\nPUBLIC_BASE_URL=http://localhost:28080\nTEMPORAL_ADDRESS=127.0.0.1:27233\n" +
		"AUTH_JWT_SECRET=cluster-jwt-secret-0123456789abcdef0123\nAUTH_JWT_KID=\nPAYMENT_WEBHOOK_SECRET=cluster-webhook\n" +
		"TEMPORAL_UI_ORIGIN=http://localhost:28233\nMETRICS_ADDR=127.0.0.1:29201\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "checkout.env"), []byte(env), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "processes.json"),
		[]byte(`{"api-1": {"pid": 1, "service": "api", "listens": ["127.0.0.1:28081", "127.0.0.1:29101"]}}`), 0o644))
	target, err := attack.ClusterTarget(attack.ClusterEnvFile(dir))
	require.NoError(t, err)
	assert.Equal(t, "http://localhost:28080", target.Base)
	assert.Equal(t, "http://127.0.0.1:29101/metrics", target.MetricsURL, "an API replica's, where HTTP requests are counted")
	assert.Equal(t, "127.0.0.1:27233", target.TemporalAddress)
	assert.Equal(t, "http://localhost:28233", target.TemporalUI)
	assert.Equal(t, "cluster-jwt-secret-0123456789abcdef0123", string(target.Keys.Signing.Secret))
	assert.Equal(t, "cluster-webhook", target.WebhookSecret)
	assert.False(t, target.TemporalAuth, "no certificate named")

	assert.True(t, target.PlaintextRefused, "its workers refuse plaintext")

	pki, err := cluster.EnsurePKI(dir)
	require.NoError(t, err)
	withTLS := env + strings.Join(pki.ClientEnv(cluster.IdentityTools), "\n") + "\nTEMPORAL_CODEC_ACCEPT_PLAINTEXT=true\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "checkout.env"), []byte(withTLS), 0o600))
	target, err = attack.ClusterTarget(attack.ClusterEnvFile(dir))
	require.NoError(t, err)
	assert.True(t, target.TemporalAuth, "a frontend behind mutual TLS")
	assert.NotNil(t, target.TemporalOptions.ConnectionOptions.TLS, "the tools' certificate")
	assert.False(t, target.PlaintextRefused, "TEMPORAL_CODEC_ACCEPT_PLAINTEXT")
}
