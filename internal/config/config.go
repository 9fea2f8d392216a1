// Package config reads the one Config of the binary from environment variables, with the
// documented defaults of a local machine, and validates it at start.
package config

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Config is every setting of the binary. Each field has an environment variable; README lists them.
type Config struct {
	// DatabaseURL points at PostgreSQL. Empty in `dev` means: start the private cluster.
	DatabaseURL string
	DBMaxConns  int32

	// TemporalAddress points at the Temporal frontend. Empty in `dev` means: start the dev server.
	TemporalAddress   string
	TemporalNamespace string
	TaskQueue         string

	HTTPAddr string
	// PublicBaseURL is how shoppers' browsers reach the API; the 3-D Secure redirect uses it.
	PublicBaseURL string

	HoldTTL time.Duration

	JWTSecret            string
	PaymentWebhookSecret string
	// PaymentWebhookURL is where the provider simulator delivers its signed webhooks.
	PaymentWebhookURL string

	// Dev stack (`dev` and `make run`).
	DataDir        string
	PGPort         int
	TemporalCLI    string
	TemporalPort   int
	TemporalUIPort int

	// MetricsAddr serves /metrics of the `worker` command (the API serves its own).
	MetricsAddr string

	LogLevel string
}

// Defaults of a local machine. The JWT and webhook secrets are development values: production
// deployments must set their own.
const (
	DefaultHTTPAddr       = ":8080"
	DefaultHoldTTL        = 15 * time.Minute
	DefaultNamespace      = "default"
	DefaultTaskQueue      = "checkout"
	DefaultJWTSecret      = "dev-only-jwt-secret-change-me"
	DefaultWebhookSecret  = "dev-only-webhook-secret-change-me"
	DefaultPGPort         = 55432
	DefaultTemporalPort   = 7233
	DefaultTemporalUIPort = 8233
)

// FromEnv reads the configuration from the process environment.
func FromEnv() (Config, error) { return Load(os.Getenv) }

// Load reads the configuration through getenv, so tests can pass their own.
func Load(getenv func(string) string) (Config, error) {
	p := parser{getenv: getenv}
	c := Config{
		DatabaseURL:          p.str("DATABASE_URL", ""),
		DBMaxConns:           int32(p.int("DB_MAX_CONNS", 40)),
		TemporalAddress:      p.str("TEMPORAL_ADDRESS", ""),
		TemporalNamespace:    p.str("TEMPORAL_NAMESPACE", DefaultNamespace),
		TaskQueue:            p.str("TEMPORAL_TASK_QUEUE", DefaultTaskQueue),
		HTTPAddr:             p.str("HTTP_ADDR", DefaultHTTPAddr),
		PublicBaseURL:        p.str("PUBLIC_BASE_URL", ""),
		HoldTTL:              p.duration("HOLD_TTL", DefaultHoldTTL),
		JWTSecret:            p.str("AUTH_JWT_SECRET", DefaultJWTSecret),
		PaymentWebhookSecret: p.str("PAYMENT_WEBHOOK_SECRET", DefaultWebhookSecret),
		PaymentWebhookURL:    p.str("PAYMENT_WEBHOOK_URL", ""),
		DataDir:              p.str("DATA_DIR", ".data"),
		PGPort:               p.int("PG_PORT", DefaultPGPort),
		TemporalCLI:          p.str("TEMPORAL_CLI", "bin/temporal"),
		TemporalPort:         p.int("TEMPORAL_PORT", DefaultTemporalPort),
		TemporalUIPort:       p.int("TEMPORAL_UI_PORT", DefaultTemporalUIPort),
		MetricsAddr:          p.str("METRICS_ADDR", ":9091"),
		LogLevel:             p.str("LOG_LEVEL", "info"),
	}
	if c.PublicBaseURL == "" {
		c.PublicBaseURL = "http://" + loopback(c.HTTPAddr)
	}
	if c.PaymentWebhookURL == "" {
		c.PaymentWebhookURL = strings.TrimRight(c.PublicBaseURL, "/") + "/api/v1/payments/webhook"
	}
	if len(p.errs) > 0 {
		return Config{}, errors.Join(p.errs...)
	}
	return c, c.Validate()
}

// Validate reports settings that cannot work.
func (c Config) Validate() error {
	var errs []error
	if c.HoldTTL < time.Second {
		errs = append(errs, fmt.Errorf("HOLD_TTL %s: must be at least 1s", c.HoldTTL))
	}
	if len(c.JWTSecret) < 16 {
		errs = append(errs, errors.New("AUTH_JWT_SECRET: must be at least 16 characters"))
	}
	if len(c.PaymentWebhookSecret) < 16 {
		errs = append(errs, errors.New("PAYMENT_WEBHOOK_SECRET: must be at least 16 characters"))
	}
	if c.DBMaxConns < 2 {
		errs = append(errs, errors.New("DB_MAX_CONNS: must be at least 2"))
	}
	if c.TaskQueue == "" || c.TemporalNamespace == "" {
		errs = append(errs, errors.New("TEMPORAL_TASK_QUEUE and TEMPORAL_NAMESPACE must not be empty"))
	}
	return errors.Join(errs...)
}

// loopback turns a listen address such as ":8080" into one a local client can dial.
func loopback(addr string) string {
	if strings.HasPrefix(addr, ":") {
		return "localhost" + addr
	}
	return addr
}

type parser struct {
	getenv func(string) string
	errs   []error
}

func (p *parser) str(key, def string) string {
	if v := strings.TrimSpace(p.getenv(key)); v != "" {
		return v
	}
	return def
}

func (p *parser) int(key string, def int) int {
	v := strings.TrimSpace(p.getenv(key))
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		p.errs = append(p.errs, fmt.Errorf("%s=%q: not an integer", key, v))
		return def
	}
	return n
}

func (p *parser) duration(key string, def time.Duration) time.Duration {
	v := strings.TrimSpace(p.getenv(key))
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		p.errs = append(p.errs, fmt.Errorf("%s=%q: not a duration such as 15m or 5s", key, v))
		return def
	}
	return d
}
