package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
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
	"github.com/marketplace/checkout/internal/dev/cluster"
	"github.com/marketplace/checkout/internal/dev/pgserver"
	"github.com/marketplace/checkout/loadgen"
	"github.com/marketplace/checkout/payment/paysim"
)

// auditFlags are the auditor's settings, shared by `audit` and `loadgen`.
type auditFlags struct {
	holdTTL, sweeper, slack time.Duration
	noTemporal              bool
}

func (f *auditFlags) register(fs *flag.FlagSet, cfg config.Config) {
	fs.DurationVar(&f.holdTTL, "hold-ttl", cfg.HoldTTL, "the server's HOLD_TTL")
	sweeper := cfg.SweeperEvery.Interval
	if cfg.SweeperEvery.Cron != "" {
		sweeper = 24 * time.Hour
	}
	fs.DurationVar(&f.sweeper, "sweeper-period", sweeper, "how often the reservation sweeper runs (SWEEPER_EVERY)")
	fs.DurationVar(&f.slack, "slack", audit.DefaultSlack, "added to every time limit of the audit (the order's 30 s hold grace, a step's retries, compensations)")
	fs.BoolVar(&f.noTemporal, "no-temporal", false, "do not ask Temporal for open workflows")
}

// devDefaults points an unset DATABASE_URL and TEMPORAL_ADDRESS at `make run`'s stack, takes
// that stack's codec key when TEMPORAL_CODEC_KEY is unset (reading it, never making one), and its
// payment provider, the simulator, when PAYMENT_PROVIDER is unset.
func devDefaults(cfg config.Config) config.Config {
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
		cfg.DatabaseURL = fmt.Sprintf("postgres://%s@127.0.0.1:%d/checkout?sslmode=disable", pgserver.Superuser, cfg.Dev.PGPort)
	}
	if cfg.TemporalAddress == "" {
		cfg.TemporalAddress = "127.0.0.1:" + strconv.Itoa(cfg.Dev.TemporalPort)
	}
	return cfg
}

// runAudit is `checkout audit`: the invariant auditor against DATABASE_URL and TEMPORAL_ADDRESS.
func runAudit(ctx context.Context, cfg config.Config, args []string) error {
	fs := flag.NewFlagSet("audit", flag.ContinueOnError)
	var af auditFlags
	af.register(fs, cfg)
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
	rep, err := auditOnce(ctx, devDefaults(cfg), af, from)
	if err != nil {
		return err
	}
	if *asJSON {
		err = writeJSON(os.Stdout, rep)
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

// auditOnce connects, audits once and disconnects.
func auditOnce(ctx context.Context, cfg config.Config, af auditFlags, since time.Time) (audit.Report, error) {
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
	o := audit.Options{HoldTTL: af.holdTTL, SweeperPeriod: af.sweeper, Slack: af.slack, Since: since, TaskQueue: cfg.TaskQueue,
		Provider: auditProvider(cfg, pool)}
	if !af.noTemporal {
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

// runLoadgen is `checkout loadgen`: a load run against a local stack, then the auditor.
func runLoadgen(ctx context.Context, cfg config.Config, args []string) error {
	// Tokens are minted with AUTH_JWT_SECRET, or the local stack's development secret.
	cfg, err := cfg.WithDevSecrets()
	if err != nil {
		return err
	}
	d := loadgen.Defaults()
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	var af auditFlags
	af.register(fs, cfg)
	base := fs.String("base-url", cfg.PublicBaseURL, "the API (loopback only)")
	opsToken := fs.String("ops-token", "", "an ops person's token for the run's coupon and campaign (default: minted with "+
		"AUTH_JWT_SECRET; with make cluster's settings, oscar's, signed in through the cluster's identity provider)")
	metricsURL := fs.String("metrics-url", cfg.MetricsURL(), "the worker's /metrics, where the availability lag is sampled (loopback only; empty: not sampled)")
	shoppers := fs.Int("shoppers", d.Shoppers, "concurrent shoppers")
	duration := fs.Duration("duration", d.Duration, "no order starts after this (at most "+loadgen.MaxDuration.String()+")")
	orders := fs.Int("orders", 0, "stop after this many orders (0: only --duration bounds the run)")
	catalog := fs.Int("catalog", d.CatalogSize, "SKUs in the generator's catalog (LG-0001 …)")
	zipf := fs.Float64("zipf", d.Zipf, "Zipf exponent of SKU popularity (> 1)")
	stock := fs.Int("stock", d.Stock, "starting stock of each catalog SKU in each warehouse, and the size of a delivery")
	hot := fs.String("hot", strings.Join(d.HotSKUs, ","), "hot (campaign) SKU codes, comma-separated; empty for none")
	hotShare := fs.Float64("hot-share", d.HotShare, "share of orders with a hot SKU")
	hotStock := fs.Int("hot-stock", d.HotStock, "starting stock of a hot SKU (warehouse 1 only), and the size of a delivery")
	campaignHot := fs.String("campaign-hot", "false", "a campaign on the hot SKUs for the run: true ("+
		strconv.FormatFloat(loadgen.DefaultCampaignHot, 'f', -1, 64)+"% off), false, or a percentage off such as 15")
	couponShare := fs.Float64("coupon-share", d.CouponShare, "share of orders previewed and placed with the run's coupon (0 to 1)")
	lines := fs.Float64("lines", d.Lines, "mean lines per order")
	mix := fs.String("mix", "campaign", "payment mix: campaign, or shares such as ok=40,3ds-approve=25,3ds-decline=5,abandon=10,decline=8,cancel=7,timeout=5")
	repeat := fs.Float64("repeat-share", d.RepeatShare, "share of orders sent twice with one Idempotency-Key")
	lowWater := fs.Float64("low-water", d.LowWater, "a SKU is low below this share of its stock")
	lead := fs.Duration("restock-lead", d.RestockLead, "how long the seller's delivery takes after a SKU runs low")
	wait := fs.String("wait-abandoned", "auto", "wait for the abandoned orders' holds to expire: true, false, or auto (when --hold-ttl ≤ 2m)")
	settle := fs.Duration("settle", d.Settle, "how long the end waits for orders to reach a final status")
	retryFor := fs.Duration("retry-for", 0, "repeat a request a fault answers (none, 502, 503 other than BUSY, 504) for up to this long, "+
		"an order with its Idempotency-Key, as a client riding out an outage does (0: send it once)")
	seed := fs.Uint64("seed", 0, "random seed (0: from the clock)")
	asJSON := fs.Bool("json", false, "write the report (and the audit) as JSON on stdout")
	noProgress := fs.Bool("no-progress", false, "no progress line")
	noAudit := fs.Bool("no-audit", false, "skip the invariant audit at the end")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	m, err := loadgen.ParseMix(*mix)
	if err != nil {
		return err
	}
	campaign, err := loadgen.ParseCampaignHot(*campaignHot)
	if err != nil {
		return fmt.Errorf("--campaign-hot: %w", err)
	}
	waitAbandoned := af.holdTTL <= 2*time.Minute
	if *wait != "auto" {
		if waitAbandoned, err = strconv.ParseBool(*wait); err != nil {
			return fmt.Errorf("--wait-abandoned %q: true, false or auto", *wait)
		}
	}
	if *opsToken == "" && cfg.OIDCIssuer != "" && len(cfg.TemporalUIOrigins) > 0 {
		// make cluster's API takes ops from its identity provider alone.
		if *opsToken, err = cluster.StaffTokenAt(ctx, filepath.Join(cfg.Dev.DataDir, "cluster"), cfg.TemporalUIOrigins[0], "oscar"); err != nil {
			return fmt.Errorf("signing in as the cluster's ops person (or give --ops-token): %w", err)
		}
	}
	lc := loadgen.Config{BaseURL: *base, MetricsURL: *metricsURL, JWTSecret: cfg.JWTSecret, OpsToken: *opsToken, Shoppers: *shoppers, Duration: *duration, Orders: *orders,
		CatalogSize: *catalog, Zipf: *zipf, Stock: *stock, HotSKUs: splitList(*hot), HotShare: *hotShare, HotStock: *hotStock,
		CampaignHot: campaign, CouponShare: *couponShare, Lines: *lines, Mix: m, RepeatShare: *repeat, LowWater: *lowWater, RestockLead: *lead, HoldTTL: af.holdTTL,
		WaitAbandoned: waitAbandoned, Settle: *settle, RetryFor: *retryFor, Seed: *seed}
	if lc.HotSKUs == nil {
		lc.HotSKUs, lc.HotShare = []string{}, 0
	}
	if !*noProgress {
		lc.Progress = os.Stderr
	}
	started := time.Now()
	rep, err := loadgen.Run(ctx, lc)
	if errors.Is(err, context.Canceled) && rep.Orders > 0 {
		fmt.Fprintln(os.Stderr, "\ninterrupted: the report of what ran so far, without the audit")
		if werr := rep.WriteText(os.Stdout); werr != nil {
			return werr
		}
		return errors.New("interrupted")
	}
	if err != nil {
		return err
	}
	var res *audit.Report
	if !*noAudit {
		if !*asJSON {
			fmt.Fprintln(os.Stderr, "\nauditing the invariants …")
		}
		r, err := auditOnce(ctx, devDefaults(cfg), af, time.Time{})
		if err != nil {
			return err
		}
		res = &r
	}
	if *asJSON {
		err = writeJSON(os.Stdout, map[string]any{"load": rep, "audit": res})
	} else {
		err = rep.WriteText(os.Stdout)
		if err == nil && res != nil {
			fmt.Println()
			err = res.WriteText(os.Stdout, 20)
		}
	}
	if err != nil {
		return err
	}
	var problems []error
	if len(rep.Mismatches) > 0 {
		problems = append(problems, fmt.Errorf("%d Idempotency-Keys answered differently the second time", len(rep.Mismatches)))
	}
	if res != nil && !res.OK() {
		problems = append(problems, fmt.Errorf("%d invariant violations after the run that began %s", len(res.Violations),
			started.UTC().Format(time.RFC3339)))
	}
	return errors.Join(problems...)
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
