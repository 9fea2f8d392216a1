// Command checkout-dev is the harness that runs the product on one machine: `dev` runs the whole
// local stack, `cluster` its production shape, `release` releases a build into that cluster, and
// `loadgen` drives a stack as shoppers do. It runs the product's binary, cmd/checkout, which holds
// no part of it.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/internal/dev/builds"
	"github.com/marketplace/checkout/internal/service"
	"github.com/marketplace/checkout/workflows"
)

const usage = `checkout-dev: the harness that runs the marketplace checkout on this machine

usage: checkout-dev <command> [flags]

commands:
  dev       run everything locally: PostgreSQL, Temporal dev server, migrations, demo data,
            worker and API (what make run runs)
  cluster   run the production shape on this machine: PostgreSQL, the Temporal server as four
            processes and its UI, workers and API replicas behind HAProxy (what make cluster
            runs): cluster [--apis 2] [--workers 2] [--history-shards N] [--ports-from N]
  release   release a binary into the running cluster: its workers beside the running ones, made
            current once they poll, the earlier build drained: release [--binary PATH] [--ramp 10,50]
  loadgen   drive a local stack's API as shoppers and sellers do, then audit: loadgen --duration 60s
            (loadgen -h lists the mix, hot SKUs and bounds)
  token     a shopper's token from the running cluster's identity provider, with its
            checkout.env's settings: token [--user 1000000]

The product's binary, checkout, is the one beside this binary (make build builds the two into
bin/) unless --binary names another: the cluster runs it, a release releases it, dev keeps it as
this build's. Settings come from environment variables; see README.md.
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
		err = service.WithConfig(func(cfg config.Config) error { return runDev(ctx, cfg, args) })
	case "cluster":
		err = service.WithConfig(func(cfg config.Config) error { return runCluster(ctx, cfg, args) })
	case "release":
		err = service.WithConfig(func(cfg config.Config) error { return runRelease(ctx, cfg, args) })
	case "loadgen":
		err = service.WithConfig(func(cfg config.Config) error { return runLoadgen(ctx, cfg, args) })
	case "token":
		err = service.WithConfig(func(cfg config.Config) error { return runToken(ctx, cfg, args) })
	case "help", "-h", "--help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "checkout-dev "+cmd+":", err)
		os.Exit(1)
	}
}

// productBinary is the product's binary: path when given, else checkout in this binary's folder.
func productBinary(path string) (string, error) {
	if path == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", err
		}
		path = filepath.Join(filepath.Dir(exe), "checkout")
	}
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("the product's binary: %w (make build builds it beside checkout-dev; or give --binary)", err)
	}
	return filepath.Abs(path)
}

// thisBuildsBinary is productBinary, which must be of this binary's build: dev runs this build's
// worker in its own process and keeps that binary as the build's.
func thisBuildsBinary(ctx context.Context, path string) (string, error) {
	bin, err := productBinary(path)
	if err != nil {
		return "", err
	}
	info, err := builds.Describe(ctx, bin)
	if err != nil {
		return "", err
	}
	if info.BuildID != workflows.BuildID {
		return "", fmt.Errorf("%s is of build %s, this binary of build %s: build the two from one tree (make build)",
			bin, info.BuildID, workflows.BuildID)
	}
	return bin, nil
}
