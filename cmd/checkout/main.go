// Command checkout is the product's binary, what a deployment runs: `api` and `worker` are its two
// services, `migrate` applies the schema, `certs` makes a deployment's certificates, `token` mints
// tokens; `audit`, `events`, `version` and `builds` are the operators'. The harness that runs it on one
// machine (`dev`, `cluster`, `release`, `loadgen`) is a binary of its own, cmd/checkout-dev.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/internal/service"
)

const usage = `checkout: marketplace checkout backend

usage: checkout <command> [flags]

commands:
  certs     make a cluster's certificate authority and certificates in a folder, once (renewing
            those near their end): certs --dir /tls (what make cluster does in its folder)
  api       run the REST API
  worker    run the Temporal worker
  migrate   apply database migrations (and the payment simulator's, when PAYMENT_PROVIDER=paysim)
  token     mint a JWT with AUTH_JWT_SECRET (or the local stack's development secret):
            token --user 7 --role shopper [--seller 42] [--ttl 24h]
  version   the build of the workflow code this binary runs, and its commit: version [--json]
  builds    the builds of the workflow code in the worker deployment and their open runs; move
            long-waiting runs to this build; make a build current or ramp it (builds help)
  events    the checkout's events on the broker: events tail [--all] [--type order.] [--validate]
  audit     check the invariants (no oversell, no stranded stock or money, no order open past
            its hold) against DATABASE_URL and TEMPORAL_ADDRESS; exit 1 on any violation

The local stack, the production shape on this machine, releases into it and load runs are
checkout-dev's (checkout-dev help). Settings come from environment variables; see docs/settings.md.
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
	case "certs":
		err = runCerts(args)
	case "api":
		err = service.WithConfig(func(cfg config.Config) error { return service.API(ctx, cfg) })
	case "worker":
		err = service.WithConfig(func(cfg config.Config) error { return service.Worker(ctx, cfg) })
	case "migrate":
		err = service.WithConfig(func(cfg config.Config) error { return service.Migrate(ctx, cfg) })
	case "token":
		err = runToken(args)
	case "audit":
		err = service.WithConfig(func(cfg config.Config) error { return service.Audit(ctx, cfg, args) })
	case "events":
		err = service.WithConfig(func(cfg config.Config) error { return runEvents(ctx, cfg, args) })
	case "version":
		err = runVersion(args)
	case "builds":
		err = service.WithConfig(func(cfg config.Config) error { return runBuilds(ctx, cfg, args) })
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
	// local stack (`checkout-dev dev`'s, in DATA_DIR).
	cfg, err := config.FromEnv()
	if err == nil {
		cfg, err = cfg.WithDevSecrets()
	}
	if err != nil {
		return err
	}
	if cfg.OIDCIssuer != "" {
		return fmt.Errorf("AUTH_OIDC_ISSUER is set: that API takes tokens from its identity provider (%s) only, and would refuse one minted here", cfg.OIDCIssuer)
	}
	tok, err := cfg.AuthKeys().Mint(auth.Principal{UserID: *user, Role: *role, SellerID: *seller}, *ttl)
	if err != nil {
		return err
	}
	fmt.Println(tok)
	return nil
}
