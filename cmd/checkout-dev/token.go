package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"

	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/internal/dev/cluster"
)

// runToken prints a shopper's token from the running cluster's identity provider, as the harness
// gets them (the JWT-profile grant with the key the cluster keeps): for scripts that drive the
// cluster's API as a shopper. Its settings are the cluster's checkout.env (AUTH_OIDC_ISSUER,
// AUTH_OIDC_AUDIENCE). `checkout token` mints the shared-secret tokens of `checkout-dev dev`.
func runToken(ctx context.Context, cfg config.Config, args []string) error {
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	user := fs.Int64("user", cluster.MinShopperSubject, fmt.Sprintf("the shopper's user id (%d and up)", cluster.MinShopperSubject))
	dir := fs.String("dir", "", "the cluster's folder (default: DATA_DIR's cluster)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if cfg.OIDCIssuer == "" {
		return errors.New("AUTH_OIDC_ISSUER is not set: source the cluster's checkout.env (a dev stack takes `checkout token`)")
	}
	if *dir == "" {
		*dir = filepath.Join(cfg.Dev.DataDir, "cluster")
	}
	tokens, err := cluster.ClusterTokens(*dir, cfg.OIDCIssuer, cfg.OIDCAudience)
	if err != nil {
		return fmt.Errorf("the cluster's tokens: %w", err)
	}
	token, err := tokens.Shopper(ctx, *user)
	if err != nil {
		return err
	}
	fmt.Println(token)
	return nil
}
