package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/marketplace/checkout/audit"
	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/internal/dev/cluster"
	"github.com/marketplace/checkout/internal/service"
	"github.com/marketplace/checkout/loadgen"
)

// runLoadgen is `checkout-dev loadgen`: a load run against a local stack, then the auditor.
func runLoadgen(ctx context.Context, cfg config.Config, args []string) error {
	// Tokens are minted with AUTH_JWT_SECRET, or the local stack's development secret, for a stack
	// without an identity provider (dev); with one (make cluster's settings), they come from it.
	cfg, err := cfg.WithDevSecrets()
	if err != nil {
		return err
	}
	d := loadgen.Defaults()
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	var af service.AuditFlags
	af.Register(fs, cfg)
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
	waitAbandoned := af.HoldTTL <= 2*time.Minute
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
	var tokens loadgen.Tokens
	if cfg.OIDCIssuer != "" {
		// The API takes tokens from its identity provider alone: the shoppers' through the
		// JWT-profile grant, the sellers' as their ERPs, with the keys the cluster keeps.
		if tokens, err = cluster.ClusterTokens(filepath.Join(cfg.Dev.DataDir, "cluster"), cfg.OIDCIssuer, cfg.OIDCAudience); err != nil {
			return fmt.Errorf("the cluster's tokens: %w", err)
		}
	}
	lc := loadgen.Config{Tokens: tokens, BaseURL: *base, MetricsURL: *metricsURL, JWTSecret: cfg.JWTSecret, OpsToken: *opsToken, Shoppers: *shoppers, Duration: *duration, Orders: *orders,
		CatalogSize: *catalog, Zipf: *zipf, Stock: *stock, HotSKUs: splitList(*hot), HotShare: *hotShare, HotStock: *hotStock,
		CampaignHot: campaign, CouponShare: *couponShare, Lines: *lines, Mix: m, RepeatShare: *repeat, LowWater: *lowWater, RestockLead: *lead, HoldTTL: af.HoldTTL,
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
		r, err := service.AuditOnce(ctx, service.DevDefaults(cfg), af, time.Time{})
		if err != nil {
			return err
		}
		res = &r
	}
	if *asJSON {
		err = service.WriteJSON(os.Stdout, map[string]any{"load": rep, "audit": res})
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
