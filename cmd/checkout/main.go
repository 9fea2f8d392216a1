// Command checkout is the one binary of the product: `dev` runs the whole local stack, `cluster`
// its production shape on one machine, `api` and `worker` are the two services of a deployment,
// `migrate` applies the schema, `token` mints development tokens.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/internal/telemetry"
	"github.com/marketplace/checkout/migrations"
	"github.com/marketplace/checkout/payment/paysim"
)

const usage = `checkout: marketplace checkout backend

usage: checkout <command> [flags]

commands:
  dev       run everything locally: PostgreSQL, Temporal dev server, migrations, demo data,
            worker and API (what make run runs)
  cluster   run the production shape on this machine: PostgreSQL, the Temporal server as four
            processes and its UI, workers and API replicas behind HAProxy (what make cluster
            runs): cluster [--apis 2] [--workers 2] [--history-shards 16] [--ports-from N]
  release   release a binary into the running cluster: its workers beside the running ones, made
            current once they poll, the earlier build drained: release [--binary PATH] [--ramp 10,50]
  certs     make a cluster's certificate authority and certificates in a folder, once (renewing
            those near their end): certs --dir /tls (what make cluster does in its folder)
  api       run the REST API
  worker    run the Temporal worker
  migrate   apply database migrations (and the payment simulator's, when PAYMENT_PROVIDER=paysim)
  token     mint a JWT with AUTH_JWT_SECRET (or the local stack's development secret):
            token --user 7 --role shopper [--seller 42] [--ttl 24h]
  loadgen   drive a local stack's API as shoppers and sellers do, then audit: loadgen --duration 60s
            (loadgen -h lists the mix, hot SKUs and bounds)
  version   the build of the workflow code this binary runs, and its commit: version [--json]
  builds    the builds of the workflow code in the worker deployment and their open runs; move
            long-waiting runs to this build; make a build current or ramp it (builds help)
  events    the checkout's events on the broker: events tail [--all] [--type order.] [--validate]
  audit     check the invariants (no oversell, no stranded stock or money, no order open past
            its hold) against DATABASE_URL and TEMPORAL_ADDRESS; exit 1 on any violation

Settings come from environment variables; see docs/settings.md.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	cmd, args := os.Args[1], os.Args[2:]
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var err error
	switch cmd {
	case "dev":
		err = withConfig(func(cfg config.Config) error { return runDev(ctx, cfg) })
	case "cluster":
		err = withConfig(func(cfg config.Config) error { return runCluster(ctx, cfg, args) })
	case "certs":
		err = runCerts(args)
	case "api":
		err = withConfig(func(cfg config.Config) error { return runAPI(ctx, cfg) })
	case "worker":
		err = withConfig(func(cfg config.Config) error { return runWorker(ctx, cfg) })
	case "migrate":
		err = withConfig(func(cfg config.Config) error { return runMigrate(ctx, cfg) })
	case "token":
		err = runToken(args)
	case "loadgen":
		err = withConfig(func(cfg config.Config) error { return runLoadgen(ctx, cfg, args) })
	case "audit":
		err = withConfig(func(cfg config.Config) error { return runAudit(ctx, cfg, args) })
	case "events":
		err = withConfig(func(cfg config.Config) error { return runEvents(ctx, cfg, args) })
	case "release":
		err = withConfig(func(cfg config.Config) error { return runRelease(ctx, cfg, args) })
	case "version":
		err = runVersion(args)
	case "builds":
		err = withConfig(func(cfg config.Config) error { return runBuilds(ctx, cfg, args) })
	case "help", "-h", "--help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "checkout "+cmd+":", err)
		os.Exit(1)
	}
}

func withConfig(run func(config.Config) error) error {
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

func runMigrate(ctx context.Context, cfg config.Config) error {
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

func runToken(args []string) error {
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	user := fs.Int64("user", 7, "user id (the token's sub)")
	role := fs.String("role", auth.RoleShopper, "role: "+strings.Join([]string{auth.RoleShopper, auth.RoleSeller, auth.RoleSupport, auth.RoleOps}, ", "))
	seller := fs.Int64("seller", 0, "seller id (seller role only)")
	ttl := fs.Duration("ttl", 24*time.Hour, "validity")
	if err := fs.Parse(args); err != nil {
		return err
	}
	// The keys of AUTH_JWT_SECRET and the AUTH_JWT_* settings; without a secret, those of the
	// local stack (`checkout dev`'s, in DATA_DIR).
	cfg, err := config.FromEnv()
	if err == nil {
		cfg, err = cfg.WithDevSecrets()
	}
	if err != nil {
		return err
	}
	tok, err := cfg.AuthKeys().Mint(auth.Principal{UserID: *user, Role: *role, SellerID: *seller}, *ttl)
	if err != nil {
		return err
	}
	fmt.Println(tok)
	return nil
}
