package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"os"
	"sort"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/marketplace/checkout/audit"
	"github.com/marketplace/checkout/bench/internal/figures"
	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/internal/dev/benchkit"
	"github.com/marketplace/checkout/loadgen"
	"github.com/marketplace/checkout/payment/paysim"
)

// The admission control section (-admission): the campaign past its knee, on a stack with
// admission control off (the baseline) and on one as the product ships it, in one invocation.
const (
	admissionStart = "<!-- admission-bench:start -->"
	admissionEnd   = "<!-- admission-bench:end -->"
	// The same on `make cluster`'s shape (-stack cluster), a section of its own.
	admissionClusterStart = "<!-- admission-cluster-bench:start -->"
	admissionClusterEnd   = "<!-- admission-cluster-bench:end -->"
)

// admissionOff is the environment of the baseline stack, and of the campaign section's runs,
// which look for the knee rather than shed load past it.
var admissionOff = []string{"ORDERS_MAX_IN_FLIGHT=0", "ORDERS_ADMIT_MAX_LATENCY=0"}

// admissionConfig is one stack of the comparison.
type admissionConfig struct {
	Name     string   `json:"name"`
	Settings string   `json:"settings"`
	Env      []string `json:"env"`
}

func admissionConfigs() []admissionConfig {
	return []admissionConfig{
		{Name: "admission control off", Settings: strings.Join(admissionOff, " "), Env: admissionOff},
		{Name: "admission control on", Settings: fmt.Sprintf("defaults: ORDERS_MAX_IN_FLIGHT=%d ORDERS_ADMIT_MAX_LATENCY=%s",
			config.DefaultOrdersMaxInFlight, config.DefaultOrdersAdmitMaxLatency)},
	}
}

// AdmissionRun is one stack's run: the campaign mix past the knee, then the audit.
type AdmissionRun struct {
	Config admissionConfig `json:"config"`
	Run    figures.Run     `json:"run"`
	// Busy is POST /orders answered BUSY (every try, first ones and repeats), with the latency of
	// those answers; BusyByReason is what the API counted (checkout_orders_busy_total).
	Busy loadgen.EndpointStats `json:"busy"`
	// Shopper is each order as its shopper waited for it: first try to last answer, BUSY answers,
	// their Retry-After waits and the orders given up included (absent from runs before it).
	Shopper      loadgen.EndpointStats `json:"shopper"`
	BusyByReason map[string]int64      `json:"busyByReason"`
	LoadBefore   float64               `json:"loadAverageBefore"`
	LoadAfter    float64               `json:"loadAverageAfter"`
	Audit        audit.Report          `json:"audit"`
}

// AdmissionResults are everything one -admission invocation measured.
type AdmissionResults struct {
	// Stack is the stack measured: dev (also for figures from before there was a choice) or cluster.
	Stack         string         `json:"stack,omitempty"`
	StartedAt     time.Time      `json:"startedAt"`
	WindowSeconds float64        `json:"windowSeconds"`
	Shoppers      int            `json:"shoppers"`
	CPUs          int            `json:"cpus"`
	CPUModel      string         `json:"cpuModel"`
	Runs          []AdmissionRun `json:"runs"`
}

// mainAdmission measures (or, with from, reads an earlier run's JSON), writes the JSON and the
// section.
func mainAdmission(ctx context.Context, stack string, shoppers int, window time.Duration, from, jsonOut, doc string) error {
	start, end := admissionStart, admissionEnd
	if stack == stackCluster {
		start, end = admissionClusterStart, admissionClusterEnd
	}
	res, err := measureSection(from, jsonOut, doc, start, end,
		func() (AdmissionResults, error) { return runAdmission(ctx, stack, shoppers, window) }, renderAdmission)
	if err != nil {
		return err
	}
	for _, r := range res.Runs {
		if !r.Audit.OK() {
			return fmt.Errorf("%s: the audit found %d violations (listed in the section)", r.Config.Name, len(r.Audit.Violations))
		}
	}
	return nil
}

func runAdmission(ctx context.Context, stack string, shoppers int, window time.Duration) (AdmissionResults, error) {
	res := AdmissionResults{Stack: stack, StartedAt: time.Now().UTC(), WindowSeconds: window.Seconds(), Shoppers: shoppers,
		CPUs: benchkit.OnlineCPUs(), CPUModel: benchkit.CPUModel()}
	for _, c := range admissionConfigs() {
		r, err := admissionRun(ctx, stack, c, shoppers, window)
		if err != nil {
			return res, fmt.Errorf("%s: %w", c.Name, err)
		}
		log.Printf("%s: %.1f orders/s, admitted p99 %.0f ms, %d BUSY answers, audit clean: %v", c.Name, r.Run.PerSecond,
			r.Run.P99Ms, r.Busy.Requests, r.Audit.OK())
		res.Runs = append(res.Runs, r)
	}
	return res, nil
}

// admissionRun starts a stack with c's settings, warms it up, runs the campaign mix with shoppers
// for window, and audits what the run left.
func admissionRun(ctx context.Context, stack string, c admissionConfig, shoppers int, window time.Duration) (AdmissionRun, error) {
	out := AdmissionRun{Config: c, LoadBefore: benchkit.LoadAverage()}
	var b *bench
	var err error
	if stack == stackCluster {
		log.Printf("%s: starting the cluster", c.Name)
		b, err = startClusterBench(ctx, "checkout-bench-admission-cluster-", c.Env...)
	} else {
		log.Printf("%s: starting the dev stack", c.Name)
		b, err = startDevBench(ctx, "checkout-bench-admission-", c.Env...)
	}
	if err != nil {
		return out, err
	}
	defer b.close()
	s := b.stack
	var rep loadgen.Report
	if out.Run, rep, err = b.loadReport(ctx, runCampaign, shoppers, window, loadgen.CampaignMix, ""); err != nil {
		return out, err
	}
	for _, e := range rep.Endpoints {
		switch e.Endpoint {
		case loadgen.EndpointOrderBusy:
			out.Busy = e
		case loadgen.EndpointOrderShopper:
			out.Shopper = e
		}
	}
	out.BusyByReason = map[string]int64{}
	for _, url := range b.apiMetrics() {
		err = benchkit.ScrapeMetrics(ctx, url, func(name string, labels map[string]string, v float64) {
			if name == "checkout_orders_busy_total" {
				out.BusyByReason[labels["reason"]] += int64(v)
			}
		})
		if err != nil {
			return out, err
		}
	}

	log.Printf("%s: auditing", c.Name)
	if out.Audit, err = auditDev(ctx, s); err != nil {
		return out, err
	}
	out.LoadAfter = benchkit.LoadAverage()
	return out, nil
}

// startDevBench starts a dev stack with env, its samplers, and warms it up.
func startDevBench(ctx context.Context, prefix string, env ...string) (*bench, error) {
	s, err := benchkit.StartStack(ctx, prefix, env...)
	if err != nil {
		return nil, err
	}
	return warmBench(ctx, &bench{stack: s, metrics: []string{s.TemporalMetrics}},
		func() (procs, error) { return findProcs(s.Cmd.Process.Pid, s.Dir) })
}

// startClusterBench starts `make cluster`'s shape (two API replicas behind HAProxy, two workers)
// with env added to its settings, its samplers, and warms it up.
func startClusterBench(ctx context.Context, prefix string, env ...string) (*bench, error) {
	s, err := benchkit.StartClusterWith(ctx, benchkit.ClusterSpec{Prefix: prefix,
		Env: append(os.Environ(), env...), Args: []string{"--apis", "2", "--workers", "2"}})
	if err != nil {
		return nil, err
	}
	return warmBench(ctx, &bench{stack: s, metrics: s.TemporalServiceMetrics},
		func() (procs, error) { return findClusterProcs(s.Dir) })
}

// warmBench finds b's processes, starts its PostgreSQL sampler and warms the stack up (10
// shoppers for 5 s); on failure it stops the stack.
func warmBench(ctx context.Context, b *bench, find func() (procs, error)) (*bench, error) {
	var err error
	if b.procs, err = find(); err == nil {
		b.pg, err = startPGSampler(ctx, b.stack.DatabaseURL, 100*time.Millisecond)
	}
	if err == nil {
		_, err = b.loadRun(ctx, "warm-up", 10, 5*time.Second, loadgen.CampaignMix, "")
	}
	if err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

// apiMetrics are the /metrics of every API process of the stack: the dev stack's one, or each of
// the cluster's replicas.
func (b *bench) apiMetrics() []string {
	if !b.stack.Cluster {
		return []string{b.stack.Metrics}
	}
	// startClusterBench starts two replicas, whose /metrics follow one another.
	var urls []string
	for i := range 2 {
		urls = append(urls, fmt.Sprintf("http://127.0.0.1:%d/metrics", b.stack.Ports.APIMetrics+i))
	}
	return urls
}

// close stops what startDevBench started.
func (b *bench) close() {
	if b.pg != nil {
		b.pg.close()
	}
	b.stack.Stop()
}

// auditDev audits what the runs on a dev stack left.
func auditDev(ctx context.Context, s *benchkit.Stack) (audit.Report, error) {
	cfg, err := config.Load(func(string) string { return "" })
	if err != nil {
		return audit.Report{}, err
	}
	pool, err := db.Connect(ctx, s.DatabaseURL, 8)
	if err != nil {
		return audit.Report{}, err
	}
	defer pool.Close()
	tc, err := client.Dial(client.Options{HostPort: s.Temporal, DataConverter: s.DataConverter,
		ConnectionOptions: client.ConnectionOptions{TLS: s.TemporalTLS},
		Logger:            sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		return audit.Report{}, err
	}
	defer tc.Close()
	rep, err := audit.Run(ctx, pool, audit.Options{HoldTTL: cfg.HoldTTL, SweeperPeriod: time.Minute,
		Visibility: tc, TaskQueue: cfg.TaskQueue, Provider: paysim.NewRecords(pool)})
	if err != nil {
		return rep, fmt.Errorf("audit: %w", err)
	}
	return rep, nil
}

// renderAdmission writes the admission control section of docs/benchmarks.md.
func renderAdmission(res AdmissionResults) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	window := time.Duration(res.WindowSeconds * float64(time.Second))
	start, end, title, cmd, flags := admissionStart, admissionEnd, "", "make bench-admission", ""
	stack := "a fresh `bin/checkout-dev dev` (as `make run` starts it)"
	if res.Stack == stackCluster {
		start, end, title, cmd, flags = admissionClusterStart, admissionClusterEnd, " on `make cluster`'s shape",
			"make bench-admission-cluster", " -stack cluster"
		stack = "a fresh `bin/checkout-dev cluster` (as `make cluster` starts it: the Temporal server as four " +
			"processes on PostgreSQL, two workers, two API replicas behind HAProxy, each replica with its own " +
			"admission limits)"
	}
	w("%s\n## Admission control past the knee%s: POST /orders with and without it\n\n", start, title)
	w("Written by `%s` (bench/benchcampaign -admission%s); running it again replaces this section.\n\n", cmd, flags)
	w("- Command: `%s` (`bin/benchcampaign -admission%s -shoppers %d -window %s`), measured %s "+
		"on %d CPUs (%s).\n", cmd, flags, res.Shoppers, window, res.StartedAt.Format("2006-01-02 15:04 UTC"), res.CPUs, res.CPUModel)
	w("- Two stacks, one after the other, each %s with default settings but for admission control: ", stack)
	for i, r := range res.Runs {
		if i > 0 {
			w("; then ")
		}
		w("**%s** (%s)", r.Config.Name, r.Config.Settings)
	}
	w(". On each: a 5 s warm-up at 10 shoppers, then %d `checkout-dev loadgen` shoppers with the campaign mix (as in the "+
		"campaign section) for %s, past the knee that section finds; the orders they started then finish, outside the "+
		"figures; then the invariant audit.\n", res.Shoppers, window)
	w("- A shopper answered 503 `BUSY` sends the same request with the same Idempotency-Key after `Retry-After` " +
		"(spread by up to a fifth), up to five tries; one still refused then gives up and counts as refused, not as a " +
		"fault. Latency of POST /orders is that of the orders let in (every try that was not refused BUSY); the BUSY " +
		"answers are counted on their own. What the shoppers lived is the next column: each order from its first try " +
		"to its last answer, every BUSY answer and its wait included, and the orders given up counted with the time " +
		"their shoppers waited before giving up; the share given up is beside it.\n\n")

	w("| stack | orders answered 201 per s | POST /orders let in: p50 / p95 / p99 ms | **as shoppers waited: p50 / p95 / p99 ms** | BUSY answers (p99 ms) | by reason (API's count) | orders given up after 5 BUSY (share of orders) | answers by code (every try) | audit |\n")
	w("|---|---:|---:|---:|---:|---|---:|---|---|\n")
	for _, r := range res.Runs {
		busyOrders := int64(0)
		for _, a := range r.Run.Answers {
			if a.Outcome == "BUSY" {
				busyOrders = a.Orders
			}
		}
		busy := "0"
		if r.Busy.Requests > 0 {
			busy = fmt.Sprintf("%d (%.0f)", r.Busy.Requests, r.Busy.P99Ms)
		}
		shopper := "–"
		if r.Shopper.Requests > 0 {
			shopper = fmt.Sprintf("%.0f / %.0f / %.0f", r.Shopper.P50Ms, r.Shopper.P95Ms, r.Shopper.P99Ms)
		}
		w("| %s | %.1f | %.0f / %.0f / %.0f | %s | %s | %s | %d (%s) | %s | %s |\n", r.Config.Name, r.Run.PerSecond,
			r.Run.P50Ms, r.Run.P95Ms, r.Run.P99Ms, shopper, busy, reasons(r.BusyByReason), busyOrders,
			percentOf(busyOrders, r.Shopper.Requests), refusals(r.Run.Refusals), auditLine(r.Audit))
	}
	w("\n")
	if len(res.Runs) == 2 {
		off, on := res.Runs[0].Run, res.Runs[1].Run
		if res.Runs[1].Busy.Requests == 0 {
			w("Admission control refused no order in this run: the load did not reach its limits.\n\n")
		} else {
			w("With admission control the orders let in were answered with p99 %.0f ms against %.0f ms without it "+
				"(%s×), at %.1f orders/s against %.1f; the tries refused were told at once (BUSY p99 %.0f ms) to come "+
				"back, instead of waiting in the queue that made every order slow.", on.P99Ms, off.P99Ms,
				ratio(on.P99Ms, off.P99Ms), on.PerSecond, off.PerSecond, res.Runs[1].Busy.P99Ms)
			if s0, s1 := res.Runs[0].Shopper, res.Runs[1].Shopper; s0.Requests > 0 && s1.Requests > 0 {
				w(" Judged by what shoppers lived instead, every try and wait counted: p50 %.0f ms against %.0f ms "+
					"(%s×), p99 %.0f ms against %.0f ms (%s×), with %s of the orders given up after five BUSY answers "+
					"against %s without it.", s1.P50Ms, s0.P50Ms, ratio(s1.P50Ms, s0.P50Ms), s1.P99Ms, s0.P99Ms,
					ratio(s1.P99Ms, s0.P99Ms), percentOf(givenUp(res.Runs[1]), s1.Requests), percentOf(givenUp(res.Runs[0]), s0.Requests))
			}
			w("\n\n")
		}
	}
	support := "NATS"
	if res.Stack == stackCluster {
		support = "HAProxy, NATS (three nodes), Jaeger, OIDC provider"
	}
	w("What else ran on the machine, per load phase (CPU in %% of one CPU, the machine has %d × 100 %%; \"other\" is "+
		"every process outside the stack and this tool, such as other people's builds and tests):\n\n", res.CPUs)
	w("| stack | checkout %% | Temporal %% | %s %% | PostgreSQL %% | this tool %% | other %% | idle %% | 1-minute load average at start / end |\n", support)
	w("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range res.Runs {
		c := r.Run.Window.CPU
		w("| %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.2f / %.2f |\n", r.Config.Name, c.Checkout, c.Temporal,
			c.Balancer+c.Support, c.Postgres, c.Driver, c.OtherPct, c.IdlePct, r.LoadBefore, r.LoadAfter)
	}
	busiest := 0.0
	for _, r := range res.Runs {
		busiest = max(busiest, r.Run.Window.CPU.OtherPct)
	}
	if busiest >= 20 {
		w("\nOther work ran on the machine meanwhile (up to %.0f %% of one CPU, the \"other\" column): the stack had "+
			"less CPU than on an idle machine, so its absolute figures are lower, and the two runs compare only as far "+
			"as that load was alike in both.\n", busiest)
	}
	var lost, slow []string
	for _, r := range res.Runs {
		if r.Run.Unexpected > 0 || r.Run.Mismatches > 0 || !r.Audit.OK() {
			lost = append(lost, fmt.Sprintf("%s: %d orders ended otherwise than their scenario, %d repeated keys "+
				"answered differently, audit %s", r.Config.Name, r.Run.Unexpected, r.Run.Mismatches, auditLine(r.Audit)))
		}
		if r.Run.Errors > 0 {
			var failed []loadgen.ErrorCount
			for _, e := range r.Run.Refusals {
				if (e.Status == 0 || e.Status >= 500) && !e.Expected {
					failed = append(failed, e)
				}
			}
			slow = append(slow, fmt.Sprintf("%s: %d tries of POST /orders (%s), each sent again with its key as "+
				"the answer asks", r.Config.Name, r.Run.Errors, refusals(failed)))
		}
	}
	if len(lost) == 0 {
		w("\nNothing lost: in both runs every order ended as its scenario says, or was refused whole (BUSY: nothing " +
			"reserved or recorded), no repeated key was answered differently, and the audit after each run is clean.\n")
	} else {
		w("\n**Lost or wrong**: %s.\n", strings.Join(lost, "; "))
	}
	if len(slow) > 0 {
		w("\nErrors other than BUSY (an order that waited the 30 s an order may wait is answered 503 UNAVAILABLE, and "+
			"one whose client gave up has no answer): %s.\n", strings.Join(slow, "; "))
	}
	w("%s\n", end)
	return b.String()
}

func reasons(m map[string]int64) string {
	if len(m) == 0 {
		return "–"
	}
	return joinCounts(m)
}

func refusals(es []loadgen.ErrorCount) string {
	byCode := map[string]int64{}
	for _, e := range es {
		code := e.Code
		if code == "" {
			code = fmt.Sprintf("HTTP %d", e.Status)
		}
		byCode[code] += e.Count
	}
	if len(byCode) == 0 {
		return "none"
	}
	codes := make([]string, 0, len(byCode))
	for c := range byCode {
		codes = append(codes, c)
	}
	sort.Slice(codes, func(i, j int) bool { return byCode[codes[i]] > byCode[codes[j]] })
	parts := make([]string, len(codes))
	for i, c := range codes {
		parts[i] = fmt.Sprintf("%s %d", c, byCode[c])
	}
	return strings.Join(parts, ", ")
}

func auditLine(r audit.Report) string {
	if r.OK() {
		return fmt.Sprintf("clean (%d checks, %s)", len(r.Checks), orderCounts(r.Orders))
	}
	return fmt.Sprintf("**%d violations**, the first: %s: %s: %s", len(r.Violations), r.Violations[0].Invariant,
		r.Violations[0].Subject, r.Violations[0].Detail)
}

// measureSection measures with run (or, with from, reads an earlier run's JSON instead), writes
// the figures to jsonOut (when measured and set), and writes the section render gives them
// between its markers in doc, printing it too.
func measureSection[T any](from, jsonOut, doc, start, end string, run func() (T, error), render func(T) string) (T, error) {
	var res T
	if from != "" {
		raw, err := os.ReadFile(from)
		if err == nil {
			err = json.Unmarshal(raw, &res)
		}
		if err != nil {
			return res, fmt.Errorf("-from: %w", err)
		}
	} else {
		var err error
		if res, err = run(); err != nil {
			return res, err
		}
		if jsonOut != "" {
			raw, _ := json.MarshalIndent(res, "", "  ")
			if err := os.WriteFile(jsonOut, raw, 0o644); err != nil {
				return res, err
			}
		}
	}
	section := render(res)
	fmt.Print(section)
	return res, benchkit.WriteSection(doc, start, end, section)
}

// givenUp is how many of a run's orders their shoppers gave up after five BUSY answers.
func givenUp(r AdmissionRun) int64 {
	for _, a := range r.Run.Answers {
		if a.Outcome == "BUSY" {
			return a.Orders
		}
	}
	return 0
}

// percentOf is n of total as a percentage.
func percentOf(n, total int64) string {
	if total <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f %%", 100*float64(n)/float64(total))
}
