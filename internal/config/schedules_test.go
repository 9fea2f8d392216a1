package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/config"
)

func TestLoad_ScheduleSettings(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    func(t *testing.T, c config.Config)
		wantErr string
	}{
		{name: "defaults", env: nil, want: func(t *testing.T, c config.Config) {
			assert.True(t, c.SchedulesEnabled)
			assert.Empty(t, c.ScheduleIDPrefix)
			assert.Equal(t, config.Every{Interval: time.Minute}, c.SweeperEvery)
			assert.Equal(t, config.Every{Interval: 15 * time.Minute}, c.ReconcilerEvery)
			assert.Equal(t, config.Every{Interval: 24 * time.Hour}, c.CartJanitorEvery)
			assert.Equal(t, config.Every{Interval: 5 * time.Minute}, c.PaymentReconcilerEvery)
		}},
		{name: "intervals and cron expressions", env: map[string]string{"SWEEPER_EVERY": "30s",
			"CART_JANITOR_EVERY": "0 3 * * *", "RECONCILER_EVERY": "@hourly", "SCHEDULES_ENABLED": "false",
			"SCHEDULE_ID_PREFIX": "staging-"}, want: func(t *testing.T, c config.Config) {
			assert.Equal(t, config.Every{Interval: 30 * time.Second}, c.SweeperEvery)
			assert.Equal(t, config.Every{Cron: "0 3 * * *"}, c.CartJanitorEvery)
			assert.Equal(t, config.Every{Cron: "@hourly"}, c.ReconcilerEvery)
			assert.False(t, c.SchedulesEnabled)
			assert.Equal(t, "staging-", c.ScheduleIDPrefix)
		}},
		{name: "neither duration nor cron", env: map[string]string{"PAYMENT_RECONCILER_EVERY": "often"},
			wantErr: "PAYMENT_RECONCILER_EVERY"},
		{name: "interval under a second", env: map[string]string{"SWEEPER_EVERY": "500ms"}, wantErr: "SWEEPER_EVERY 500ms"},
		{name: "not a boolean", env: map[string]string{"SCHEDULES_ENABLED": "maybe"}, wantErr: "SCHEDULES_ENABLED"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := config.Load(func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			tc.want(t, c)
		})
	}
}
