// Command chaos is `make chaos`: faults under load against `make cluster`'s shape (package
// internal/dev/chaos). It prints a table, one row per fault, and exits 1 on any loss: an order not
// ended as its scenario says, a key naming two orders, a 500 or a 5xx without a code, an audit
// violation, a fault the cluster did not recover from in time.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/marketplace/checkout/internal/dev/chaos"
)

func main() {
	o := chaos.Full()
	short := flag.Bool("short", false, "the short form make test runs: "+strings.Join(chaos.Short().Faults, ", "))
	faults := flag.String("faults", "", "the faults, in order, comma-separated (default: every one: "+strings.Join(chaos.AllFaults, ", ")+")")
	shoppers := flag.Int("shoppers", 0, "concurrent shoppers (default: the form's)")
	spacing := flag.Duration("spacing", 0, "time between two faults (default: the form's)")
	flag.Parse()
	if *short {
		o = chaos.Short()
	}
	if *faults != "" {
		o.Faults = strings.Split(*faults, ",")
	}
	if *shoppers > 0 {
		o.Shoppers = *shoppers
	}
	if *spacing > 0 {
		o.Spacing = *spacing
	}
	o.Out = os.Stderr
	log.SetFlags(0)
	log.SetPrefix("chaos: ")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	began := time.Now()
	res, err := chaos.Run(ctx, o)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println()
	if err := res.WriteTable(os.Stdout, o); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("\n%s in all\n", time.Since(began).Round(time.Second))
	if len(res.Losses) > 0 {
		os.Exit(1)
	}
}
