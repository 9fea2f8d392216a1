package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/internal/telemetry"
	"github.com/marketplace/checkout/migrations"
	"github.com/marketplace/checkout/payment/paysim"
)

// WithConfig reads the settings, sets the process's logger by LOG_LEVEL and runs run with them.
func WithConfig(run func(config.Config) error) error {
	cfg, err := config.FromEnv()
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	slog.SetDefault(newLogger(cfg.LogLevel))
	return run(cfg)
}

func newLogger(level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(telemetry.LogHandler(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: l})))
}

// Migrate is `checkout migrate`: the product's migrations, then the payment simulator's when it is
// the provider.
func Migrate(ctx context.Context, cfg config.Config) error {
	if cfg.DatabaseURL == "" {
		return errors.New("DATABASE_URL is required")
	}
	applied, err := migrations.Up(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	slog.Info("migrations applied", "count", len(applied), "files", applied)
	if cfg.PaymentProvider != config.ProviderPaysim {
		return nil
	}
	// The simulator is the provider: its own schema too, before the processes that run it.
	if applied, err = paysim.Migrate(ctx, cfg.DatabaseURL); err != nil {
		return fmt.Errorf("payment simulator: %w", err)
	}
	slog.Info("payment simulator's migrations applied", "count", len(applied), "files", applied)
	return nil
}
