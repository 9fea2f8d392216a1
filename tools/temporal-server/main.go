// Command temporal-server is the Temporal server (go.temporal.io/server, the version the Makefile
// pins) with the checkout cluster's authorization: a claim mapper that knows the product's
// services by their client certificates and its staff by the identity provider's tokens, and an
// authorizer that lets each do only its part (authz.go). It takes the upstream server's
// command line: --root, --config, --env, then `start --service <name>`.
//
// A module of its own, so that the product's go.mod does not carry the server.
//
//	CHECKOUT_NAMESPACE     the product's namespace (default "default")
//	CHECKOUT_OIDC_ISSUER   the identity provider's issuer; staff tokens must name it
//	CHECKOUT_OIDC_AUDIENCE the audience staff tokens must carry (the UI's client id)
//
// The provider's keys come from global.authorization.jwtKeyProvider in the configuration (its
// JWKS URL), refreshed on its interval, so a rotated key is taken without a restart.
package main

import (
	"cmp"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"go.temporal.io/server/common/authorization"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/common/log"
	_ "go.temporal.io/server/common/persistence/sql/sqlplugin/postgresql" // the cluster's persistence
	"go.temporal.io/server/temporal"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "temporal-server:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	top := flag.NewFlagSet("temporal-server", flag.ContinueOnError)
	root := top.String("root", ".", "root folder")
	configDir := top.String("config", "config", "configuration folder, relative to --root")
	env := top.String("env", "development", "configuration file name (<env>.yaml)")
	if err := top.Parse(args); err != nil {
		return err
	}
	if top.Arg(0) != "start" {
		return fmt.Errorf("usage: temporal-server [--root R] [--config C] [--env E] start --service S [--service S…]")
	}
	var services multi
	start := flag.NewFlagSet("start", flag.ContinueOnError)
	start.Var(&services, "service", "a service to start (repeatable)")
	if err := start.Parse(top.Args()[1:]); err != nil {
		return err
	}
	if len(services) == 0 {
		services = temporal.DefaultServices
	}
	cfg, err := config.LoadConfig(*env, filepath.Join(*root, *configDir), "")
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	logger := log.NewZapLogger(log.BuildZapLogger(cfg.Log))
	dc := dynamicconfig.Client(dynamicconfig.NewNoopClient())
	if cfg.DynamicConfigClient != nil {
		if dc, err = dynamicconfig.NewFileBasedClient(cfg.DynamicConfigClient, logger, temporal.InterruptCh()); err != nil {
			return fmt.Errorf("dynamic config: %w", err)
		}
	}
	mapper := &claimMapper{issuer: os.Getenv("CHECKOUT_OIDC_ISSUER"), audience: os.Getenv("CHECKOUT_OIDC_AUDIENCE")}
	if len(cfg.Global.Authorization.JWTKeyProvider.KeySourceURIs) > 0 {
		mapper.keys = authorization.NewDefaultTokenKeyProvider(&cfg.Global.Authorization, logger)
	}
	authz := &authorizer{namespace: cmp.Or(os.Getenv("CHECKOUT_NAMESPACE"), "default")}
	s, err := temporal.NewServer(
		temporal.ForServices(services),
		temporal.WithConfig(cfg),
		temporal.WithDynamicConfigClient(dc),
		temporal.WithLogger(logger),
		temporal.InterruptOn(temporal.InterruptCh()),
		temporal.WithAuthorizer(authz),
		temporal.WithClaimMapper(func(*config.Config) authorization.ClaimMapper { return mapper }),
	)
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	return s.Start()
}

type multi []string

func (m *multi) String() string     { return fmt.Sprint([]string(*m)) }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }
