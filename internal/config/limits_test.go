package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/config"
)

func TestParseRateLimit(t *testing.T) {
	for v, want := range map[string]config.RateLimit{
		"20/1m":    {Burst: 20, Per: time.Minute},
		"300/s":    {Burst: 300, Per: time.Second},
		" 5 / 2h ": {Burst: 5, Per: 2 * time.Hour},
		"off":      {},
		"0":        {},
	} {
		got, err := config.ParseRateLimit(v)
		require.NoError(t, err, v)
		assert.Equal(t, want, got, v)
	}
	for _, bad := range []string{"", "20", "20/", "x/1m", "-1/1m", "20/1y", "20/0s", "20/48h", "2000000/1s"} {
		_, err := config.ParseRateLimit(bad)
		assert.Error(t, err, bad)
	}
}

func TestLoad_RateLimitsAndTrustedProxies(t *testing.T) {
	load := func(env map[string]string) (config.Config, error) {
		return config.Load(func(k string) string { return env[k] })
	}
	c, err := load(nil)
	require.NoError(t, err)
	assert.Equal(t, config.RateLimit{Burst: 20, Per: time.Minute}, c.RateLimits.OrdersUser)
	assert.Equal(t, config.RateLimit{Burst: 20, Per: time.Minute}, c.RateLimits.WebhookFailuresIP)
	assert.Empty(t, c.TrustedProxies, "no proxy is trusted unless listed")
	assert.Equal(t, 3, c.OrdersMaxOpenPerShopper)

	c, err = load(map[string]string{"RATE_LIMIT_CART_IP": "off", "TRUSTED_PROXIES": "10.0.0.7, 172.16.0.0/12,2001:db8::1"})
	require.NoError(t, err)
	assert.True(t, c.RateLimits.CartIP.Off())
	require.Len(t, c.TrustedProxies, 3)
	assert.Equal(t, "10.0.0.7/32", c.TrustedProxies[0].String())
	assert.Equal(t, "172.16.0.0/12", c.TrustedProxies[1].String())
	assert.Equal(t, "2001:db8::1/128", c.TrustedProxies[2].String())

	_, err = load(map[string]string{"RATE_LIMIT_SELLER": "lots", "TRUSTED_PROXIES": "proxy.local"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "RATE_LIMIT_SELLER")
	assert.Contains(t, err.Error(), `TRUSTED_PROXIES: "proxy.local"`)
	_, err = load(map[string]string{"ORDERS_MAX_OPEN_PER_SHOPPER": "-1"})
	assert.ErrorContains(t, err, "ORDERS_MAX_OPEN_PER_SHOPPER")
}

func TestLoad_AdmissionLimits_DefaultsAndOneLinePerBadValue(t *testing.T) {
	load := func(env map[string]string) (config.Config, error) {
		return config.Load(func(k string) string { return env[k] })
	}
	c, err := load(nil)
	require.NoError(t, err)
	assert.Equal(t, config.DefaultOrdersMaxInFlight, c.OrdersMaxInFlight)
	assert.Equal(t, config.DefaultOrdersAdmitMaxLatency, c.OrdersAdmitMaxLatency)
	assert.Equal(t, time.Second, c.FeaturesCacheTTL)

	c, err = load(map[string]string{"ORDERS_MAX_IN_FLIGHT": "0", "ORDERS_ADMIT_MAX_LATENCY": "0", "FEATURES_CACHE_TTL": "0"})
	require.NoError(t, err, "0 turns each off")
	assert.Zero(t, c.OrdersMaxInFlight)
	assert.Zero(t, c.OrdersAdmitMaxLatency)

	for _, bad := range []struct{ key, value, says string }{
		{"ORDERS_MAX_IN_FLIGHT", "-1", "ORDERS_MAX_IN_FLIGHT -1: between 0 (no bound) and 100000"},
		{"ORDERS_MAX_IN_FLIGHT", "many", `ORDERS_MAX_IN_FLIGHT="many": not an integer`},
		{"ORDERS_ADMIT_MAX_LATENCY", "1ms", "ORDERS_ADMIT_MAX_LATENCY 1ms: between 10ms and 30s, or 0 (not watched)"},
		{"ORDERS_ADMIT_MAX_LATENCY", "1m", "ORDERS_ADMIT_MAX_LATENCY 1m0s: between 10ms and 30s"},
		{"ORDERS_ADMIT_MAX_LATENCY", "5", `ORDERS_ADMIT_MAX_LATENCY="5": not a duration`},
		{"FEATURES_CACHE_TTL", "2m", "FEATURES_CACHE_TTL 2m0s: between 0 and 1m"},
	} {
		_, err := load(map[string]string{bad.key: bad.value})
		require.Error(t, err, bad.key+"="+bad.value)
		assert.Contains(t, err.Error(), bad.says)
		assert.NotContains(t, err.Error(), "\n", "one line for one bad value")
	}
}

func TestLoad_WorkflowTaskTimeout_DefaultAndBounds(t *testing.T) {
	load := func(env map[string]string) (config.Config, error) {
		return config.Load(func(k string) string { return env[k] })
	}
	c, err := load(nil)
	require.NoError(t, err)
	assert.Equal(t, 5*time.Second, c.WorkflowTaskTimeout, "a lost task costs an order 5 s, not the SDK's 10 s")
	c, err = load(map[string]string{"WORKFLOW_TASK_TIMEOUT": "10s"})
	require.NoError(t, err)
	assert.Equal(t, 10*time.Second, c.WorkflowTaskTimeout)
	for _, bad := range []string{"0s", "500ms", "2m"} {
		_, err := load(map[string]string{"WORKFLOW_TASK_TIMEOUT": bad})
		require.Error(t, err, bad)
		assert.Contains(t, err.Error(), "WORKFLOW_TASK_TIMEOUT")
		assert.Contains(t, err.Error(), "between 1s and 1m")
		assert.NotContains(t, err.Error(), "\n", "one line for one bad value")
	}
}

func TestLoad_ParkedDeadlines_DefaultsAndBounds(t *testing.T) {
	load := func(env map[string]string) (config.Config, error) {
		return config.Load(func(k string) string { return env[k] })
	}
	c, err := load(nil)
	require.NoError(t, err)
	assert.Equal(t, 24*time.Hour, c.ParkedEscalateAfter)
	assert.Equal(t, 6*24*time.Hour, c.ParkedGiveUpAfter)
	c, err = load(map[string]string{"PARKED_ESCALATE_AFTER": "2s", "PARKED_GIVE_UP_AFTER": "5s"})
	require.NoError(t, err)
	assert.Equal(t, 5*time.Second, c.ParkedGiveUpAfter)
	for _, bad := range []map[string]string{
		{"PARKED_ESCALATE_AFTER": "0s"},
		{"PARKED_ESCALATE_AFTER": "2h", "PARKED_GIVE_UP_AFTER": "1h"},
		{"PARKED_GIVE_UP_AFTER": "168h"}, // the provider's authorization would expire first
	} {
		_, err := load(bad)
		assert.ErrorContains(t, err, "PARKED_GIVE_UP_AFTER", "%v", bad)
	}
}

func TestLoad_WorkerTuning_DefaultsAndRefusals(t *testing.T) {
	load := func(env map[string]string) (config.Config, error) {
		return config.Load(func(k string) string { return env[k] })
	}
	c, err := load(nil)
	require.NoError(t, err)
	assert.Equal(t, config.WorkerTuning{WorkflowPollers: config.DefaultWorkflowPollers}, c.WorkerTuning,
		"nothing set: 8 workflow pollers, every other value left to the SDK")
	c, err = load(map[string]string{"WORKER_WORKFLOW_POLLERS": "0"})
	require.NoError(t, err)
	assert.Zero(t, c.WorkerTuning.WorkflowPollers, "0: the SDK's own")

	c, err = load(map[string]string{"WORKER_WORKFLOW_POLLERS": "8", "WORKER_ACTIVITY_POLLERS": "1",
		"WORKER_MAX_WORKFLOW_TASKS": "2", "WORKER_MAX_ACTIVITIES": "200", "WORKER_MAX_LOCAL_ACTIVITIES": "100",
		"WORKER_STICKY_CACHE_SIZE": "2000"})
	require.NoError(t, err)
	assert.Equal(t, config.WorkerTuning{WorkflowPollers: 8, ActivityPollers: 1, MaxWorkflowTasks: 2, MaxActivities: 200,
		MaxLocalActivities: 100, StickyCacheSize: 2000}, c.WorkerTuning)

	// One workflow task slot would leave the SDK polling its sticky queue only (it panics on it):
	// refused at start, with the other bad values, one line each. One workflow poller a queue is
	// a setting like any other.
	c, err = load(map[string]string{"WORKER_WORKFLOW_POLLERS": "1"})
	require.NoError(t, err)
	assert.Equal(t, 1, c.WorkerTuning.WorkflowPollers)
	_, err = load(map[string]string{"WORKER_WORKFLOW_POLLERS": "-1", "WORKER_MAX_WORKFLOW_TASKS": "1",
		"WORKER_ACTIVITY_POLLERS": "-1", "WORKER_STICKY_CACHE_SIZE": "-5"})
	require.Error(t, err)
	for _, name := range []string{"WORKER_WORKFLOW_POLLERS -1", "WORKER_MAX_WORKFLOW_TASKS 1", "WORKER_ACTIVITY_POLLERS -1",
		"WORKER_STICKY_CACHE_SIZE -5"} {
		assert.Contains(t, err.Error(), name)
	}
}
