// Command benchcampaign is `make bench-campaign`: the whole checkout under campaign traffic
// (internal `checkout-dev loadgen` shoppers against `checkout-dev dev`, as `make run` starts it) at
// 10, 50 and 200 shoppers, beside two baselines measured on the same stack in the same run:
//
//   - the Temporal dev server's floor: empty workflows started the way the API starts an order
//     (Update-with-Start, waiting for the update's answer), at the same concurrency;
//   - a plain checkout endpoint without Temporal (bench/internal/plain), one PostgreSQL
//     transaction per order, driven by the same shoppers as the saga with the same payment-free
//     mix: the cost of durability as a ratio.
//
// With -promotions it measures what coupons and campaigns cost instead (promotions.go).
//
// During each run it reads where the CPU went (checkout dev, the Temporal dev server, PostgreSQL,
// this tool), what PostgreSQL's backends waited on, and what the dev server's SQLite persistence
// did. It ends with the invariant audit, writes its section of docs/benchmarks.md and plots
// throughput and p99 against shoppers into docs/bench-campaign.png.
//
// With -stack cluster it measures `checkout-dev cluster` instead (as `make cluster` starts it:
// HAProxy, API replicas and workers, the Temporal server as four processes on PostgreSQL): the
// floor against the cluster's frontend and the saga's runs, at 50 and 200 shoppers, then, once the
// cluster has stopped, the dev stack's floor and campaign at the same counts, into a section of its
// own (cluster.go).
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/marketplace/checkout/audit"
	"github.com/marketplace/checkout/bench/internal/figures"
	"github.com/marketplace/checkout/bench/internal/plain"
	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/internal/dev/benchkit"
	"github.com/marketplace/checkout/internal/dev/cluster"
	"github.com/marketplace/checkout/loadgen"
	"github.com/marketplace/checkout/payment/paysim"
)

const (
	startMarker = "<!-- campaign-bench:start -->"
	endMarker   = "<!-- campaign-bench:end -->"
)

// The runs of one shopper count.
const (
	runFloor    = "floor"    // empty workflows, Update-with-Start
	runCampaign = "campaign" // the saga, campaign payment mix
	runSagaOK   = "saga-ok"  // the saga, every order tok_ok
	runPlainOK  = "plain-ok" // the plain endpoint, the same shoppers and mix
	// runPromo is the saga with the campaign mix as runCampaign, half of the orders with a coupon
	// and a campaign price on the hot SKUs: what coupons and campaigns cost beside it.
	runPromo = "campaign-promo"
)

// The promotions of runPromo.
const (
	promoCouponShare = 0.5
	promoCampaignHot = loadgen.DefaultCampaignHot
)

// withPromotions puts runPromo's coupon and campaign on a load run.
func withPromotions(c *loadgen.Config) {
	c.CouponShare, c.CampaignHot = promoCouponShare, promoCampaignHot
}

// okMix sends every order with tok_ok: the mix the saga and the plain endpoint are compared on
// (the plain endpoint has no payment step).
var okMix = loadgen.Mix{loadgen.ScenarioOK: 1}

func main() {
	shoppers := flag.String("shoppers", "10,50,200", "shopper counts (concurrent clients), comma-separated")
	window := flag.Duration("window", 20*time.Second, "load phase of each run")
	out := flag.String("out", "docs/benchmarks.md", "the document to write the section into")
	plot := flag.String("plot", "docs/bench-campaign.png", "the plot of throughput and p99 against shoppers")
	from := flag.String("from", "", "write the section and the plot from the JSON of an earlier run, without measuring")
	jsonOut := flag.String("json", "docs/bench-campaign.json", "every figure as JSON, for scripts (empty: none)")
	admission := flag.Bool("admission", false, "measure the admission control section instead: one shopper count past the knee "+
		"(-shoppers, default 200) for -window (default 30s), on a stack with admission control off and on one with it on; "+
		"-json defaults to docs/bench-admission.json")
	promotions := flag.Bool("promotions", false, "measure the coupons and campaigns section instead: the campaign mix "+
		"with and without a coupon and a hot-SKU campaign, in turns on one stack, at one shopper count (-shoppers, default 30, below the knee of the campaign section); "+
		"-json defaults to docs/bench-promotions.json")
	lockWaits := flag.Bool("lockwaits", false, "measure the plain checkout's lock waits with the cart notices in PostgreSQL "+
		"and on the broker instead: three rounds of each at every shopper count (default 50,200)")
	stack := flag.String("stack", stackDev, "the stack measured: dev (bin/checkout-dev dev, as make run starts it) or cluster "+
		"(bin/checkout-dev cluster, as make cluster starts it: the floor and the saga's runs, at 50 and 200 shoppers unless -shoppers says "+
		"otherwise, into a section of its own and docs/bench-cluster.json, no plot)")
	var dynamicConfig []string
	flag.Func("dynamic-config", "with -stack cluster: a Temporal dynamic config value, key=value, over the product's "+
		"(repeatable), to measure a setting beside the product's own", func(v string) error {
		dynamicConfig = append(dynamicConfig, v)
		return nil
	})
	clusterOnly := flag.Bool("cluster-only", false, "with -stack cluster: leave out the dev stack's runs beside the cluster's")
	flag.BoolVar(&keepStacks, "keep", false, "leave each stack's folder (its processes' logs and databases) in place when it stops, "+
		"to read a run afterwards; the tool names each folder")
	flag.Parse()
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *admission {
		if !set["shoppers"] {
			*shoppers = "200"
		}
		if !set["window"] {
			*window = 30 * time.Second
		}
		if !set["json"] {
			*jsonOut = "docs/bench-admission.json"
		}
	}
	if *lockWaits {
		if !set["shoppers"] {
			*shoppers = "50,200"
		}
		if !set["json"] {
			*jsonOut = "docs/bench-lockwaits.json"
		}
	}
	if *promotions {
		if !set["shoppers"] {
			*shoppers = "30"
		}
		if !set["json"] {
			*jsonOut = "docs/bench-promotions.json"
		}
	}
	if (len(dynamicConfig) > 0 || *clusterOnly) && (*stack != stackCluster || *admission) {
		log.Fatalf("-dynamic-config and -cluster-only are for the campaign runs of -stack cluster")
	}
	switch *stack {
	case stackDev:
	case stackCluster:
		if !set["shoppers"] && !*admission {
			*shoppers = "50,200"
		}
		if !set["json"] {
			*jsonOut = "docs/bench-cluster.json"
			if *admission {
				*jsonOut = "docs/bench-admission-cluster.json"
			}
		}
	default:
		log.Fatalf("--stack %q: dev or cluster", *stack)
	}
	log.SetFlags(0)
	log.SetPrefix("benchcampaign: ")
	var counts []int
	for _, f := range strings.Split(*shoppers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > loadgen.MaxShoppers {
			log.Fatalf("--shoppers: %q is not a count between 1 and %d", f, loadgen.MaxShoppers)
		}
		counts = append(counts, n)
	}
	if *window < 5*time.Second || *window > 10*time.Minute {
		log.Fatal("--window: between 5s and 10m")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *admission {
		if len(counts) != 1 {
			log.Fatal("-admission: one shopper count")
		}
		if err := mainAdmission(ctx, *stack, counts[0], *window, *from, *jsonOut, *out); err != nil {
			log.Fatal(err)
		}
		return
	}
	if *lockWaits {
		if err := mainLockWaits(ctx, counts, *window, *from, *jsonOut, *out); err != nil {
			log.Fatal(err)
		}
		return
	}
	if *promotions {
		if len(counts) != 1 {
			log.Fatal("-promotions: one shopper count")
		}
		if err := mainPromotions(ctx, counts[0], *window, *from, *jsonOut, *out); err != nil {
			log.Fatal(err)
		}
		return
	}
	var res figures.Results
	var err error
	if *from != "" {
		// Only the writing: the figures of an earlier run.
		raw, err := os.ReadFile(*from)
		if err == nil {
			err = json.Unmarshal(raw, &res)
		}
		if err != nil {
			log.Fatalf("--from: %v", err)
		}
		*window = time.Duration(res.WindowSeconds * float64(time.Second))
	} else if res, err = run(ctx, counts, *window, *stack, dynamicConfig, *clusterOnly); err != nil {
		log.Fatal(err)
	}
	if *jsonOut != "" && *from == "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(*jsonOut, b, 0o644); err != nil {
			log.Fatal(err)
		}
	}
	var section string
	if res.Stack == stackCluster {
		section = renderCluster(res, *window)
		err = benchkit.WriteSection(*out, clusterStartMarker, clusterEndMarker, section)
	} else {
		if err := drawPlot(*plot, res); err != nil {
			log.Fatal(err)
		}
		section = render(res, *window, *plot, *out)
		err = benchkit.WriteSection(*out, startMarker, endMarker, section)
	}
	fmt.Print(section)
	if err != nil {
		log.Fatal(err)
	}
	if !res.Audit.OK() {
		log.Fatalf("the audit found %d violations (listed in the section)", len(res.Audit.Violations))
	}
	if res.Dev != nil && !res.Dev.Audit.OK() {
		log.Fatalf("the audit of the dev stack found %d violations (listed in the section)", len(res.Dev.Audit.Violations))
	}
}

// The stacks measured (-stack).
const (
	stackDev     = "dev"
	stackCluster = "cluster"
)

// clusterReplicas is how many API replicas and how many workers the cluster runs.
const clusterReplicas = 2

// bench is what the runs share.
type bench struct {
	stack         *benchkit.Stack
	procs         procs
	pg            *pgSampler
	metrics       []string // the Temporal server's /metrics (the cluster: one per service)
	checkout      []string // the checkout's /metrics (the cluster: its API replicas' and workers')
	floor         *benchkit.Floor
	plainCheckout *plain.Server
}

// keepStacks leaves the stacks' folders in place when they stop (-keep).
var keepStacks bool

// run measures counts on stack; a cluster is given the dynamic config values (key=value), and
// with clusterOnly the dev stacks beside it are left out.
func run(ctx context.Context, counts []int, window time.Duration, stack string, dynamicConfig []string, clusterOnly bool) (figures.Results, error) {
	res := figures.Results{Stack: stack, StartedAt: time.Now().UTC(), WindowSeconds: window.Seconds(), CPUs: benchkit.OnlineCPUs(),
		CPUModel: benchkit.CPUModel(), LoadBefore: benchkit.LoadAverage()}
	if stack == stackCluster {
		for _, v := range dynamicConfig {
			res.Flags = append(res.Flags, "--dynamic-config", v)
		}
		var err error
		if res.ShardIOConcurrency, err = cluster.ShardIOConcurrency(dynamicConfig); err != nil {
			return res, err
		}
		if err := measure(ctx, &res, counts, window, []string{runFloor, runCampaign, runSagaOK}); err != nil {
			return res, err
		}
		if clusterOnly {
			res.LoadAfter = benchkit.LoadAverage()
			return res, nil
		}
		// The dev stack's floor and campaign at the same counts, in this invocation, once the
		// cluster has stopped: the figures the cluster's are set beside.
		dev := figures.Results{Stack: stackDev, StartedAt: time.Now().UTC(), WindowSeconds: res.WindowSeconds, CPUs: res.CPUs,
			CPUModel: res.CPUModel, LoadBefore: benchkit.LoadAverage()}
		if err := measure(ctx, &dev, counts, window, []string{runFloor, runCampaign}); err != nil {
			return res, fmt.Errorf("the dev stack: %w", err)
		}
		dev.LoadAfter = benchkit.LoadAverage()
		res.Dev = &dev
		// And again with the dev server's SQLite fsyncing each commit: the cluster's PostgreSQL
		// does, the dev server's default does not, and the comparison should say what that costs.
		full := figures.Results{Stack: stackDev, StartedAt: time.Now().UTC(), WindowSeconds: res.WindowSeconds, CPUs: res.CPUs,
			CPUModel: res.CPUModel, LoadBefore: benchkit.LoadAverage(), Env: []string{"TEMPORAL_DEV_SQLITE_SYNC=full"}}
		if err := measure(ctx, &full, counts, window, []string{runFloor, runCampaign}); err != nil {
			return res, fmt.Errorf("the dev stack at full sync: %w", err)
		}
		full.LoadAfter = benchkit.LoadAverage()
		res.DevFullSync = &full
	} else if err := measure(ctx, &res, counts, window, []string{runFloor, runCampaign, runSagaOK, runPlainOK}); err != nil {
		return res, err
	}
	res.LoadAfter = benchkit.LoadAverage()
	return res, nil
}

// measure starts res.Stack, runs each of whats at each count, the runs of a count taking turns
// going first from one count to the next, then audits what they left, and stops the stack.
func measure(ctx context.Context, res *figures.Results, counts []int, window time.Duration, whats []string) error {
	onCluster := res.Stack == stackCluster
	var s *benchkit.Stack
	var err error
	if onCluster {
		log.Printf("starting the cluster: the Temporal server as four processes, two workers, two API replicas behind HAProxy")
		// Admission control off, as on the dev stack: these runs look for what the stack carries,
		// and BUSY refusals would make shoppers wait instead.
		s, err = benchkit.StartClusterWith(ctx, benchkit.ClusterSpec{Prefix: "checkout-bench-cluster-",
			Env: append(os.Environ(), admissionOff...), Args: append([]string{"--apis", strconv.Itoa(clusterReplicas), "--workers", strconv.Itoa(clusterReplicas)}, res.Flags...)})
	} else {
		log.Printf("starting the dev stack")
		s, err = benchkit.StartStack(ctx, "checkout-bench-campaign-", append(slices.Clone(admissionOff), res.Env...)...)
	}
	if err != nil {
		return err
	}
	s.Keep = keepStacks
	if keepStacks {
		log.Printf("the stack's folder, kept when it stops: %s", s.Dir)
	}
	defer s.Stop()
	b := &bench{stack: s, checkout: s.CheckoutMetrics(clusterReplicas)}
	if onCluster {
		b.procs, err = findClusterProcs(s.Dir)
		b.metrics = s.TemporalServiceMetrics
	} else {
		b.procs, err = findProcs(s.Cmd.Process.Pid, s.Dir)
		b.metrics = []string{s.TemporalMetrics}
	}
	if err != nil {
		return err
	}
	if b.pg, err = startPGSampler(ctx, s.DatabaseURL, 100*time.Millisecond); err != nil {
		return err
	}
	defer b.pg.close()
	if b.floor, err = benchkit.StartFloor(s); err != nil {
		return err
	}
	defer b.floor.Close()
	cfg, err := config.Load(func(string) string { return "" })
	if err != nil {
		return err
	}
	if slices.Contains(whats, runPlainOK) {
		if b.plainCheckout, err = plain.Start(ctx, s.DatabaseURL, cfg.DBMaxConns, []byte(s.Secret), cfg.HoldTTL); err != nil {
			return err
		}
		defer b.plainCheckout.Close()
	}

	log.Printf("warming up")
	if _, err := b.loadRun(ctx, "warm-up", 10, 5*time.Second, loadgen.CampaignMix, ""); err != nil {
		return err
	}
	for _, n := range counts {
		steps := make([]func() (figures.Run, error), len(whats))
		for i, what := range whats {
			steps[i] = func() (figures.Run, error) {
				switch what {
				case runFloor:
					return b.floorRun(ctx, n, window)
				case runCampaign:
					return b.loadRun(ctx, runCampaign, n, window, loadgen.CampaignMix, "")
				case runSagaOK:
					return b.loadRun(ctx, runSagaOK, n, window, okMix, "")
				default:
					return b.loadRun(ctx, runPlainOK, n, window, okMix, b.plainCheckout.URL)
				}
			}
		}
		for i := range steps {
			r, err := steps[(i+slices.Index(counts, n))%len(steps)]()
			if err != nil {
				return err
			}
			log.Printf("%s at %d shoppers: %.1f/s, p99 %.0f ms, CPU checkout %.0f%% temporal %.0f%% postgres %.0f%% tool %.0f%% other %.0f%%",
				r.What, n, r.PerSecond, r.P99Ms, r.Window.CPU.Checkout, r.Window.CPU.Temporal, r.Window.CPU.Postgres,
				r.Window.CPU.Driver, r.Window.CPU.OtherPct)
			res.Runs = append(res.Runs, r)
		}
	}

	pool, err := db.Connect(ctx, s.DatabaseURL, 8)
	if err != nil {
		return err
	}
	defer pool.Close()
	if b.plainCheckout != nil {
		// The plain endpoint's orders never pay and no hold of the product knows them: cancel
		// them and give their stock back before the audit.
		if res.PlainSettle, err = plain.Settle(ctx, pool); err != nil {
			return fmt.Errorf("settling the plain orders: %w", err)
		}
	}
	log.Printf("auditing")
	res.Audit, err = audit.Run(ctx, pool, audit.Options{HoldTTL: cfg.HoldTTL, SweeperPeriod: time.Minute,
		Visibility: b.floor.Client(), TaskQueue: cfg.TaskQueue, Provider: paysim.NewRecords(pool)})
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	return nil
}

// quiet waits (up to a minute) until the stack has settled from the previous run: its processes
// together below a fifth of one CPU.
func (b *bench) quiet() {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		if b.procs.stackBusy(time.Second) < 20 {
			return
		}
	}
}

// sampler takes the readings of one load phase.
type sampler struct {
	b        *bench
	from, to time.Time
	cpu      [2]cpuSnap
	persist  [2]persistence
	sdk      [2]latencies
	tasks    [2]latencies
	err      error
}

func (s *sampler) mark(i int) {
	snap, err := s.b.procs.snap()
	s.err = cmp.Or(s.err, err)
	s.cpu[i] = snap
	if len(s.b.metrics) > 0 {
		p, tasks, err := scrapeTemporal(context.Background(), s.b.metrics)
		if err == nil {
			s.persist[i] = p
		}
		s.tasks[i] = tasks
	}
	if len(s.b.checkout) > 0 {
		s.sdk[i] = scrapeLatencies(context.Background(), s.b.checkout, "_latency_seconds", sdkSeries)
	}
	if i == 0 {
		s.from = time.Now()
	} else {
		s.to = time.Now()
	}
}

func (s *sampler) window() figures.Window {
	return figures.Window{CPU: cpuBetween(s.cpu[0], s.cpu[1], s.b.procs.cpus), PG: s.b.pg.between(s.from, s.to),
		Persistence: persistenceBetween(s.persist[0], s.persist[1]), SDK: latenciesBetween(s.sdk[0], s.sdk[1]),
		Tasks: latenciesBetween(s.tasks[0], s.tasks[1])}
}

// floorRun starts empty workflows from n clients, one after another each, for d.
func (b *bench) floorRun(ctx context.Context, n int, d time.Duration) (figures.Run, error) {
	b.quiet()
	log.Printf("%s at %d clients", runFloor, n)
	tag := strconv.FormatInt(time.Now().UnixNano(), 36)
	sm := &sampler{b: b}
	var mu sync.Mutex
	var lat []time.Duration
	var errs int64
	var firstErr error
	var wg sync.WaitGroup
	sm.mark(0)
	stopAt := time.Now().Add(d)
	for c := range n {
		wg.Go(func() {
			for i := 0; time.Now().Before(stopAt) && ctx.Err() == nil; i++ {
				t := time.Now()
				err := b.floor.Run(ctx, fmt.Sprintf("floor-%s-%d-%d", tag, c, i))
				el := time.Since(t)
				mu.Lock()
				if err != nil {
					errs++
					firstErr = cmp.Or(firstErr, err)
				} else {
					lat = append(lat, el)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	sm.mark(1)
	if err := cmp.Or(ctx.Err(), sm.err); err != nil {
		return figures.Run{}, err
	}
	if errs > 0 {
		log.Printf("floor: %d errors, the first: %v", errs, firstErr)
	}
	secs := sm.to.Sub(sm.from).Seconds()
	slices.Sort(lat)
	return figures.Run{What: runFloor, Shoppers: n, Seconds: secs, Created: int64(len(lat)), Placed: int64(len(lat)) + errs,
		PerSecond: float64(len(lat)) / secs, P50Ms: benchkit.QuantileMs(lat, 0.50), P95Ms: benchkit.QuantileMs(lat, 0.95), P99Ms: benchkit.QuantileMs(lat, 0.99),
		Errors: errs, Window: sm.window()}, nil
}

// loadRun is one run of the load generator with n shoppers for d; orderURL, when set, sends the
// orders to the plain endpoint; with changes the load generator's configuration further.
func (b *bench) loadRun(ctx context.Context, what string, n int, d time.Duration, mix loadgen.Mix, orderURL string,
	with ...func(*loadgen.Config)) (figures.Run, error) {
	r, _, err := b.loadReport(ctx, what, n, d, mix, orderURL, with...)
	return r, err
}

// loadReport is loadRun with the load generator's whole report.
func (b *bench) loadReport(ctx context.Context, what string, n int, d time.Duration, mix loadgen.Mix, orderURL string,
	with ...func(*loadgen.Config)) (figures.Run, loadgen.Report, error) {
	b.quiet()
	log.Printf("%s at %d shoppers", what, n)
	sm := &sampler{b: b}
	cfg := loadgen.Config{BaseURL: b.stack.Base, MetricsURL: b.stack.Metrics, JWTSecret: b.stack.Secret, OpsToken: b.stack.OpsToken, Shoppers: n, Duration: d, Mix: mix,
		OrderURL: orderURL, Settle: 30 * time.Second,
		OnPhase: func(phase string) {
			if phase == loadgen.PhaseLoad {
				sm.mark(0)
			} else {
				sm.mark(1)
			}
		}}
	if b.stack.Tokens != nil { // the cluster's API takes its provider's tokens alone
		cfg.Tokens = b.stack.Tokens
	}
	for _, f := range with {
		f(&cfg)
	}
	if orderURL != "" {
		// The plain endpoint's orders stay PENDING_PAYMENT: read each once, do not wait for them.
		cfg.Settle = time.Millisecond
	}
	rep, err := loadgen.Run(ctx, cfg)
	if err != nil {
		return figures.Run{}, rep, fmt.Errorf("%s at %d shoppers: %w", what, n, err)
	}
	if sm.err != nil {
		return figures.Run{}, rep, sm.err
	}
	r := figures.Run{What: what, Shoppers: n, Seconds: rep.LoadSeconds, Placed: rep.Orders, Answers: rep.Answers,
		Mismatches: len(rep.Mismatches), Window: sm.window(), CouponOrders: rep.CouponOrders, Coupons: rep.Coupons}
	if orderURL == "" {
		r.Unexpected = rep.Unexpected()
	}
	for _, a := range rep.Answers {
		if a.Outcome == "CREATED" {
			r.Created = a.Orders
		}
	}
	r.PerSecond = float64(r.Created) / rep.LoadSeconds
	for _, e := range rep.Endpoints {
		if e.Endpoint == loadgen.EndpointOrder {
			r.P50Ms, r.P95Ms, r.P99Ms = e.P50Ms, e.P95Ms, e.P99Ms
		}
		if strings.HasPrefix(e.Endpoint, loadgen.EndpointOrderPaidWith("")) {
			r.ByPayment = append(r.ByPayment, e)
		}
	}
	for _, e := range rep.Errors {
		if (e.Status == 0 || e.Status >= 500) && !e.Expected { // BUSY is a refusal, as it should be
			r.Errors += e.Count
		}
		if e.Endpoint == loadgen.EndpointOrder || strings.HasPrefix(e.Endpoint, loadgen.EndpointOrder+" (") {
			r.Refusals = append(r.Refusals, e)
		}
	}
	if r.Created == 0 {
		return r, rep, errors.New(what + ": no order was created")
	}
	return r, rep, nil
}
