package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/dev/pgserver"
	"github.com/marketplace/checkout/internal/dev/testenv"
)

// TestModes_APIAndWorkerRefuseToStartWithoutSecretsOfTheirOwn: outside dev, a missing secret, the
// development values once published in the repository, a short secret, a codec key that is
// missing, unnamed, not base64 or not AES-256, no TLS to Temporal (nor its explicit opt-out), no
// payment provider named, no event broker, or an admission limit
// that is not one stop the service before it listens or polls, with one line that names the
// setting.
func TestModes_APIAndWorkerRefuseToStartWithoutSecretsOfTheirOwn(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	good := strings.Repeat("s", 40)
	secrets := []string{"AUTH_JWT_SECRET=" + good, "PAYMENT_WEBHOOK_SECRET=" + good}
	codec := []string{"TEMPORAL_CODEC_KEY=" + testenv.CodecKey, "TEMPORAL_CODEC_KID=k1"}
	plaintext := []string{"TEMPORAL_ALLOW_PLAINTEXT=true"}
	with := func(lists ...[]string) []string { return slices.Concat(lists...) }
	for name, tc := range map[string]struct {
		env  []string
		want string
	}{
		"no secrets":           {nil, "AUTH_JWT_SECRET is not set"},
		"published jwt secret": {[]string{"AUTH_JWT_SECRET=dev-only-jwt-secret-change-me", "PAYMENT_WEBHOOK_SECRET=" + good}, "AUTH_JWT_SECRET is a development value"},
		"short webhook secret": {[]string{"AUTH_JWT_SECRET=" + good, "PAYMENT_WEBHOOK_SECRET=short"}, "PAYMENT_WEBHOOK_SECRET is 5 bytes"},
		"no codec key":         {secrets, "TEMPORAL_CODEC_KEY is not set"},
		"codec key unnamed":    {with(secrets, codec[:1]), "TEMPORAL_CODEC_KID is not set"},
		"codec key not base64": {with(secrets, []string{"TEMPORAL_CODEC_KEY=not base64!", "TEMPORAL_CODEC_KID=k1"}), "TEMPORAL_CODEC_KEY: not base64"},
		"codec key of 16 bytes": {with(secrets, []string{"TEMPORAL_CODEC_KEY=c2l4dGVlbi1ieXRlLWtleQ==", "TEMPORAL_CODEC_KID=k1"}),
			"TEMPORAL_CODEC_KEY is 16 bytes"},
		"older codec key short": {with(secrets, codec, []string{"TEMPORAL_CODEC_KEYS=k0=c2hvcnQ="}), "TEMPORAL_CODEC_KEYS k0 is 5 bytes"},
		"no TLS to Temporal":    {with(secrets, codec), "TEMPORAL_TLS_CERT, TEMPORAL_TLS_KEY and TEMPORAL_TLS_CA are not set"},
		"no payment provider":   {with(secrets, codec, plaintext), "PAYMENT_PROVIDER is not set"},
		"no event broker": {with(secrets, codec, plaintext, []string{"PAYMENT_PROVIDER=paysim", "AUTH_OIDC_ISSUER=https://id.example",
			"AUTH_OIDC_AUDIENCE=temporal-ui", "AUTH_OIDC_JWKS_URL=http://127.0.0.1:1/keys"}), "NATS_URL is required"},
		"in-flight bound not a number": {[]string{"ORDERS_MAX_IN_FLIGHT=lots"}, `ORDERS_MAX_IN_FLIGHT="lots": not an integer`},
		"admission latency too short":  {[]string{"ORDERS_ADMIT_MAX_LATENCY=1ms"}, "ORDERS_ADMIT_MAX_LATENCY 1ms: between 10ms and 30s"},
	} {
		for _, cmd := range []string{"api", "worker"} {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			c := exec.CommandContext(ctx, bin, cmd)
			c.Env = append(cleanEnv(), "DATABASE_URL=postgres://nobody@127.0.0.1:1/none", "TEMPORAL_ADDRESS=127.0.0.1:1")
			c.Env = append(c.Env, tc.env...)
			var stderr bytes.Buffer
			c.Stderr = &stderr
			err := c.Run()
			cancel()
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "%s %s must refuse to start", cmd, name)
			assert.Equal(t, 1, exit.ExitCode())
			out := strings.TrimSpace(stderr.String())
			assert.Contains(t, out, tc.want, "%s %s", cmd, name)
			assert.Equal(t, 1, strings.Count(out, "\n")+1, "%s %s: one clear line, got %q", cmd, name, out)
		}
	}

	// The API also needs the staff's identity provider: the shared secret never makes staff.
	c := exec.Command(bin, "api")
	c.Env = append(cleanEnv(), "DATABASE_URL=postgres://nobody@127.0.0.1:1/none", "TEMPORAL_ADDRESS=127.0.0.1:1",
		"PAYMENT_PROVIDER=paysim")
	c.Env = append(c.Env, with(secrets, codec, plaintext)...)
	out, err := c.CombinedOutput()
	require.Error(t, err, "api without an identity provider must refuse to start")
	assert.Equal(t, "checkout api: AUTH_OIDC_ISSUER is not set: outside `checkout-dev dev` staff tokens come from an identity provider (set AUTH_OIDC_ISSUER, AUTH_OIDC_AUDIENCE, AUTH_OIDC_JWKS_URL)",
		strings.TrimSpace(string(out)))

	// With one, no HS256 token is accepted for any role: AUTH_JWT_ROLES, which once let shoppers'
	// and sellers' through, stops the API with one line.
	c = exec.Command(bin, "api")
	c.Env = append(cleanEnv(), "DATABASE_URL=postgres://nobody@127.0.0.1:1/none", "TEMPORAL_ADDRESS=127.0.0.1:1",
		"PAYMENT_PROVIDER=paysim", "AUTH_OIDC_ISSUER=https://id.example", "AUTH_OIDC_AUDIENCE=temporal-ui",
		"AUTH_OIDC_JWKS_URL=http://127.0.0.1:1/keys", "AUTH_JWT_ROLES=shopper,seller")
	c.Env = append(c.Env, with(secrets, codec, plaintext)...)
	out, err = c.CombinedOutput()
	require.Error(t, err, "api with AUTH_JWT_ROLES must refuse to start")
	assert.Equal(t, "checkout api: AUTH_JWT_ROLES=shopper,seller: outside `checkout-dev dev` no HS256 token is accepted for any role (shoppers and sellers get theirs from the identity provider): unset it",
		strings.TrimSpace(string(out)))
}

// TestModes_MetricsOnlyOnTheirInternalPort: every mode serves Prometheus /metrics on METRICS_ADDR
// and the API's public port answers /metrics 404 in the error model; dev, where the API and the
// worker run in one process, has one metrics listener with the figures of both.
func TestModes_MetricsOnlyOnTheirInternalPort(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	const apiFamily, workerFamily = "checkout_cart_cache_listening", "checkout_availability_lag_seconds"
	for _, tc := range []struct {
		mode        string
		api         bool
		has, hasNot []string
	}{
		{"api", true, []string{apiFamily}, []string{workerFamily}},
		{"worker", false, []string{workerFamily}, []string{apiFamily}},
		{"dev", true, []string{apiFamily, workerFamily}, nil},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			public, internal := freeAddr(t), freeAddr(t)
			c := exec.Command(bin, tc.mode)
			if tc.mode == "dev" {
				c = exec.Command(buildHarness(t), tc.mode)
			}
			c.Env = append(cleanEnv(), "DATABASE_URL="+testenv.DatabaseURL(t), "TEMPORAL_ADDRESS="+testenv.TemporalAddress(t),
				"TEMPORAL_TASK_QUEUE=e2e-"+randomHex(6), "SCHEDULES_ENABLED=false", "DATA_DIR="+t.TempDir(),
				"AUTH_JWT_SECRET="+testenv.Secret, "PAYMENT_WEBHOOK_SECRET="+testenv.Secret, "PAYMENT_PROVIDER=paysim",
				"TEMPORAL_CODEC_KEY="+testenv.CodecKey, "TEMPORAL_CODEC_KID=k1",
				"HTTP_ADDR="+public, "METRICS_ADDR="+internal, "LOG_LEVEL=warn", "TEMPORAL_ALLOW_PLAINTEXT=true",
				"AUTH_OIDC_ISSUER=https://id.example", "AUTH_OIDC_AUDIENCE=temporal-ui", "AUTH_OIDC_JWKS_URL=http://127.0.0.1:1/keys",
				// dev's Jaeger listens on make run's fixed ports: none here.
				"JAEGER_UI_PORT=0",
				"NATS_URL="+testenv.NATSURL(t), "EVENTS_PREFIX="+testenv.EventsPrefix(t), "EVENTS_MAX_MB="+testenv.TestEventsMaxMB)
			var logs bytes.Buffer
			c.Stderr = &logs
			if os.Getenv("E2E_LOG") != "" {
				c.Stdout, c.Stderr = os.Stderr, os.Stderr
			}
			c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			require.NoError(t, c.Start())
			t.Cleanup(func() {
				_ = c.Process.Signal(os.Interrupt)
				_ = c.Wait()
				if t.Failed() {
					t.Logf("%s's log:\n%s", tc.mode, logs.String())
				}
			})

			serves := func(body, family string) bool { return strings.Contains(body, "\n"+family+" ") }
			// The worker's figures are registered as its loops start, after the listener.
			metrics := waitFor(t, "http://"+internal+"/metrics", func(g got) bool {
				for _, family := range tc.has {
					if !serves(g.body, family) {
						return false
					}
				}
				return true
			})
			assert.True(t, strings.HasPrefix(metrics.contentType, "text/plain"), metrics.contentType)
			assert.True(t, serves(metrics.body, "checkout_reservation_attempts_total"))
			for _, family := range tc.hasNot {
				assert.False(t, serves(metrics.body, family), "%s serves no %s", tc.mode, family)
			}
			if !tc.api {
				return
			}
			waitFor(t, "http://"+public+"/healthz", func(got) bool { return true })
			a, err := fetch("http://" + public + "/metrics")
			require.NoError(t, err)
			assert.Equal(t, http.StatusNotFound, a.status, a.body)
			var e struct{ Code, Message string }
			require.NoError(t, json.Unmarshal([]byte(a.body), &e), a.body)
			assert.Equal(t, "NOT_FOUND", e.Code)
			assert.NotContains(t, a.body, "checkout_")
		})
	}
}

// TestModes_DevWithPrometheus_ScrapesItsMetricsAndStopsWithIt: dev with PROMETHEUS_PORT runs the
// distribution's Prometheus on that loopback port, scraping dev's /metrics with the product's rules,
// and Ctrl-C stops it with everything else.
func TestModes_DevWithPrometheus_ScrapesItsMetricsAndStopsWithIt(t *testing.T) {
	t.Parallel()
	bin := buildHarness(t)
	public, internal, prom := freeAddr(t), freeAddr(t), freeAddr(t)
	_, port, _ := strings.Cut(prom, ":")
	c := exec.Command(bin, "dev")
	c.Dir = ".." // where `make run` starts it: deploy/prometheus/rules.yml is found from there
	c.Env = append(cleanEnv(), "DATABASE_URL="+testenv.DatabaseURL(t), "TEMPORAL_ADDRESS="+testenv.TemporalAddress(t),
		"TEMPORAL_TASK_QUEUE=e2e-"+randomHex(6), "SCHEDULES_ENABLED=false", "DATA_DIR="+t.TempDir(),
		"AUTH_JWT_SECRET="+testenv.Secret, "PAYMENT_WEBHOOK_SECRET="+testenv.Secret,
		"TEMPORAL_CODEC_KEY="+testenv.CodecKey, "TEMPORAL_CODEC_KID=k1",
		"HTTP_ADDR="+public, "METRICS_ADDR="+internal, "PROMETHEUS_PORT="+port, "LOG_LEVEL=warn", "JAEGER_UI_PORT=0",
		"NATS_URL="+testenv.NATSURL(t), "EVENTS_PREFIX="+testenv.EventsPrefix(t), "EVENTS_MAX_MB="+testenv.TestEventsMaxMB)
	var logs bytes.Buffer
	c.Stdout, c.Stderr = &logs, &logs
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, c.Start())
	exited := false
	t.Cleanup(func() {
		if !exited {
			_ = c.Process.Signal(os.Interrupt)
			_ = c.Wait()
		}
		if t.Failed() {
			t.Logf("dev's output:\n%s", logs.String())
		}
	})

	query := "http://" + prom + "/api/v1/query?query=" + url.QueryEscape(`up{job="checkout"} == 1`)
	g := waitFor(t, query, func(g got) bool { return strings.Contains(g.body, internal) })
	assert.Contains(t, g.body, `"job":"checkout"`)
	rules := waitFor(t, "http://"+prom+"/api/v1/rules", func(got) bool { return true })
	assert.Contains(t, rules.body, `"name":"CheckoutSweeperLagging"`, "the product's rules are loaded")

	require.NoError(t, c.Process.Signal(os.Interrupt))
	require.NoError(t, c.Wait())
	exited = true
	_, err := fetch("http://" + prom + "/-/ready")
	assert.Error(t, err, "Prometheus stopped with dev")
}

func freeAddr(t *testing.T) string {
	port, err := pgserver.FreePort()
	require.NoError(t, err)
	return "127.0.0.1:" + strconv.Itoa(port)
}

type got struct {
	status            int
	contentType, body string
}

func fetch(url string) (got, error) {
	resp, err := http.Get(url)
	if err != nil {
		return got{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return got{resp.StatusCode, resp.Header.Get("Content-Type"), string(body)}, err
}

// waitFor polls url until it answers 200 with what ready wants (the process is starting).
func waitFor(t *testing.T, url string, ready func(got) bool) got {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if g, err := fetch(url); err == nil && g.status == http.StatusOK && ready(g) {
			return g
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer as expected within a minute", url)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cleanEnv is the test process's environment without the product's settings.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "AUTH_JWT_SECRET", "AUTH_JWT_KEYS", "PAYMENT_WEBHOOK_SECRET", "PAYMENT_PROVIDER", "DATABASE_URL", "TEMPORAL_ADDRESS",
			"TEMPORAL_CODEC_KEY", "TEMPORAL_CODEC_KID", "TEMPORAL_CODEC_KEYS":
			continue
		}
		env = append(env, kv)
	}
	return env
}
