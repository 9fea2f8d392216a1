package config_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/config"
)

// TestLoad_MetricsOnAPortOfTheirOwn: /metrics listens on loopback unless METRICS_ADDR says
// otherwise, never on the API's port.
func TestLoad_MetricsOnAPortOfTheirOwn(t *testing.T) {
	c, err := config.Load(func(string) string { return "" })
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:9091", c.MetricsAddr, "on this machine only by default")
	assert.Equal(t, "http://127.0.0.1:9091/metrics", c.MetricsURL())
	c, err = config.Load(func(k string) string { return map[string]string{"METRICS_ADDR": ":9091"}[k] })
	require.NoError(t, err)
	assert.Equal(t, ":9091", c.MetricsAddr, "every interface when a deployment says so")

	env := map[string]string{"HTTP_ADDR": "127.0.0.1:9000", "METRICS_ADDR": "127.0.0.1:9000"}
	_, err = config.Load(func(k string) string { return env[k] })
	assert.ErrorContains(t, err, "METRICS_ADDR 127.0.0.1:9000: must differ from HTTP_ADDR")
}

func TestUIOrigin_OnTheAPIsHostName(t *testing.T) {
	assert.Equal(t, "http://localhost:8233", config.UIOrigin("http://localhost:8080", 8233), "make run")
	assert.Equal(t, "http://127.0.0.1:18233", config.UIOrigin("http://127.0.0.1:18080", 18233),
		"the same site as the API, where the session cookie goes")
}
