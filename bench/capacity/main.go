// Command capacity is `make capacity`: a queueing model of the checkout under campaign traffic,
// fed by the per-order costs `make bench-cluster` and the dev stack's runs measured, checked
// against the cluster's measured load points, then used to size a topology for 1,000 orders a
// second. It measures nothing: it reads docs/bench-cluster.json, docs/bench-campaign.json and
// docs/bench-lockwaits.json, simulates (a discrete-event simulation with fixed seeds, so the same
// files give the same section), prints the section and writes it into docs/benchmarks.md.
package main

import (
	"flag"
	"fmt"
	"log"

	"github.com/marketplace/checkout/bench/internal/figures"
	"github.com/marketplace/checkout/internal/dev/benchkit"
)

const (
	startMarker = "<!-- capacity:start -->"
	endMarker   = "<!-- capacity:end -->"
)

func main() {
	clusterPath := flag.String("cluster", "docs/bench-cluster.json", "make bench-cluster's figures")
	campaignPath := flag.String("campaign", "docs/bench-campaign.json", "make bench-campaign's figures (the plain run)")
	lockPath := flag.String("lockwaits", "docs/bench-lockwaits.json", "make bench-lockwaits' figures")
	out := flag.String("out", "docs/benchmarks.md", "the document to write the section into (empty: print only)")
	calibrateAt := flag.Int("calibrate", 50, "the shopper count whose campaign run gives the costs")
	target := flag.Float64("target", 1000, "orders answered 201 per second to size for")
	seed := flag.Uint64("seed", 1, fmt.Sprintf("the first seed of the simulations (the validation takes it and the next %d)", validationSeeds-1))
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("capacity: ")

	var cluster, campaign figures.Results
	var lockWaits figures.LockWaitResults
	for path, v := range map[string]any{*clusterPath: &cluster, *campaignPath: &campaign, *lockPath: &lockWaits} {
		if err := readJSON(path, v); err != nil {
			log.Fatal(err)
		}
	}
	in, err := calibrate(cluster, campaign, lockWaits, *calibrateAt)
	if err != nil {
		log.Fatal(err)
	}
	v, err := validate(in, cluster, *calibrateAt, *seed)
	if err == nil {
		err = reverse(&v, cluster, campaign, lockWaits, *calibrateAt, *seed)
	}
	if err != nil {
		log.Fatal(err)
	}
	sz := size(in.Costs, in.ShardIO, in.NotifyHold, *target, *seed)
	section := render(in, v, sz, *calibrateAt, *seed)
	fmt.Print(section)
	if *out != "" {
		if err := benchkit.WriteSection(*out, startMarker, endMarker, section); err != nil {
			log.Fatal(err)
		}
	}
}
