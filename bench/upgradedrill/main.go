// Command upgradedrill is `make upgrade-drill`: orders left in every state an order waits in on
// `make cluster`'s shape running the previous release, today's build released into it, each order
// finished (package internal/dev/drill). It prints a table, one row per order, and exits 1 on any
// order not ended as its scenario says, the previous build not drained, or an audit violation.
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"os/signal"
	"path/filepath"

	"github.com/marketplace/checkout/internal/dev/drill"
)

func main() {
	o := drill.Options{Out: os.Stderr}
	flag.BoolVar(&o.Short, "short", false, "the short form make test runs: one worker, one API replica, no ramp")
	flag.StringVar(&o.Previous, "previous", "", "the build released before today's (default: the one before HEAD's in the repository's history)")
	flag.StringVar(&o.PreviousBinary, "previous-binary", "", "its binary (default: built from the newest commit of that build in the repository's history)")
	flag.StringVar(&o.Today, "binary", "bin/checkout", "today's checkout binary: the release (the checkout-dev beside it runs the cluster)")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("upgrade-drill: ")
	var err error
	if o.Repo, err = filepath.Abs("."); err != nil {
		log.Fatal(err)
	}
	o.Tools = filepath.Join(o.Repo, "bin")
	if o.Today, err = filepath.Abs(o.Today); err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := drill.Run(ctx, o)
	res.WriteTable(os.Stdout)
	if err != nil {
		log.Fatal(err)
	}
	if !res.OK() {
		os.Exit(1)
	}
}
