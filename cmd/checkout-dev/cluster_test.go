package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/internal/dev/cluster"
)

// TestCluster_OneSourceOfSecrets: secrets and token settings exported in the shell that starts a
// cluster reach neither its processes nor its tools: the processes run on the cluster's own file,
// the shell's settings are dropped before any child inherits them, and checkout.env names every
// one of them, so that a tool sourcing it signs as the processes check (make chaos minted with the
// file's secret while the processes took the shell's, and every request was 401).
func TestCluster_OneSourceOfSecrets(t *testing.T) {
	if _, err := findHAProxy(); err != nil {
		t.Skip("haproxy is not installed (make test installs it): the cluster's options were NOT checked")
	}
	bin := t.TempDir()
	for _, name := range []string{"temporal-server", "temporal-sql-tool", "temporal-ui-server", "oidc-provider", "jaeger", "nats-server"} {
		require.NoError(t, os.WriteFile(filepath.Join(bin, name), nil, 0o755))
	}
	shell := map[string]string{"AUTH_JWT_SECRET": "shell-jwt-secret-0123456789abcdef0123456789",
		"PAYMENT_WEBHOOK_SECRET": "shell-webhook-secret-0123456789abcdef01234", "AUTH_JWT_KID": "shell-kid",
		"AUTH_JWT_ISSUER": "https://shell.example", "TEMPORAL_CODEC_KID": "shell-codec"}
	for k, v := range shell {
		t.Setenv(k, v)
	}
	cfg, err := config.FromEnv()
	require.NoError(t, err)
	dir := t.TempDir()
	o, err := clusterOptions(cfg, clusterFlags{dir: dir, bin: bin, apis: 1, workers: 1, shards: 1})
	require.NoError(t, err)
	file, err := config.ClusterSecretsOf(dir)
	require.NoError(t, err)
	assert.Equal(t, file, o.Secrets, "the processes run on the cluster's own secrets")

	dropped := dropShellSecrets(os.Getenv, os.Unsetenv)
	assert.ElementsMatch(t, []string{"AUTH_JWT_SECRET", "PAYMENT_WEBHOOK_SECRET", "AUTH_JWT_KID", "AUTH_JWT_ISSUER",
		"TEMPORAL_CODEC_KID"}, dropped)
	for k := range shell {
		assert.Empty(t, os.Getenv(k), "%s: no child inherits it", k)
	}

	env := checkoutEnv(o, cluster.NewPlan(o))
	assert.Contains(t, env, "\nAUTH_JWT_SECRET="+file.JWT+"\n")
	assert.Contains(t, env, "\nPAYMENT_WEBHOOK_SECRET="+file.Webhook+"\n")
	for _, name := range stackSecrets {
		assert.Equal(t, 1, strings.Count(env, "\n"+name+"="), "checkout.env sets %s once, so that sourcing it overrides the shell", name)
	}
	assert.NotContains(t, env, "shell")
}

// A cluster started without --history-shards runs with the count its folder was set up with.
func TestClusterOptions_ShardsOfTheFolder(t *testing.T) {
	bin := t.TempDir()
	for _, name := range []string{"temporal-server", "temporal-sql-tool", "temporal-ui-server", "oidc-provider", "jaeger", "nats-server"} {
		require.NoError(t, os.WriteFile(filepath.Join(bin, name), nil, 0o755))
	}
	cfg, err := config.FromEnv()
	require.NoError(t, err)
	fresh := t.TempDir()
	o, err := clusterOptions(cfg, clusterFlags{dir: fresh, bin: bin, apis: 1, workers: 1})
	require.NoError(t, err)
	assert.Equal(t, cluster.DefaultHistoryShards, o.HistoryShards)
	assert.Contains(t, strings.Join(cluster.NewPlan(o).Temporal[1].Env, " "), fmt.Sprintf("NUM_HISTORY_SHARDS=%d", cluster.DefaultHistoryShards))

	set := t.TempDir()
	require.NoError(t, cluster.CheckShards(set, 5))
	o, err = clusterOptions(cfg, clusterFlags{dir: set, bin: bin, apis: 1, workers: 1})
	require.NoError(t, err)
	assert.Equal(t, 5, o.HistoryShards)
	assert.Contains(t, strings.Join(cluster.NewPlan(o).Temporal[1].Env, " "), "NUM_HISTORY_SHARDS=5")
	_, err = clusterOptions(cfg, clusterFlags{dir: set, bin: bin, apis: 1, workers: 1, shards: 8})
	assert.ErrorContains(t, err, "set up with 5 history shards, not 8")
}
