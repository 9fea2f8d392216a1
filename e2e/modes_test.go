package e2e_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestModes_APIAndWorkerRefuseToStartWithoutSecretsOfTheirOwn: outside dev, a missing secret, the
// development values once published in the repository, a short secret, or no payment provider
// named stop the service before it listens or polls, with one line that names the setting.
func TestModes_APIAndWorkerRefuseToStartWithoutSecretsOfTheirOwn(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	good := strings.Repeat("s", 40)
	for name, tc := range map[string]struct {
		env  []string
		want string
	}{
		"no secrets":           {nil, "AUTH_JWT_SECRET is not set"},
		"published jwt secret": {[]string{"AUTH_JWT_SECRET=dev-only-jwt-secret-change-me", "PAYMENT_WEBHOOK_SECRET=" + good}, "AUTH_JWT_SECRET is a development value"},
		"short webhook secret": {[]string{"AUTH_JWT_SECRET=" + good, "PAYMENT_WEBHOOK_SECRET=short"}, "PAYMENT_WEBHOOK_SECRET is 5 bytes"},
		"no payment provider":  {[]string{"AUTH_JWT_SECRET=" + good, "PAYMENT_WEBHOOK_SECRET=" + good}, "PAYMENT_PROVIDER is not set"},
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
}

// cleanEnv is the test process's environment without the product's settings.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "AUTH_JWT_SECRET", "AUTH_JWT_KEYS", "PAYMENT_WEBHOOK_SECRET", "PAYMENT_PROVIDER", "DATABASE_URL", "TEMPORAL_ADDRESS":
			continue
		}
		env = append(env, kv)
	}
	return env
}
