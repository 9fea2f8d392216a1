package main

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/marketplace/checkout/bench/internal/plain"
	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/internal/dev/benchkit"
	"github.com/marketplace/checkout/loadgen"
)

const (
	cpuStartMarker = "<!-- cpu-cost:start -->"
	cpuEndMarker   = "<!-- cpu-cost:end -->"
	// idleWindow is how long the idle stack is read before the runs, to take its rate off.
	idleWindow = 20 * time.Second
	// warmOrders is how many of each (empty workflows, visits, orders of each kind) warm a fresh
	// stack up before its runs.
	warmOrders = 20
	// floorWorkerFlag makes this program the floor's worker, in a process of its own.
	floorWorkerFlag = "floor-worker"
	// plainServerFlag makes this program the plain checkout's server, in a process of its own;
	// plainSecretEnv gives it the JWT secret of the stack's shoppers.
	plainServerFlag = "plain-server"
	plainSecretEnv  = "BENCHCOST_PLAIN_SECRET"
)

// kind is one batch of the CPU pass: shoppers with a mix of scenarios; browse stops each shopper
// after the preview, so that the batch is the visit without its order.
type kind struct {
	name   string
	mix    loadgen.Mix
	browse bool
}

// visit is the shopper's visit without the order (an address, the cart's lines, the cart read, the
// preview): what each kind's orders do before POST /orders, measured on its own in every run.
var visit = kind{name: "the visit alone (address, cart, preview; no order)", mix: loadgen.Mix{loadgen.ScenarioOK: 1},
	browse: true}

// plainOrder is the visit, then its order placed by the plain checkout (bench/internal/plain): one
// PostgreSQL transaction that writes the order, reserves its stock and records its event, with no
// workflow and no payment step; then the order's page through the API. With the floor, it is what
// any order of the product costs at the least.
var plainOrder = kind{name: "plain checkout (the visit, then one transaction; no workflow)",
	mix: loadgen.Mix{loadgen.ScenarioOK: 1}}

// The processes of the CPU pass besides the stack's own: the floor's worker and the plain
// checkout, neither of which takes part in an order of the product.
const (
	floorWorkerPart = "floor worker"
	plainPart       = "plain checkout"
)

// kinds are what the CPU pass measures beside the floor, in the order each run takes them.
var kinds = []kind{
	{name: "paid-at-once", mix: loadgen.Mix{loadgen.ScenarioOK: 1}},
	{name: "3-D Secure", mix: loadgen.Mix{loadgen.Scenario3DSApprove: 1}},
	{name: "campaign mix", mix: loadgen.CampaignMix},
}

// cpuCost is what one order (or one empty workflow) took of the stack's server processes in one
// run: milliseconds of CPU per order, by process, and the median answer of its first request.
type cpuCost struct {
	byPart map[string]float64
	p50Ms  float64
	orders int
}

// less is c with o's CPU per order taken off, process by process.
func (c cpuCost) less(o cpuCost) cpuCost {
	out := cpuCost{byPart: map[string]float64{}, orders: c.orders}
	for name, v := range c.byPart {
		out.byPart[name] = v - o.byPart[name]
	}
	return out
}

// plus is c with o's CPU per order added, process by process.
func (c cpuCost) plus(o cpuCost) cpuCost {
	out := cpuCost{byPart: maps.Clone(c.byPart), orders: c.orders}
	if out.byPart == nil {
		out.byPart = map[string]float64{}
	}
	for name, v := range o.byPart {
		out.byPart[name] += v
	}
	return out
}

func (c cpuCost) ms() float64 {
	var sum float64
	for _, v := range c.byPart {
		sum += v
	}
	return sum
}

// cpuRun is one run: the floor, the visit, then each kind, on the same stack; then, on this build's
// stack, the plain checkout.
type cpuRun struct {
	floor cpuCost
	visit cpuCost
	kinds map[string]cpuCost
	plain cpuCost
	// other is the share of the machine's CPU that went to processes outside the stack and this
	// tool during the run: above a tenth, the run was disturbed.
	other float64
}

type cpuResult struct {
	label    string
	env      []string
	runs     []cpuRun
	parts    []string
	idle     map[string]float64 // percent of one CPU, by process
	n        int
	started  time.Time
	loadAvg  float64
	shoppers int
	// withPlain: the runs measured the plain checkout too.
	withPlain bool
}

// runFloorWorker is this program started with -floor-worker: the floor's worker alone, so that its
// CPU is read as the order's worker's is, apart from the client that starts the workflows.
func runFloorWorker(ctx context.Context, temporal, dir string) {
	if err := benchkit.RunFloorWorker(ctx, temporal, dir, func() { fmt.Println("ready") }); err != nil {
		log.Fatal(err)
	}
}

// startFloorWorker starts the floor's worker process on the stack and waits until it polls.
func startFloorWorker(ctx context.Context, st *benchkit.Stack) (*exec.Cmd, error) {
	cmd, _, err := startChild(ctx, "the floor's worker", nil, "-"+floorWorkerFlag, st.Temporal, "-floor-dir", st.Dir)
	return cmd, err
}

// runPlainServer is this program started with -plain-server: the plain checkout alone, on the
// stack's database, its CPU read as the API's is. Its address goes after "ready" on the first line.
func runPlainServer(ctx context.Context, dbURL string) {
	p, err := plain.Start(ctx, dbURL, 4, []byte(os.Getenv(plainSecretEnv)), holdTTL)
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	fmt.Println("ready " + p.URL)
	<-ctx.Done()
}

// startPlainServer starts the plain checkout's process on the stack: the process and its URL.
func startPlainServer(ctx context.Context, st *benchkit.Stack) (*exec.Cmd, string, error) {
	return startChild(ctx, "the plain checkout", []string{plainSecretEnv + "=" + st.Secret}, "-"+plainServerFlag,
		st.DatabaseURL)
}

// startChild starts this program with args (and env on top of its own) and waits for its first
// line, "ready" and what follows it, which it returns.
func startChild(ctx context.Context, what string, env []string, args ...string) (*exec.Cmd, string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	rest, ok := strings.CutPrefix(strings.TrimSpace(line), "ready")
	if err != nil || !ok {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, "", fmt.Errorf("%s did not start (%q): %v", what, line, err)
	}
	return cmd, strings.TrimSpace(rest), nil
}

// measureCPU is one run of the CPU pass on stack st: a run of warmOrders unmeasured, the idle
// stack's rate, then n empty workflows, n orders of each kind, and with withPlain n orders of the
// plain checkout, one shopper at a time so that nothing queues.
func measureCPU(ctx context.Context, st *benchkit.Stack, n int, withPlain bool) (cpuResult, error) {
	res := cpuResult{n: n, started: time.Now().UTC(), loadAvg: benchkit.LoadAverage(), shoppers: 1, withPlain: withPlain}
	parts, err := benchkit.DevParts(st.Cmd.Process.Pid, st.Dir)
	if err != nil {
		return res, err
	}
	fw, err := startFloorWorker(ctx, st)
	if err != nil {
		return res, err
	}
	defer func() { _ = fw.Process.Kill(); _ = fw.Wait() }()
	parts = append(parts, benchkit.Part{Name: floorWorkerPart, PID: fw.Process.Pid})
	var plainURL string
	var pool *pgxpool.Pool
	if withPlain {
		pc, url, err := startPlainServer(ctx, st)
		if err != nil {
			return res, err
		}
		defer func() { _ = pc.Process.Kill(); _ = pc.Wait() }()
		parts, plainURL = append(parts, benchkit.Part{Name: plainPart, PID: pc.Process.Pid}), url
		if pool, err = db.Connect(ctx, st.DatabaseURL, 4); err != nil {
			return res, err
		}
		defer pool.Close()
	}
	for _, p := range parts {
		res.parts = append(res.parts, p.Name)
	}
	floor, err := benchkit.StartFloorClient(st)
	if err != nil {
		return res, err
	}
	defer floor.Close()

	p := cpuPass{st: st, parts: parts, floor: floor, shoppers: res.shoppers, plainURL: plainURL, pool: pool}
	// Runs on cold fresh stacks read higher and wider apart than runs on stacks that have worked
	// (docs/benchmarks.md, CPU per order): one unmeasured run of warmOrders of each first, then
	// the stack settles before its idle rate is read.
	if _, err := p.run(ctx, -1, warmOrders, nil); err != nil {
		return res, fmt.Errorf("warming up: %w", err)
	}
	time.Sleep(5 * time.Second) // what the warm-up left to do settles
	a, err := benchkit.Read(parts)
	if err != nil {
		return res, err
	}
	time.Sleep(idleWindow)
	b, err := benchkit.Read(parts)
	if err != nil {
		return res, err
	}
	idle := benchkit.Rates(a, b)
	res.idle = idle // jiffies a second = percent of one CPU
	log.Printf("idle stack: %s", percents(res.idle, res.parts))

	run, err := p.run(ctx, 0, n, idle)
	if err != nil {
		return res, err
	}
	log.Printf("cpu run: floor %.2f ms; %s; other processes %.0f%% of the machine", run.floor.ms(),
		ratiosLine(run), 100*run.other)
	res.runs = []cpuRun{run}
	return res, nil
}

// cpuPass is what a stack's runs (the warm-up's and the measured one) share: the stack, its parts,
// the floor's client, and for the plain checkout, when the pass runs it, its address and a pool on
// its database.
type cpuPass struct {
	st       *benchkit.Stack
	parts    []benchkit.Part
	floor    *benchkit.Floor
	shoppers int
	plainURL string
	pool     *pgxpool.Pool
}

// run is one run on the stack: n empty workflows, the visit, n orders of each kind and, with a
// plain checkout, n of its orders, each batch read with idle's rate taken off, and the share of
// the machine other processes took meanwhile.
func (p cpuPass) run(ctx context.Context, r, n int, idle map[string]float64) (cpuRun, error) {
	run := cpuRun{kinds: map[string]cpuCost{}}
	first, err := benchkit.Read(p.parts)
	if err != nil {
		return run, err
	}
	// The floor: n empty workflows, one at a time, as the API starts an order.
	lat := make([]time.Duration, 0, n)
	for i := range n {
		t := time.Now()
		if err := p.floor.Run(ctx, fmt.Sprintf("cpu-floor-%d-%d-%d", time.Now().UnixNano(), r, i)); err != nil {
			return run, err
		}
		lat = append(lat, time.Since(t))
	}
	time.Sleep(2 * time.Second)
	end, err := benchkit.Read(p.parts)
	if err != nil {
		return run, err
	}
	slices.Sort(lat)
	run.floor = cpuCost{byPart: benchkit.PerOrder(first, end, idle, n), p50Ms: benchkit.QuantileMs(lat, 0.5), orders: n}

	if run.visit, err = batch(ctx, p.st, p.parts, idle, p.shoppers, n, visit, ""); err != nil {
		return run, err
	}
	for _, k := range kinds {
		if run.kinds[k.name], err = batch(ctx, p.st, p.parts, idle, p.shoppers, n, k, ""); err != nil {
			return run, err
		}
	}
	if p.plainURL != "" {
		if run.plain, err = batch(ctx, p.st, p.parts, idle, p.shoppers, n, plainOrder, p.plainURL); err != nil {
			return run, err
		}
		// Its orders never pay and nothing of the product would end them: cancelled, their
		// stock given back, outside any batch's window.
		if _, err := plain.Settle(ctx, p.pool); err != nil {
			return run, fmt.Errorf("settling the plain orders: %w", err)
		}
	}
	last, err := benchkit.Read(p.parts)
	if err != nil {
		return run, err
	}
	run.other = benchkit.OtherShare(first, last)
	return run, nil
}

// batch runs n shoppers' orders (or visits) of kind k, shoppers at a time, and reads what they
// took of the parts, the idle rate taken off; orderURL, when set, is the plain checkout's, where
// the orders go instead of the API.
func batch(ctx context.Context, st *benchkit.Stack, parts []benchkit.Part, idle map[string]float64, shoppers, n int,
	k kind, orderURL string) (cpuCost, error) {
	cfg := loadgen.Defaults()
	cfg.BaseURL, cfg.MetricsURL, cfg.JWTSecret = st.Base, st.Metrics, st.Secret
	cfg.Shoppers, cfg.Orders, cfg.Duration = shoppers, n, 10*time.Minute
	cfg.Mix, cfg.BrowseOnly = k.mix, k.browse
	cfg.RepeatShare, cfg.HotShare = 0, 0
	cfg.HoldTTL, cfg.WaitAbandoned, cfg.Settle = holdTTL, true, time.Minute
	if orderURL != "" {
		// The plain orders stay PENDING_PAYMENT: the order's page is read once, not waited on.
		cfg.OrderURL, cfg.Settle = orderURL, time.Millisecond
	}
	var from benchkit.Reading
	var readErr error
	cfg.OnPhase = func(p string) {
		if p == loadgen.PhaseLoad {
			from, readErr = benchkit.Read(parts)
		}
	}
	rep, err := loadgen.Run(ctx, cfg)
	if err != nil {
		return cpuCost{}, fmt.Errorf("%s: %w", k.name, err)
	}
	if readErr != nil {
		return cpuCost{}, readErr
	}
	// What the orders leave to do after their last answer (holds ended, abandoned holds expiring,
	// events relayed) is theirs too.
	wait := 3 * time.Second
	if k.mix[loadgen.ScenarioAbandon] > 0 && !k.browse {
		wait = holdTTL + 5*time.Second
	}
	time.Sleep(wait)
	to, err := benchkit.Read(parts)
	if err != nil {
		return cpuCost{}, err
	}
	done := rep.Orders
	if k.browse {
		done = rep.Browsed
	}
	if done == 0 {
		return cpuCost{}, fmt.Errorf("%s: no order placed", k.name)
	}
	c := cpuCost{byPart: benchkit.PerOrder(from, to, idle, int(done)), orders: int(done)}
	for _, e := range rep.Endpoints {
		if e.Endpoint == loadgen.EndpointOrder {
			c.p50Ms = e.P50Ms
		}
	}
	return c, nil
}

func ratiosLine(run cpuRun) string {
	parts := make([]string, 0, len(kinds))
	for _, k := range kinds {
		c := run.kinds[k.name]
		parts = append(parts, fmt.Sprintf("%s %.2f ms (%.2f×)", k.name, c.ms(), c.ms()/run.floor.ms()))
	}
	return strings.Join(parts, ", ")
}

func percents(m map[string]float64, order []string) string {
	parts := make([]string, 0, len(order))
	for _, name := range order {
		parts = append(parts, fmt.Sprintf("%s %.1f%%", name, m[name]))
	}
	return strings.Join(parts, ", ")
}

// perRun sums up f over the runs, each run's own figure.
func (r cpuResult) perRun(f func(cpuRun) float64) benchkit.Spread {
	xs := make([]float64, 0, len(r.runs))
	for _, run := range r.runs {
		xs = append(xs, f(run))
	}
	return benchkit.SpreadOf(xs)
}

// ratios are each kind's CPU per order over the floor's CPU per workflow, run by run.
func (r cpuResult) ratios(kind string) benchkit.Spread {
	return r.perRun(func(run cpuRun) float64 { return run.kinds[kind].ms() / run.floor.ms() })
}

// ratiosOverFloorAndPlain are each kind's CPU per order over the floor's and the plain checkout's
// together, run by run.
func (r cpuResult) ratiosOverFloorAndPlain(kind string) benchkit.Spread {
	return r.perRun(func(run cpuRun) float64 { return run.kinds[kind].ms() / run.floor.plus(run.plain).ms() })
}

// plainRatio is the plain checkout's CPU over the floor's, run by run.
func (r cpuResult) plainRatio() benchkit.Spread {
	return r.perRun(func(run cpuRun) float64 { return run.plain.ms() / run.floor.ms() })
}

// visitRatio is the visit's CPU over the floor's, run by run.
func (r cpuResult) visitRatio() benchkit.Spread {
	return r.perRun(func(run cpuRun) float64 { return run.visit.ms() / run.floor.ms() })
}

// ratiosLessVisit are each kind's CPU per order less the visit's, over the floor's, run by run:
// the order set apart from what the shopper did before it.
func (r cpuResult) ratiosLessVisit(kind string) benchkit.Spread {
	return r.perRun(func(run cpuRun) float64 { return (run.kinds[kind].ms() - run.visit.ms()) / run.floor.ms() })
}

// costs are get's CPU ms per order, of the process part or (empty) of them all, run by run.
func (r cpuResult) costs(get func(cpuRun) cpuCost, part string) benchkit.Spread {
	return r.perRun(func(run cpuRun) float64 {
		if part == "" {
			return get(run).ms()
		}
		return get(run).byPart[part]
	})
}

func (r cpuResult) p50(get func(cpuRun) cpuCost) benchkit.Spread {
	return r.perRun(func(run cpuRun) float64 { return get(run).p50Ms })
}

// scriptLine is the last line the program prints, for scripts: the medians of the ratios.
func (r cpuResult) scriptLine() string {
	return fmt.Sprintf("cpu ratio: paid-at-once %.2f campaign %.2f", r.ratios("paid-at-once").Median,
		r.ratios("campaign mix").Median)
}

// compareFlag is -cpu-compare: stacks of this build with other settings.
type compareFlag []config

func (f *compareFlag) String() string { return fmt.Sprint(len(*f)) }

func (f *compareFlag) Set(v string) error {
	label, env, ok := strings.Cut(v, ":")
	if !ok || label == "" || !strings.Contains(env, "=") {
		return fmt.Errorf("%q: label:KEY=VALUE[,KEY=VALUE]", v)
	}
	*f = append(*f, config{label: label, binary: thisBuild, env: strings.Split(env, ",")})
	return nil
}

func renderCPU(r cpuResult, others []cpuResult) string {
	label := r.label
	var b strings.Builder
	b.WriteString(cpuStartMarker + "\n## CPU per order\n\n")
	b.WriteString("Written by `make bench-cost` (bench/benchcost); running it again replaces this section.\n\n")
	fmt.Fprintf(&b, "- Command: `make bench-cost`, measured %s UTC on %d CPUs (%s), load average %.1f before; "+
		"each run on a fresh stack of %s (`checkout-dev dev`: the Temporal dev server on SQLite, PostgreSQL, NATS).\n",
		r.started.Format("2006-01-02 15:04"), benchkit.OnlineCPUs(), benchkit.CPUModel(), r.loadAvg, label)
	fmt.Fprintf(&b, "- What is counted: the CPU time of every server process of the stack (%s), read from /proc "+
		"before and after each batch, less what the idle stack takes in the same time (measured on each stack before its run; on "+
		"the first: %s of one CPU). The load generator, in the tool's own process, is not counted; neither is the floor's client. "+
		"Each stack first runs %d of each unmeasured, to warm it up. "+
		"%d orders (or empty workflows) per batch, %d shopper at a time, so that nothing queues; each batch's "+
		"window runs until its last order has nothing left to do (abandoned holds of %s expired).\n",
		strings.Join(r.parts, ", "), percents(r.idle, r.parts), warmOrders, r.n, r.shoppers, holdTTL)
	b.WriteString("- The floor is an empty workflow started as the API starts an order (Update-with-Start, waiting " +
		"for the update's answer), its worker a process of its own; an order's figure covers the API, the saga's " +
		"worker, the outbox relay and the event consumers as well. Ratios are each run's own (order ÷ floor in " +
		"the same run); figures are the median of the runs with the lowest and highest in brackets.\n\n")
	fmt.Fprintf(&b, "| measured | CPU ms per order | ÷ floor | POST /orders p50 ms (floor: update answered) |\n|---|---:|---:|---:|\n")
	floor := func(run cpuRun) cpuCost { return run.floor }
	fmt.Fprintf(&b, "| empty workflow (floor) | %s | 1 | %s |\n", r.costs(floor, ""), r.p50(floor))
	for _, k := range kinds {
		get := func(run cpuRun) cpuCost { return run.kinds[k.name] }
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", k.name, r.costs(get, ""), r.ratios(k.name), r.p50(get))
	}
	visitOf := func(run cpuRun) cpuCost { return run.visit }
	fmt.Fprintf(&b, "| %s | %s | %s | – |\n", visit.name, r.costs(visitOf, ""), r.visitRatio())
	plainOf := func(run cpuRun) cpuCost { return run.plain }
	if r.withPlain {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", plainOrder.name, r.costs(plainOf, ""), r.plainRatio(), r.p50(plainOf))
	}
	b.WriteString("\nAn order's figure above is the shopper's whole visit, as `checkout-dev loadgen` makes it: an address, " +
		"the cart's lines, the cart read and the preview, then POST /orders and the order's page (and for 3-D " +
		"Secure the provider's page). The floor is the workflow call alone. The last row is the visit without " +
		"its order, measured in each run as its own batch; each run's kind less that run's visit sets the order " +
		"apart from it:\n\n| measured | CPU ms per order, less the visit | ÷ floor |\n|---|---:|---:|\n")
	for _, k := range kinds {
		less := func(run cpuRun) cpuCost { return run.kinds[k.name].less(run.visit) }
		fmt.Fprintf(&b, "| %s, the order alone | %s | %s |\n", k.name, r.costs(less, ""), r.ratiosLessVisit(k.name))
	}
	if r.withPlain {
		b.WriteString("\nThe floor leaves out what any order of the product does besides its workflow: the shopper's " +
			"requests, and one PostgreSQL transaction that writes the order, reserves its stock and records its " +
			"event. The plain checkout's row above is exactly that (bench/internal/plain, in a process of its own, " +
			"the last column by process below): the same visit, then POST /orders to it, one transaction with no " +
			"workflow and no payment step, then the order's page through the API. Each kind over the floor and " +
			"the plain checkout together, each run's own:\n\n| measured | CPU ms per order | ÷ (floor + plain " +
			"checkout) |\n|---|---:|---:|\n")
		both := func(run cpuRun) cpuCost { return run.floor.plus(run.plain) }
		fmt.Fprintf(&b, "| empty workflow + plain checkout | %s | 1 |\n", r.costs(both, ""))
		for _, k := range kinds {
			get := func(run cpuRun) cpuCost { return run.kinds[k.name] }
			fmt.Fprintf(&b, "| %s | %s | %s |\n", k.name, r.costs(get, ""), r.ratiosOverFloorAndPlain(k.name))
		}
	}
	b.WriteString("\nWhere it goes, by process (CPU ms per order, median of the runs):\n\n| measured |")
	for _, p := range r.parts {
		fmt.Fprintf(&b, " %s |", p)
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", len(r.parts)) + "\n")
	row := func(name string, get func(cpuRun) cpuCost) {
		fmt.Fprintf(&b, "| %s |", name)
		for _, p := range r.parts {
			fmt.Fprintf(&b, " %.2f |", r.costs(get, p).Median)
		}
		b.WriteString("\n")
	}
	row("empty workflow (floor)", floor)
	for _, k := range kinds {
		row(k.name, func(run cpuRun) cpuCost { return run.kinds[k.name] })
	}
	row(visit.name, visitOf)
	if r.withPlain {
		row(plainOrder.name, plainOf)
	}
	b.WriteString("\nRuns:")
	for i, run := range r.runs {
		mark := ""
		if run.other > 0.1 {
			mark = " — **disturbed**: other processes took more than a tenth of the machine"
		}
		plain := ""
		if r.withPlain {
			plain = fmt.Sprintf(", plain checkout %.2f ms", run.plain.ms())
		}
		fmt.Fprintf(&b, " %d. floor %.2f ms, %s, the visit alone %.2f ms%s; other processes %.0f%% of the machine%s.",
			i+1, run.floor.ms(), ratiosLine(run), run.visit.ms(), plain, 100*run.other, mark)
	}
	if len(others) > 0 {
		b.WriteString("\n\nThe same pass on other stacks in the same run: another build's (`-baseline`) and this build's " +
			"with other settings (`-cpu-compare`), measured in turns with this one, each run on a fresh stack of each, " +
			"the turn's order reversed every other run; medians of their runs, " +
			"ratios over each stack's own floor:\n\n| stack | settings | floor ms |")
		for _, k := range kinds {
			fmt.Fprintf(&b, " %s ms (÷ floor) |", k.name)
		}
		b.WriteString("\n|---|---|---:|" + strings.Repeat("---:|", len(kinds)) + "\n")
		for _, o := range append([]cpuResult{r}, others...) {
			settings := "defaults"
			if len(o.env) > 0 {
				settings = "`" + strings.Join(o.env, " ") + "`"
			}
			fmt.Fprintf(&b, "| %s | %s | %.2f |", o.label, settings, o.costs(func(run cpuRun) cpuCost { return run.floor }, "").Median)
			for _, k := range kinds {
				fmt.Fprintf(&b, " %.2f (%.2f×) |", o.costs(func(run cpuRun) cpuCost { return run.kinds[k.name] }, "").Median,
					o.ratios(k.name).Median)
			}
			b.WriteString("\n")
		}
		// A change made in one process (a statement of PostgreSQL's, a call of the checkout's) shows in
		// its column, where the whole order's figure varies more from run to run than it moves.
		orderParts := slices.DeleteFunc(slices.Clone(r.parts), func(p string) bool {
			return p == floorWorkerPart || p == plainPart
		})
		b.WriteString("\nPaid-at-once by process on each stack, CPU ms per order (medians of its runs):\n\n| stack |")
		for _, p := range orderParts {
			fmt.Fprintf(&b, " %s |", p)
		}
		b.WriteString("\n|---|" + strings.Repeat("---:|", len(orderParts)) + "\n")
		for _, o := range append([]cpuResult{r}, others...) {
			fmt.Fprintf(&b, "| %s |", o.label)
			for _, p := range orderParts {
				fmt.Fprintf(&b, " %.2f |", o.costs(func(run cpuRun) cpuCost { return run.kinds["paid-at-once"] }, p).Median)
			}
			b.WriteString("\n")
		}
		for _, o := range others {
			for i, run := range o.runs {
				if run.other > 0.1 {
					fmt.Fprintf(&b, "\n%s, run %d: **disturbed** (other processes %.0f%% of the machine).", o.label, i+1,
						100*run.other)
				}
			}
		}
	}
	fmt.Fprintf(&b, "\n\nFor scripts, the last line `make bench-cost` prints: `%s`.\n", r.scriptLine())
	b.WriteString(cpuEndMarker + "\n")
	return b.String()
}
