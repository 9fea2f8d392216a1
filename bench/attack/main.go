// Command attack is `make attack`: the checkout's black-box attack suite (package
// internal/dev/attack) against a stack running on this machine — `make run`'s (the default) or
// `make cluster`'s (-target cluster) — printing PASS, FAIL or SKIP for each attack and exiting 1 on
// any FAIL.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"

	"github.com/marketplace/checkout/internal/dev/attack"
)

func main() {
	target := flag.String("target", "dev", "the stack: dev (make run) or cluster (make cluster)")
	base := flag.String("base", "", "the API's URL, loopback only (default: the stack's; make run's is PUBLIC_BASE_URL's, http://localhost:8080)")
	data := flag.String("data", "", "make run's data folder, with its dev-secrets.json (default: DATA_DIR's, .data)")
	dir := flag.String("dir", filepath.Join(".data", "cluster"), "make cluster's data folder (its checkout.env)")
	short := flag.Bool("short", false, "the short form make test runs: every attack but the long ones")
	only := flag.String("only", "", "run only these attacks, comma-separated")
	list := flag.Bool("list", false, "list the attacks and exit")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("attack: ")
	if *list {
		for _, a := range attack.Suite {
			fmt.Printf("%-36s %-11s %s\n", a.Name, a.Kind, a.What)
		}
		return
	}
	var t attack.Target
	var err error
	switch *target {
	case "dev":
		// make run's settings, as the shell gives them to `checkout-dev dev`, and the flags over them.
		flags := map[string]string{"DATA_DIR": *data, "PUBLIC_BASE_URL": *base}
		t, err = attack.DevTarget(func(k string) string {
			if v := flags[k]; v != "" {
				return v
			}
			return os.Getenv(k)
		})
	case "cluster":
		t, err = attack.ClusterTarget(attack.ClusterEnvFile(*dir))
		if err == nil && *base != "" {
			t.Base = *base
		}
	default:
		err = fmt.Errorf("-target %q: dev or cluster", *target)
	}
	if err != nil {
		log.Fatal(err)
	}
	o := attack.Options{Short: *short, Out: os.Stdout}
	if *only != "" {
		o.Only = strings.Split(*only, ",")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := attack.Execute(ctx, t, o)
	if err != nil {
		log.Fatal(err)
	}
	if rep.Failed() {
		os.Exit(1)
	}
}
