package service

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	sdklog "go.temporal.io/sdk/log"

	"github.com/marketplace/checkout/audit"
	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/payment/paysim"
)

// AuditFlags are the auditor's settings, shared by `checkout audit` and `checkout-dev loadgen`.
type AuditFlags struct {
	HoldTTL, Sweeper, Slack time.Duration
	NoTemporal              bool
}

// Register adds the auditor's flags to fs, with cfg's settings as their defaults.
func (f *AuditFlags) Register(fs *flag.FlagSet, cfg config.Config) {
	fs.DurationVar(&f.HoldTTL, "hold-ttl", cfg.HoldTTL, "the server's HOLD_TTL")
	sweeper := cfg.SweeperEvery.Interval
	if cfg.SweeperEvery.Cron != "" {
		sweeper = 24 * time.Hour
	}
	fs.DurationVar(&f.Sweeper, "sweeper-period", sweeper, "how often the reservation sweeper runs (SWEEPER_EVERY)")
	fs.DurationVar(&f.Slack, "slack", audit.DefaultSlack, "added to every time limit of the audit (the order's 30 s hold grace, a step's retries, compensations)")
	fs.BoolVar(&f.NoTemporal, "no-temporal", false, "do not ask Temporal for open workflows")
}

// devSuperuser is the role the local stack's PostgreSQL connects as (internal/dev/pgserver's
// Superuser, which the product does not link; a test keeps the two equal).
const devSuperuser = "postgres"

// DevDefaults points an unset DATABASE_URL and TEMPORAL_ADDRESS at `make run`'s stack, takes
// that stack's codec key when TEMPORAL_CODEC_KEY is unset (reading it, never making one), and its
// payment provider, the simulator, when PAYMENT_PROVIDER is unset.
func DevDefaults(cfg config.Config) config.Config {
	if cfg.PaymentProvider == "" {
		cfg.PaymentProvider = config.ProviderPaysim
	}
	if len(cfg.CodecKey.Secret) == 0 {
		if s, err := config.ReadDevSecrets(cfg.Dev.DataDir); err == nil {
			if k, err := s.Codec(); err == nil {
				cfg.CodecKey = k
			}
		}
	}
	if cfg.DatabaseURL == "" {
		cfg.DatabaseURL = fmt.Sprintf("postgres://%s@127.0.0.1:%d/checkout?sslmode=disable", devSuperuser, cfg.Dev.PGPort)
	}
	if cfg.TemporalAddress == "" {
		cfg.TemporalAddress = "127.0.0.1:" + strconv.Itoa(cfg.Dev.TemporalPort)
	}
	return cfg
}

// Audit is `checkout audit`: the invariant auditor against DATABASE_URL and TEMPORAL_ADDRESS.
func Audit(ctx context.Context, cfg config.Config, args []string) error {
	fs := flag.NewFlagSet("audit", flag.ContinueOnError)
	var af AuditFlags
	af.Register(fs, cfg)
	since := fs.String("since", "", "only orders created since: a duration back (24h) or an RFC 3339 time; stock is always checked whole")
	asJSON := fs.Bool("json", false, "write the report as JSON")
	show := fs.Int("show", 20, "violations shown per invariant (0: all)")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	from, err := parseSince(*since)
	if err != nil {
		return err
	}
	rep, err := AuditOnce(ctx, DevDefaults(cfg), af, from)
	if err != nil {
		return err
	}
	if *asJSON {
		err = WriteJSON(os.Stdout, rep)
	} else {
		err = rep.WriteText(os.Stdout, *show)
	}
	if err != nil {
		return err
	}
	if !rep.OK() {
		return fmt.Errorf("%d invariant violations", len(rep.Violations))
	}
	return nil
}

func parseSince(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		return time.Now().Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--since %q: a duration such as 24h or a time such as 2026-11-30T10:00:00Z", s)
	}
	return t, nil
}

// AuditOnce connects, audits once and disconnects.
func AuditOnce(ctx context.Context, cfg config.Config, af AuditFlags, since time.Time) (audit.Report, error) {
	pool, err := db.Connect(ctx, cfg.DatabaseURL, 4)
	if err == nil {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = pool.Ping(pctx)
		cancel()
		if err != nil {
			pool.Close()
		}
	}
	if err != nil {
		return audit.Report{}, fmt.Errorf("cannot reach PostgreSQL at %s (is `make run` running? set DATABASE_URL): %w",
			redact(cfg.DatabaseURL), err)
	}
	defer pool.Close()
	o := audit.Options{HoldTTL: af.HoldTTL, SweeperPeriod: af.Sweeper, Slack: af.Slack, Since: since, TaskQueue: cfg.TaskQueue,
		Provider: auditProvider(cfg, pool)}
	if !af.NoTemporal {
		quiet := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		tlsCfg, err := cfg.TemporalTLSConfig()
		if err != nil {
			return audit.Report{}, err
		}
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		tc, err := client.DialContext(dctx, client.Options{HostPort: cfg.TemporalAddress, Namespace: cfg.TemporalNamespace,
			Logger: sdklog.NewStructuredLogger(quiet), DataConverter: auditDataConverter(cfg),
			ConnectionOptions: client.ConnectionOptions{TLS: tlsCfg}})
		cancel()
		if err != nil {
			return audit.Report{}, fmt.Errorf("cannot reach Temporal at %s (set TEMPORAL_ADDRESS, or --no-temporal): %w",
				cfg.TemporalAddress, err)
		}
		defer tc.Close()
		o.Visibility = tc
	}
	return audit.Run(ctx, pool, o)
}

// The simulator's record of the money is read in the audit's own snapshot.
var _ audit.SnapshotProvider = (*paysim.Records)(nil)

// auditProvider is the payment provider's record of the money: the simulator's, in the audited
// database, when it is the provider. Any other provider is not asked, and the report says so.
func auditProvider(cfg config.Config, pool *pgxpool.Pool) audit.Provider {
	if cfg.PaymentProvider == config.ProviderPaysim {
		return paysim.NewRecords(pool)
	}
	return nil
}

// auditDataConverter is the product's codec when the audit has the key. The audit reads only the
// workflows' search attributes, which no codec encodes, so without a key it still runs, on the
// SDK's default converter.
func auditDataConverter(cfg config.Config) converter.DataConverter {
	if pc, err := cfg.PayloadCodec(); err == nil {
		return pc.DataConverter()
	}
	return converter.GetDefaultDataConverter()
}

// redact hides a password in a database URL.
func redact(u string) string {
	at := strings.LastIndex(u, "@")
	scheme := strings.Index(u, "://")
	if at < 0 || scheme < 0 || !strings.Contains(u[scheme+3:at], ":") {
		return u
	}
	user, _, _ := strings.Cut(u[scheme+3:at], ":")
	return u[:scheme+3] + user + ":***" + u[at:]
}

// WriteJSON writes v as indented JSON.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
