package attack

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/internal/dev/cluster"
)

// DevTarget is `make run`'s stack as the settings getenv gives describe it, as `checkout-dev dev`
// reads them: the API at PUBLIC_BASE_URL (http://localhost:8080), its one process's /metrics
// (METRICS_ADDR), the dev server's frontend and UI (TEMPORAL_PORT, TEMPORAL_UI_PORT), and the
// data folder's development secrets (DATA_DIR/dev-secrets.json) where AUTH_JWT_SECRET and
// PAYMENT_WEBHOOK_SECRET are not set.
func DevTarget(getenv func(string) string) (Target, error) {
	dataDir := getenv("DATA_DIR")
	if dataDir == "" {
		dataDir = ".data"
	}
	s, err := config.ReadDevSecrets(dataDir)
	if err != nil {
		return Target{}, fmt.Errorf("the local stack's secrets (start it with make run first): %w", err)
	}
	cfg, err := config.Load(func(k string) string {
		switch v := getenv(k); {
		case v != "":
			return v
		case k == "AUTH_JWT_SECRET":
			return s.JWT
		case k == "PAYMENT_WEBHOOK_SECRET":
			return s.Webhook
		case k == "HTTP_ADDR":
			return "127.0.0.1" + config.DefaultHTTPAddr // where dev listens unless told otherwise
		}
		return ""
	})
	if err != nil {
		return Target{}, err
	}
	return Target{Name: "make run", Base: cfg.PublicBaseURL, MetricsURL: cfg.MetricsURL(),
		TemporalAddress: fmt.Sprintf("127.0.0.1:%d", cfg.Dev.TemporalPort),
		TemporalUI:      fmt.Sprintf("http://localhost:%d", cfg.Dev.TemporalUIPort), Namespace: cfg.TemporalNamespace,
		Keys: cfg.AuthKeys(), WebhookSecret: cfg.PaymentWebhookSecret}, nil
}

// ClusterTarget is `make cluster`'s stack, as its checkout.env describes it (the settings its
// processes run with: the one source of its secrets): the API through HAProxy, the first API
// replica's /metrics (from processes.json beside it), its Temporal frontend and UI. Its Temporal
// authenticates its callers when the file names a client certificate (TEMPORAL_TLS_*): the
// control plane's attacks run then.
func ClusterTarget(envFile string) (Target, error) {
	env, err := readEnvFile(envFile)
	if err != nil {
		return Target{}, fmt.Errorf("the cluster's settings (start it with make cluster first): %w", err)
	}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		return Target{}, fmt.Errorf("%s: %w", envFile, err)
	}
	t := Target{Name: "make cluster", Base: cfg.PublicBaseURL, MetricsURL: cfg.MetricsURL(),
		TemporalAddress: cfg.TemporalAddress, Namespace: cfg.TemporalNamespace, Keys: cfg.AuthKeys(),
		WebhookSecret: cfg.PaymentWebhookSecret}
	if len(cfg.TemporalUIOrigins) > 0 {
		t.TemporalUI = cfg.TemporalUIOrigins[0]
	}
	if addr := apiMetrics(filepath.Join(filepath.Dir(envFile), "processes.json")); addr != "" {
		t.MetricsURL = "http://" + addr + "/metrics"
	}
	if cfg.TemporalTLS.Enabled() {
		// The frontend takes only clients with a certificate of the cluster's CA; the file's is
		// the tools', which the plaintext-signal attack connects with.
		tlsConfig, err := cfg.TemporalTLSConfig()
		if err != nil {
			return Target{}, fmt.Errorf("%s: %w", envFile, err)
		}
		t.TemporalAuth = true
		t.TemporalOptions.ConnectionOptions.TLS = tlsConfig
	}
	// Its workers run with the file's settings: they refuse plaintext unless it says otherwise.
	t.PlaintextRefused = !cfg.CodecAcceptPlaintext
	if cfg.OIDCIssuer != "" {
		// Tokens come from the identity provider alone: the run signs its demo people in, as a
		// browser does, with the passwords the cluster keeps, and gets shoppers' and sellers'
		// tokens through the grants the cluster registered its keys for.
		secrets := filepath.Join(filepath.Dir(envFile), cluster.OIDCDir, "secrets.json")
		ui := t.TemporalUI
		t.StaffIssuer, t.StaffAudience = cfg.OIDCIssuer, cfg.OIDCAudience
		// Shoppers and sellers too: the API takes no token of the shared secret.
		tokens, err := cluster.ClusterTokens(filepath.Dir(envFile), cfg.OIDCIssuer, cfg.OIDCAudience)
		if err != nil {
			return Target{}, fmt.Errorf("the cluster's tokens: %w", err)
		}
		t.Tokens = tokens
		t.PersonToken = func(ctx context.Context, role string) (string, error) {
			raw, err := os.ReadFile(secrets)
			if err != nil {
				return "", err
			}
			var s cluster.OIDCSecrets
			if err := json.Unmarshal(raw, &s); err != nil {
				return "", err
			}
			for _, p := range cluster.DemoPeople {
				if p.Role == role {
					return cluster.SignIn(ctx, ui, p.Name, s.Passwords[p.Name])
				}
			}
			return "", fmt.Errorf("the cluster has no demo person of role %s", role)
		}
	}
	return t, nil
}

// apiMetrics is the /metrics address of the cluster's first API replica, as processes.json names
// its listeners (the API's, then its metrics'); empty when unknown.
func apiMetrics(processes string) string {
	raw, err := os.ReadFile(processes)
	if err != nil {
		return ""
	}
	var state map[string]struct {
		Service string   `json:"service"`
		Listens []string `json:"listens"`
	}
	if json.Unmarshal(raw, &state) != nil {
		return ""
	}
	if p, ok := state["api-1"]; ok && p.Service == "api" && len(p.Listens) == 2 {
		return p.Listens[1]
	}
	return ""
}

// ClusterEnvFile is where a cluster's data folder keeps its checkout.env.
func ClusterEnvFile(clusterDir string) string { return filepath.Join(clusterDir, "checkout.env") }

// readEnvFile reads KEY=value lines; # starts a comment.
func readEnvFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok {
			env[strings.TrimSpace(k)] = v
		}
	}
	return env, sc.Err()
}
