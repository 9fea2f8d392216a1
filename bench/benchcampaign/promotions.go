package main

import (
	"context"
	"fmt"
	"log"
	"math"
	"strings"
	"time"

	"github.com/marketplace/checkout/audit"
	"github.com/marketplace/checkout/bench/internal/figures"
	"github.com/marketplace/checkout/internal/dev/benchkit"
	"github.com/marketplace/checkout/loadgen"
)

// The coupons and campaigns section (-promotions): the campaign mix with and without promotions,
// in turns on one stack, so that a difference between the two can be set against the difference
// between two runs of the same mix.
const (
	promotionsStart = "<!-- promotions-bench:start -->"
	promotionsEnd   = "<!-- promotions-bench:end -->"
)

// promotionRounds is how many runs of each mix -promotions makes; the mixes take turns going
// first from one round to the next.
const promotionRounds = 3

// PromotionResults are everything one -promotions invocation measured.
type PromotionResults struct {
	StartedAt     time.Time     `json:"startedAt"`
	WindowSeconds float64       `json:"windowSeconds"`
	Shoppers      int           `json:"shoppers"`
	CPUs          int           `json:"cpus"`
	CPUModel      string        `json:"cpuModel"`
	LoadBefore    float64       `json:"loadAverageBefore"`
	LoadAfter     float64       `json:"loadAverageAfter"`
	Runs          []figures.Run `json:"runs"`
	Audit         audit.Report  `json:"audit"`
}

// mainPromotions measures (or, with from, reads an earlier run's JSON), writes the JSON and the
// section.
func mainPromotions(ctx context.Context, shoppers int, window time.Duration, from, jsonOut, doc string) error {
	res, err := measureSection(from, jsonOut, doc, promotionsStart, promotionsEnd,
		func() (PromotionResults, error) { return runPromotions(ctx, shoppers, window) }, renderPromotions)
	if err != nil {
		return err
	}
	if !res.Audit.OK() {
		return fmt.Errorf("the audit found %d violations (listed in the section)", len(res.Audit.Violations))
	}
	return nil
}

func runPromotions(ctx context.Context, shoppers int, window time.Duration) (PromotionResults, error) {
	res := PromotionResults{StartedAt: time.Now().UTC(), WindowSeconds: window.Seconds(), Shoppers: shoppers,
		CPUs: benchkit.OnlineCPUs(), CPUModel: benchkit.CPUModel(), LoadBefore: benchkit.LoadAverage()}
	log.Printf("starting the dev stack")
	b, err := startDevBench(ctx, "checkout-bench-promotions-", admissionOff...)
	if err != nil {
		return res, err
	}
	defer b.close()
	steps := []func() (figures.Run, error){
		func() (figures.Run, error) {
			return b.loadRun(ctx, runCampaign, shoppers, window, loadgen.CampaignMix, "")
		},
		func() (figures.Run, error) {
			return b.loadRun(ctx, runPromo, shoppers, window, loadgen.CampaignMix, "", withPromotions)
		},
	}
	for round := range promotionRounds {
		for i := range steps {
			r, err := steps[(i+round)%len(steps)]()
			if err != nil {
				return res, err
			}
			log.Printf("%s: %.1f orders/s, p99 %.0f ms, %d with the coupon, other processes %.0f%%", r.What, r.PerSecond,
				r.P99Ms, r.CouponOrders, r.Window.CPU.OtherPct)
			res.Runs = append(res.Runs, r)
		}
	}
	log.Printf("auditing")
	if res.Audit, err = auditDev(ctx, b.stack); err != nil {
		return res, err
	}
	res.LoadAfter = benchkit.LoadAverage()
	return res, nil
}

// promotionFigures are the runs of one mix: their orders/s, its mean and its spread (the largest
// difference between two of its runs, as a share of the mean). A run with faults (5xx or
// unanswered requests: the stack stalled) is left out of both and counted in stalled: its
// figure is the stall's, not the mix's.
type promotionFigures struct {
	runs         []figures.Run
	stalled      int
	mean, spread float64
}

func figuresOf(res PromotionResults, what string) promotionFigures {
	var f promotionFigures
	var rates []float64
	for _, r := range res.Runs {
		if r.What != what {
			continue
		}
		if r.Errors > 0 {
			f.stalled++
			continue
		}
		f.runs = append(f.runs, r)
		rates = append(rates, r.PerSecond)
	}
	sp := benchkit.SpreadOf(rates)
	f.mean = sp.Mean
	if f.mean > 0 {
		f.spread = (sp.Hi - sp.Lo) / f.mean
	}
	return f
}

// renderPromotions writes the coupons and campaigns section of docs/benchmarks.md.
func renderPromotions(res PromotionResults) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	window := time.Duration(res.WindowSeconds * float64(time.Second))
	w("%s\n## Coupons and campaigns: the campaign mix with and without them\n\n", promotionsStart)
	w("Written by `make bench-promotions` (bench/benchcampaign -promotions); running it again replaces this section.\n\n")
	w("- Command: `make bench-promotions` (`bin/benchcampaign -promotions -shoppers %d -window %s`), "+
		"measured %s on %d CPUs (%s); 1-minute load average %.2f when the run began and %.2f when it ended.\n",
		res.Shoppers, window, res.StartedAt.Format("2006-01-02 15:04 UTC"), res.CPUs, res.CPUModel, res.LoadBefore, res.LoadAfter)
	w("- One `bin/checkout-dev dev` stack as in the campaign section (admission control off), a 5 s warm-up, then %d runs "+
		"of each mix, %d `checkout-dev loadgen` shoppers for %s each (below the knee the campaign section finds: past it the "+
		"dev server's SQLite store, one writer at a time, makes whole runs wait on it and their figures say more about "+
		"that than about the orders), the two mixes taking turns going first:\n", promotionRounds,
		res.Shoppers, window)
	w("  - **without**: the campaign mix, no coupon and no campaign;\n")
	w("  - **with**: the same mix, the run's coupon (%s %% off up to %s TRY, made through the ops API) on %.0f %% of the orders — "+
		"previewed and placed with `couponCode`, spent in the order's transaction and settled with its end — and a "+
		"%.0f %% campaign on the hot SKUs (`checkout-dev loadgen --coupon-share %.1f --campaign-hot %.0f`).\n",
		loadgen.CouponPercent, loadgen.CouponCap, 100*promoCouponShare, promoCampaignHot, promoCouponShare, promoCampaignHot)
	w("- Then the invariant audit over everything the runs left.\n\n")

	w("| run | mix | orders answered 201 per s | POST /orders p50 / p99 ms | orders with the coupon | refused for the coupon | 5xx or no answer | other processes %% |\n")
	w("|---:|---|---:|---:|---:|---:|---:|---:|\n")
	for i, r := range res.Runs {
		mix := "without"
		if r.What == runPromo {
			mix = "with"
		}
		refused := int64(0)
		for _, e := range r.Refusals {
			if strings.HasPrefix(e.Code, "COUPON_") {
				refused += e.Count
			}
		}
		w("| %d | %s | %.1f | %.0f / %.0f | %d | %d | %d | %.0f |\n", i+1, mix, r.PerSecond, r.P50Ms, r.P99Ms, r.CouponOrders,
			refused, r.Errors, r.Window.CPU.OtherPct)
	}
	without, with := figuresOf(res, runCampaign), figuresOf(res, runPromo)
	if without.mean == 0 || with.mean == 0 {
		w("%s\n", promotionsEnd)
		return b.String()
	}
	change := with.mean/without.mean - 1
	noise := max(without.spread, with.spread)
	if without.stalled+with.stalled > 0 {
		w("\nLeft out of the means: %d run(s) without and %d with in which requests were answered 5xx or not at all "+
			"(listed under the faults below): the dev server stalled the whole stack for tens of seconds, and such a "+
			"run's figure measures the stall, not the mix.\n", without.stalled, with.stalled)
	}
	w("\nMean orders/s: **%.1f without, %.1f with** (with ÷ without: %.2f, a change of %+.0f %%). Runs of one mix "+
		"differed among themselves by up to %.0f %% of their mean (without: %.0f %%, with: %.0f %%). ", without.mean,
		with.mean, with.mean/without.mean, 100*change, 100*noise, 100*without.spread, 100*with.spread)
	if math.Abs(change) <= noise {
		w("The change is within that spread: coupons and a campaign cost no throughput these runs can measure.\n\n")
	} else {
		w("The change is larger than that spread: coupons and a campaign have a measurable cost here.\n\n")
	}
	writeOutcome(&b, figures.Results{Runs: res.Runs, Audit: res.Audit}, "")
	w("%s\n", promotionsEnd)
	return b.String()
}
