// Command benchcost measures what one order costs the Temporal dev server, scenario by scenario:
// persistence calls (history, matching, frontend) and visibility writes per order, beside an empty
// Update-with-Start workflow measured on the same server. It writes the "Temporal cost of an
// order" section of docs/benchmarks.md.
//
// Each configuration is its own `checkout-dev dev` stack: this build with the dev server as `dev`
// starts it, this build with the CLI's own search-attribute setting put back, and, when -baseline
// names another build of the binary, that build. Orders run one scenario at a time, two shoppers,
// each scenario's orders left to finish (abandoned holds to expire) before the next; the server's
// idle rate, measured first, is taken off.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math"
	"os"
	"os/signal"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/marketplace/checkout/internal/dev/benchkit"
	"github.com/marketplace/checkout/loadgen"
)

const (
	startMarker = "<!-- cost-bench:start -->"
	endMarker   = "<!-- cost-bench:end -->"
	holdTTL     = 15 * time.Second
	// thisBuild is this build's binary.
	thisBuild = "bin/checkout-dev"
)

// scenarios in the order they run; the campaign mix weighs them.
var scenarios = []string{loadgen.ScenarioOK, loadgen.ScenarioDecline, loadgen.ScenarioTimeout, loadgen.Scenario3DSApprove,
	loadgen.Scenario3DSDecline, loadgen.ScenarioCancel, loadgen.ScenarioAbandon}

type config struct {
	label, binary string
	env           []string
}

// cost is what one order (or one empty workflow) cost, on average.
type cost struct {
	calls, visibility float64
	byOp              map[string]float64
}

type result struct {
	cfg       config
	floor     cost
	scenarios map[string]cost
}

func main() {
	orders := flag.Int("orders", 20, "orders per scenario (and empty workflows for the floor)")
	baseline := flag.String("baseline", "", "another build's binary that runs `dev` to measure beside this one, its CPU pass and persistence calls (a path: its checkout-dev, or its checkout from before the two binaries)")
	baselineLabel := flag.String("baseline-label", "baseline", "what to call the baseline build")
	out := flag.String("out", "docs/benchmarks.md", "the document to write the sections into")
	runs := flag.Int("runs", 3, "runs of the CPU pass, each on a fresh stack (each: the floor, paid at once, 3-D Secure, the campaign mix)")
	cpuOrders := flag.Int("cpu-orders", 120, "orders per kind (and empty workflows) in each run of the CPU pass")
	cpuOnly := flag.Bool("cpu-only", false, "only the CPU pass (no persistence calls): on this build, and on -baseline's when given")
	var compare compareFlag
	flag.Var(&compare, "cpu-compare", "another stack for the CPU pass, label:KEY=VALUE[,KEY=VALUE] (repeatable): "+
		"this build with those settings, measured in turns with it in the same run (e.g. tcp:PG_UNIX_SOCKET=false)")
	floorWorker := flag.String(floorWorkerFlag, "", "internal: run the floor's worker against this Temporal frontend")
	floorDir := flag.String("floor-dir", "", "internal: the dev stack's data folder, for -"+floorWorkerFlag)
	plainServer := flag.String(plainServerFlag, "", "internal: serve the plain checkout on this database")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *floorWorker != "" {
		runFloorWorker(ctx, *floorWorker, *floorDir)
		return
	}
	if *plainServer != "" {
		runPlainServer(ctx, *plainServer)
		return
	}
	if err := benchkit.ChdirModuleRoot(); err != nil {
		log.Fatal(err)
	}

	var cfgs []config
	if *baseline != "" {
		cfgs = append(cfgs, config{label: *baselineLabel, binary: *baseline})
	}
	if !*cpuOnly {
		cfgs = append(cfgs, config{label: "this build, dev server with the CLI's search-attribute setting",
			binary: thisBuild, env: []string{"TEMPORAL_DEV_DYNAMIC_CONFIG=system.forceSearchAttributesCacheRefreshOnRead=true"}})
	}
	cfgs = append(cfgs, config{label: "this build", binary: thisBuild})
	started := time.Now().UTC()
	var results []result
	if !*cpuOnly {
		for _, c := range cfgs {
			log.Printf("persistence calls on %s", c.label)
			r, err := onStack(ctx, c, func(st *benchkit.Stack) (result, error) {
				return measureCalls(ctx, st, result{cfg: c, scenarios: map[string]cost{}}, *orders)
			})
			if err != nil {
				log.Fatalf("%s: %v", c.label, err)
			}
			results = append(results, r)
		}
	}
	write := func(section, start, end string) {
		fmt.Print(section)
		if *out != "" {
			if err := benchkit.WriteSection(*out, start, end, section); err != nil {
				log.Fatal(err)
			}
		}
	}
	// The CPU pass: this build's stack with the plain checkout, and beside it the -cpu-compare
	// stacks, with it too, so that every stack of this build is measured the same way, and the
	// baseline build's, without it (it writes this build's tables).
	this := cpuConfig{config: config{label: "this build", binary: thisBuild}, plain: true}
	stacks := []cpuConfig{this}
	if *baseline != "" {
		stacks = append(stacks, cpuConfig{config: config{label: *baselineLabel + " (`" + *baseline + "`)", binary: *baseline}})
	}
	for _, c := range compare {
		stacks = append(stacks, cpuConfig{config: c, plain: true})
	}
	measured, err := cpuInTurns(ctx, stacks, *runs, *cpuOrders)
	if err != nil {
		log.Fatal(err)
	}
	cpu, others := measured[0], measured[1:]
	if !*cpuOnly {
		write(render(results, *orders, started), startMarker, endMarker)
	}
	write(renderCPU(cpu, others), cpuStartMarker, cpuEndMarker)
	fmt.Println(cpu.scriptLine())
}

// cpuConfig is a stack of the CPU pass: plain, whether the plain checkout is measured on it.
type cpuConfig struct {
	config
	plain bool
}

// cpuInTurns is the CPU pass on each of stacks: every run on a fresh stack, one run of each stack in
// turn, the turn's order reversed every other run, so that each is measured first as often as last.
// (An A/A run, one build as two stacks measured one after the other with all their runs, put the
// first above the second in every process, by about a tenth; and one build's fresh stacks differ
// from one start to the next by as much, so a single stack's runs would understate its spread.)
// The results are in the order of stacks, each labelled as its stack is.
func cpuInTurns(ctx context.Context, stacks []cpuConfig, runs, n int) ([]cpuResult, error) {
	out := make([]cpuResult, len(stacks))
	for r := range runs {
		for _, i := range turnOrder(len(stacks), r) {
			st := stacks[i]
			log.Printf("CPU pass on %s (turn %d of %d)", st.label, r+1, runs)
			cr, err := onStack(ctx, st.config, func(s *benchkit.Stack) (cpuResult, error) {
				return measureCPU(ctx, s, n, st.plain)
			})
			if err != nil {
				return nil, fmt.Errorf("%s: CPU pass: %w", st.label, err)
			}
			if out[i].runs == nil {
				cr.label, cr.env = st.label, st.env
				out[i] = cr
			} else {
				out[i].runs = append(out[i].runs, cr.runs...)
			}
		}
	}
	return out, nil
}

// turnOrder is the order of n stacks in turn r: as given in even turns, reversed in odd ones.
func turnOrder(n, r int) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = i
		if r%2 == 1 {
			order[i] = n - 1 - i
		}
	}
	return order
}

// onStack starts a fresh stack of c, lets its start-up work settle, measures it with m and stops it.
func onStack[T any](ctx context.Context, c config, m func(*benchkit.Stack) (T, error)) (T, error) {
	env := append([]string{"HOLD_TTL=" + holdTTL.String(), "PAYMENT_RECONCILER_EVERY=1h", "SWEEPER_EVERY=1h",
		"RECONCILER_EVERY=1h"}, c.env...)
	st, err := benchkit.StartStackOf(ctx, c.binary, "benchcost-", env...)
	if err != nil {
		var zero T
		return zero, err
	}
	defer st.Stop()
	time.Sleep(5 * time.Second) // start-up work (schedules, namespace) settles
	return m(st)
}

// measureCalls is the persistence pass: the dev server's persistence calls and visibility writes
// per empty workflow and per order of each scenario.
func measureCalls(ctx context.Context, st *benchkit.Stack, res result, n int) (result, error) {
	idleFrom, err := scrape(ctx, st.TemporalMetrics)
	if err != nil {
		return res, err
	}
	idleStart := time.Now()
	time.Sleep(15 * time.Second)
	idleTo, err := scrape(ctx, st.TemporalMetrics)
	if err != nil {
		return res, err
	}
	idle := idleTo.minus(idleFrom).per(time.Since(idleStart).Seconds())

	floor, err := benchkit.StartFloor(st)
	if err != nil {
		return res, err
	}
	a, err := scrape(ctx, st.TemporalMetrics)
	if err != nil {
		return res, err
	}
	t0 := time.Now()
	for i := range n {
		if err := floor.Run(ctx, fmt.Sprintf("floor-%d-%d", time.Now().UnixNano(), i)); err != nil {
			return res, err
		}
	}
	time.Sleep(2 * time.Second)
	b, err := scrape(ctx, st.TemporalMetrics)
	if err != nil {
		return res, err
	}
	floor.Close()
	res.floor = b.minus(a).less(idle, time.Since(t0).Seconds()).per(float64(n)).cost()

	for _, sc := range scenarios {
		cfg := loadgen.Defaults()
		cfg.BaseURL, cfg.MetricsURL, cfg.JWTSecret, cfg.OpsToken = st.Base, st.Metrics, st.Secret, st.OpsToken
		cfg.Shoppers, cfg.Orders, cfg.Duration = 2, n, 10*time.Minute
		cfg.Mix = loadgen.Mix{sc: 1}
		cfg.RepeatShare, cfg.HotShare = 0, 0
		cfg.HoldTTL, cfg.WaitAbandoned, cfg.Settle = holdTTL, true, time.Minute
		var from snapshot
		var start time.Time
		var scrapeErr error
		cfg.OnPhase = func(p string) {
			if p == loadgen.PhaseLoad {
				from, scrapeErr = scrape(ctx, st.TemporalMetrics)
				start = time.Now()
			}
		}
		rep, err := loadgen.Run(ctx, cfg)
		if err != nil {
			return res, fmt.Errorf("%s: %w", sc, err)
		}
		if scrapeErr != nil {
			return res, scrapeErr
		}
		// What the orders left to do (holds asked to end, abandoned holds expiring) is theirs too.
		time.Sleep(holdTTL + 5*time.Second)
		to, err := scrape(ctx, st.TemporalMetrics)
		if err != nil {
			return res, err
		}
		placed := float64(rep.Orders)
		if placed == 0 {
			return res, fmt.Errorf("%s: no order placed", sc)
		}
		res.scenarios[sc] = to.minus(from).less(idle, time.Since(start).Seconds()).per(placed).cost()
		log.Printf("  %-12s %.1f calls, %.1f visibility writes per order", sc, res.scenarios[sc].calls, res.scenarios[sc].visibility)
	}
	return res, nil
}

// snapshot is the dev server's persistence counters: "service operation" → calls, and the
// visibility store's writes under "visibility operation".
type snapshot map[string]float64

func scrape(ctx context.Context, url string) (snapshot, error) {
	s := snapshot{}
	err := benchkit.ScrapeMetrics(ctx, url, func(name string, l map[string]string, v float64) {
		switch {
		case name == "persistence_requests":
			s[l["service_name"]+" "+l["operation"]] += v
		case name == "visibility_persistence_requests" && isVisibilityWrite(l["operation"]):
			s["visibility "+l["operation"]] += v
		}
	})
	return s, err
}

func isVisibilityWrite(op string) bool {
	return strings.HasPrefix(op, "Record") || strings.HasPrefix(op, "Upsert") || strings.HasPrefix(op, "Delete")
}

func (s snapshot) minus(o snapshot) snapshot {
	d := snapshot{}
	for k, v := range s {
		d[k] = v - o[k]
	}
	return d
}

// less takes off what the idle server does in secs (idle is per second).
func (s snapshot) less(idle snapshot, secs float64) snapshot {
	d := snapshot{}
	for k, v := range s {
		d[k] = v - idle[k]*secs
	}
	return d
}

func (s snapshot) per(n float64) snapshot {
	d := snapshot{}
	for k, v := range s {
		d[k] = v / n
	}
	return d
}

func (s snapshot) cost() cost {
	c := cost{byOp: map[string]float64{}}
	for k, v := range s {
		if strings.HasPrefix(k, "visibility ") {
			c.visibility += v
			continue
		}
		c.calls += v
		c.byOp[k] = v
	}
	return c
}

// campaign weighs the scenarios as the campaign mix does.
func (r result) campaign() cost {
	var c cost
	total := 0.0
	for sc, w := range loadgen.CampaignMix {
		x := r.scenarios[sc]
		c.calls += w * x.calls
		c.visibility += w * x.visibility
		total += w
	}
	c.calls /= total
	c.visibility /= total
	return c
}

func render(results []result, n int, started time.Time) string {
	var b strings.Builder
	b.WriteString(startMarker + "\n## Temporal cost of an order, scenario by scenario\n\n")
	b.WriteString("Written by `make bench-cost` (bench/benchcost); running it again replaces this section.\n\n")
	fmt.Fprintf(&b, "- Command: `make bench-cost`, measured %s UTC on %d CPUs (%s), %s.\n", started.Format("2006-01-02 15:04"),
		runtime.NumCPU(), benchkit.CPUModel(), runtime.Version())
	fmt.Fprintf(&b, "- Each configuration is its own `checkout-dev dev` stack (the Temporal dev server with SQLite). "+
		"%d orders per scenario, two shoppers at a time, through the REST API as `checkout-dev loadgen` places them; "+
		"each scenario's orders are left to finish (3-D Secure answered, abandoned holds of %s expired, holds ended) "+
		"before its counters are read, and the server's idle rate, measured first, is taken off. The floor is %d "+
		"empty workflows started the way the API starts an order (Update-with-Start).\n", n, holdTTL, n)
	b.WriteString("- Figures per order: persistence calls of the dev server's history, matching and frontend services " +
		"(`persistence_requests`), then writes to its visibility store (`visibility_persistence_requests`), all of them " +
		"in the same SQLite file. The campaign row weighs the scenarios as the campaign mix does " +
		"(ok 35, 3ds-approve 25, 3ds-decline 5, abandon 10, decline 8, cancel 7, timeout 10).\n\n")
	b.WriteString("| scenario |")
	for _, r := range results {
		fmt.Fprintf(&b, " %s: calls / visibility writes |", r.cfg.label)
	}
	b.WriteString("\n|---|")
	for range results {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	row := func(name string, get func(result) cost) {
		fmt.Fprintf(&b, "| %s |", name)
		for _, r := range results {
			c := get(r)
			fmt.Fprintf(&b, " %s / %s |", num(c.calls), num(c.visibility))
		}
		b.WriteString("\n")
	}
	row("empty workflow (floor)", func(r result) cost { return r.floor })
	for _, sc := range scenarios {
		row(sc, func(r result) cost { return r.scenarios[sc] })
	}
	row("**campaign mix**", func(r result) cost { return r.campaign() })
	b.WriteString("\n")
	last := results[len(results)-1]
	fmt.Fprintf(&b, "Where the calls of one order go in the last configuration (%s), for the scenarios that wait "+
		"for the shopper (3ds-approve) and that do not (ok): %s; %s.\n", last.cfg.label,
		topOps(last.scenarios[loadgen.Scenario3DSApprove], "3ds-approve"), topOps(last.scenarios[loadgen.ScenarioOK], "ok"))
	b.WriteString(endMarker + "\n")
	return b.String()
}

func topOps(c cost, name string) string {
	type kv struct {
		op string
		v  float64
	}
	var ops []kv
	for k, v := range c.byOp {
		if v >= 0.5 {
			ops = append(ops, kv{k, v})
		}
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].v > ops[j].v })
	parts := make([]string, len(ops))
	for i, o := range ops {
		parts[i] = fmt.Sprintf("%s %s", o.op, num(o.v))
	}
	return name + ": " + strings.Join(parts, ", ")
}

func num(v float64) string {
	if math.Abs(v) < 0.05 {
		v = 0
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}
