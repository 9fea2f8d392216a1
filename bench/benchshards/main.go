// Command benchshards measures what Temporal's history shards cost on this machine: for each shard
// count it starts `make cluster`'s shape (`checkout-dev cluster --history-shards N`) on a fresh data
// folder and ports of its own, reads every process's CPU from /proc while the cluster is idle, then
// while the load generator's shoppers place campaign orders at a moderate rate, and stops it. It
// writes the "What history shards cost" section of docs/benchmarks.md.
//
// The counts run one after another on the same machine; the share of the machine other processes
// took in each window is recorded beside it, and a window where it was above a tenth is marked
// disturbed.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/marketplace/checkout/internal/dev/benchkit"
	"github.com/marketplace/checkout/internal/dev/cluster"
	"github.com/marketplace/checkout/loadgen"
)

const (
	startMarker = "<!-- shards-bench:start -->"
	endMarker   = "<!-- shards-bench:end -->"
	// disturbedShare is the share of the machine other processes may take in a window before it
	// is marked disturbed.
	disturbedShare = 0.10
)

// admissionOff turns admission control off, as the other cluster benchmarks do: the load is
// moderate, and a BUSY refusal would make a shopper wait instead.
var admissionOff = []string{"ORDERS_MAX_IN_FLIGHT=0", "ORDERS_ADMIT_MAX_LATENCY=0"}

// groups are the columns of the tables: each of the cluster's processes falls in the first group
// whose service it matches (processes.json's "service").
var groups = []struct{ name, label string }{
	{"temporal-history", "Temporal history"},
	{"temporal-matching", "Temporal matching"},
	{"temporal-frontend", "Temporal frontend"},
	{"temporal-worker", "Temporal worker service"},
	{"temporal-ui", "Temporal UI"},
	{"worker", "checkout workers"},
	{"api", "API replicas"},
	{"haproxy", "HAProxy (and the proxy of older builds)"},
	{"nats", "NATS (3 nodes)"},
	{"postgres", "PostgreSQL (all backends)"},
	{"jaeger", "Jaeger"},
	{"oidc-provider", "OIDC provider"},
	{"checkout-dev", "checkout-dev cluster (the supervisor)"},
	{"tool", "this tool (the load generator)"},
}

// groupOf is the column of a process of the given service.
func groupOf(service string) string {
	switch {
	case strings.HasPrefix(service, "nats"):
		return "nats"
	case service == cluster.LegacyProxyName || service == "haproxy":
		return "haproxy"
	}
	return service
}

// Window is what each group took in one measured window, in percent of one CPU (the machine has
// CPUs × 100 %), and the rest of the machine.
type Window struct {
	Seconds  float64            `json:"seconds"`
	Pct      map[string]float64 `json:"pct"`
	Stack    float64            `json:"stackPct"`
	OtherPct float64            `json:"otherPct"`
	IdlePct  float64            `json:"idlePct"`
	// Other is the share (0–1) of the machine other processes took.
	Other float64 `json:"otherShare"`
	// HistoryRSSMB is the history service's resident memory at the window's end.
	HistoryRSSMB float64 `json:"historyRssMb"`
	LoadAvg      float64 `json:"loadAverage"`
}

// Run is one shard count: its idle window and its load window.
type Run struct {
	Shards      int       `json:"shards"`
	StartedAt   time.Time `json:"startedAt"`
	StartupSecs float64   `json:"startupSeconds"`
	Idle        Window    `json:"idle"`
	Load        Window    `json:"load"`
	Shoppers    int       `json:"shoppers"`
	Created     int64     `json:"created"`
	PerSecond   float64   `json:"perSecond"`
	P50Ms       float64   `json:"p50Ms"`
	P99Ms       float64   `json:"p99Ms"`
	Errors      int64     `json:"errors"`
	// CPUPerOrderMs is the stack's CPU (every group but this tool) in the load window per order
	// created, in ms, with its idle CPU over the same time taken off: what an order added.
	CPUPerOrderMs float64 `json:"cpuPerOrderMs"`
}

func main() {
	shardList := flag.String("shards", "16,64,128", "history shard counts to measure, in this order")
	settle := flag.Duration("settle", 30*time.Second, "wait after the cluster is up before the idle window")
	idle := flag.Duration("idle", 60*time.Second, "the idle window")
	shoppers := flag.Int("shoppers", 10, "the load generator's shoppers in the load window (campaign mix)")
	load := flag.Duration("load", 60*time.Second, "the load window")
	binary := flag.String("binary", "bin/checkout-dev", "the harness that runs `cluster`")
	tools := flag.String("tools", "", "folder of temporal-server and the cluster's other tools (default: the binary's)")
	out := flag.String("out", "docs/benchmarks.md", "the document to write the section into (empty: none)")
	flag.Parse()
	var counts []int
	for _, f := range strings.Split(*shardList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 16384 {
			log.Fatalf("-shards: %q is not a count between 1 and 16384", f)
		}
		counts = append(counts, n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := benchkit.ChdirModuleRoot(); err != nil {
		log.Fatal(err)
	}
	started := time.Now().UTC()
	loadBefore := benchkit.LoadAverage()
	var runs []Run
	for _, n := range counts {
		r, err := measure(ctx, n, *binary, *tools, *settle, *idle, *shoppers, *load)
		if err != nil {
			log.Fatalf("%d shards: %v", n, err)
		}
		log.Printf("%d shards: idle stack %.1f%% (history %.1f%%, other %.0f%% of the machine); load %.1f orders/s, "+
			"p50 %.0f ms p99 %.0f ms, stack %.0f%% (history %.0f%%), %.0f ms CPU per order, other %.0f%%",
			n, r.Idle.Stack, r.Idle.Pct["temporal-history"], 100*r.Idle.Other, r.PerSecond, r.P50Ms, r.P99Ms, r.Load.Stack,
			r.Load.Pct["temporal-history"], r.CPUPerOrderMs, 100*r.Load.Other)
		runs = append(runs, r)
	}
	raw, _ := json.MarshalIndent(runs, "", "  ")
	fmt.Println(string(raw))
	if *out == "" {
		return
	}
	section := render(runs, started, loadBefore, benchkit.LoadAverage(), *settle, *idle, *load, *shoppers, *shardList)
	if err := benchkit.WriteSection(*out, startMarker, endMarker, section); err != nil {
		log.Fatal(err)
	}
	log.Printf("wrote %s", *out)
}

// measure starts the cluster with n shards, takes its idle window and its load window, and stops it.
func measure(ctx context.Context, n int, binary, tools string, settle, idle time.Duration, shoppers int,
	load time.Duration) (Run, error) {
	r := Run{Shards: n, StartedAt: time.Now().UTC(), Shoppers: shoppers}
	log.Printf("%d shards: starting the cluster (two API replicas, two workers)", n)
	began := time.Now()
	s, err := benchkit.StartClusterWith(ctx, benchkit.ClusterSpec{Binary: binary, Tools: tools,
		Prefix: fmt.Sprintf("checkout-bench-shards-%d-", n), Env: append(os.Environ(), admissionOff...),
		Args: []string{"--apis", "2", "--workers", "2", "--history-shards", strconv.Itoa(n)}})
	if err != nil {
		return r, err
	}
	defer s.Stop()
	r.StartupSecs = time.Since(began).Seconds()
	p := parts{dir: s.Dir, harness: s.Cmd.Process.Pid, cpus: benchkit.OnlineCPUs()}
	log.Printf("%d shards: up in %.0f s; settling %s, then idle for %s", n, r.StartupSecs, settle, idle)
	if err := sleep(ctx, settle); err != nil {
		return r, err
	}
	a, err := p.snap()
	if err != nil {
		return r, err
	}
	if err := sleep(ctx, idle); err != nil {
		return r, err
	}
	b, err := p.snap()
	if err != nil {
		return r, err
	}
	r.Idle = p.between(a, b)

	log.Printf("%d shards: %d shoppers for %s", n, shoppers, load)
	var from, to snapshot
	var snapErr error
	cfg := loadgen.Config{BaseURL: s.Base, MetricsURL: s.Metrics, OpsToken: s.OpsToken, Tokens: s.Tokens,
		Shoppers: shoppers, Duration: load, Mix: loadgen.CampaignMix, Settle: 30 * time.Second,
		OnPhase: func(phase string) {
			snap, err := p.snap()
			snapErr = errors.Join(snapErr, err)
			if phase == loadgen.PhaseLoad {
				from = snap
			} else {
				to = snap
			}
		}}
	rep, err := loadgen.Run(ctx, cfg)
	if err != nil {
		return r, err
	}
	if snapErr != nil {
		return r, snapErr
	}
	r.Load = p.between(from, to)
	for _, a := range rep.Answers {
		if a.Outcome == "CREATED" {
			r.Created = a.Orders
		}
	}
	if r.Created == 0 {
		return r, errors.New("no order was created")
	}
	r.PerSecond = float64(r.Created) / rep.LoadSeconds
	for _, e := range rep.Endpoints {
		if e.Endpoint == loadgen.EndpointOrder {
			r.P50Ms, r.P99Ms = e.P50Ms, e.P99Ms
		}
	}
	for _, e := range rep.Errors {
		if (e.Status == 0 || e.Status >= 500) && !e.Expected {
			r.Errors += e.Count
		}
	}
	// What the orders added: the stack's CPU over the load window less its idle rate.
	added := (r.Load.Stack - r.Idle.Stack) / 100 * r.Load.Seconds
	r.CPUPerOrderMs = 1000 * added / float64(r.Created)
	return r, nil
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// parts finds the cluster's processes in its processes.json at each reading (a process the
// supervisor restarts has a new pid), and its PostgreSQL cluster by its postmaster.
type parts struct {
	dir     string
	harness int
	cpus    int
}

// snapshot is one reading: the machine's counters and each process's CPU time, in jiffies, by
// group and pid.
type snapshot struct {
	at          time.Time
	busy, total float64
	procs       map[string]map[int]float64 // group → pid → jiffies
	historyPID  int
}

func (p parts) snap() (snapshot, error) {
	s := snapshot{at: time.Now(), procs: map[string]map[int]float64{}}
	add := func(group string, pid int, j float64) {
		if s.procs[group] == nil {
			s.procs[group] = map[int]float64{}
		}
		s.procs[group][pid] = j
	}
	raw, err := os.ReadFile(filepath.Join(p.dir, "processes.json"))
	if err != nil {
		return s, err
	}
	var state map[string]struct {
		Pid     int    `json:"pid"`
		Service string `json:"service"`
	}
	if err := json.Unmarshal(raw, &state); err != nil {
		return s, fmt.Errorf("processes.json: %w", err)
	}
	for _, x := range state {
		if x.Pid <= 0 {
			continue
		}
		// HAProxy's master with its worker; each other process alone.
		if g := groupOf(x.Service); g == "haproxy" {
			if j, err := benchkit.TreeJiffies(x.Pid); err == nil {
				add(g, x.Pid, j)
			}
		} else if st, err := benchkit.ProcTimes(x.Pid); err == nil {
			add(g, x.Pid, st.UTime+st.STime)
		}
		if x.Service == "temporal-history" {
			s.historyPID = x.Pid
		}
	}
	if pm, err := benchkit.PostmasterPID(filepath.Join(p.dir, "pg")); err == nil {
		if j, err := benchkit.TreeJiffies(pm); err == nil {
			add("postgres", pm, j)
		}
	}
	if st, err := benchkit.ProcTimes(p.harness); err == nil {
		add("checkout-dev", p.harness, st.UTime+st.STime)
	}
	add("tool", os.Getpid(), benchkit.SelfJiffies())
	s.busy, s.total, err = benchkit.MachineJiffies()
	return s, err
}

// between is what each group took from a to b: a process counts when it ran at both readings.
func (p parts) between(a, b snapshot) Window {
	w := Window{Seconds: b.at.Sub(a.at).Seconds(), Pct: map[string]float64{}, LoadAvg: benchkit.LoadAverage(),
		HistoryRSSMB: rssMB(b.historyPID)}
	total := b.total - a.total
	if total <= 0 {
		return w
	}
	perCPU := total / float64(p.cpus)
	var ours float64
	for g, pids := range b.procs {
		for pid, j := range pids {
			if before, ok := a.procs[g][pid]; ok {
				w.Pct[g] += 100 * (j - before) / perCPU
				ours += j - before
				if g != "tool" {
					w.Stack += 100 * (j - before) / perCPU
				}
			}
		}
	}
	other := max((b.busy-a.busy)-ours, 0)
	w.OtherPct, w.Other = 100*other/perCPU, other/total
	w.IdlePct = 100 * (total - (b.busy - a.busy)) / perCPU
	return w
}

// rssMB is a process's resident memory in MB (0 when unreadable).
func rssMB(pid int) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				kb, _ := strconv.ParseFloat(f[0], 64)
				return kb / 1024
			}
		}
	}
	return 0
}

// render writes the section of docs/benchmarks.md.
func render(runs []Run, started time.Time, loadBefore, loadAfter float64, settle, idle, load time.Duration,
	shoppers int, shards string) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("%s\n## What history shards cost\n\n", startMarker)
	w("Written by `make bench-shards` (bench/benchshards); running it again replaces this section.\n\n")
	w("- Command: `make bench-shards SHARDS=%s` (bench/benchshards -shards %s -settle %s -idle %s -shoppers %d -load %s), "+
		"%s, on %d × %s; load average %.2f before, %.2f after.\n", shards, shards, settle, idle, shoppers, load,
		started.Format("2006-01-02 15:04 UTC"), benchkit.OnlineCPUs(), benchkit.CPUModel(), loadBefore, loadAfter)
	w("%s", "- Stack: `bin/checkout-dev cluster --history-shards N` as `make cluster` starts it, each count on a fresh data "+
		"folder and ports of its own, one after another: two API replicas behind HAProxy, two workers, the Temporal "+
		"server as four processes on the cluster's PostgreSQL, NATS as three nodes, Jaeger, the OIDC provider; "+
		"admission control off (`"+strings.Join(admissionOff, " ")+"`).\n")
	w("- Idle: the cluster up and left alone for %s, then each process's CPU read from /proc over %s (processes.json "+
		"names them; PostgreSQL is its postmaster with every backend). Load: `checkout-dev loadgen`'s campaign mix, %d "+
		"shoppers for %s, the same readings over the load phase. CPU in %% of one CPU (the machine has %d × 100 %%); "+
		"**other** is what processes outside the cluster and this tool took; a window where they took more than a "+
		"tenth of the machine is marked **disturbed**.\n\n", settle, idle, shoppers, load, benchkit.OnlineCPUs())

	header := func(what string) {
		w("| %s |", what)
		for _, r := range runs {
			w(" %d shards |", r.Shards)
		}
		w("\n|---|")
		for range runs {
			w("---:|")
		}
		w("\n")
	}
	row := func(label string, f func(Run) string) {
		w("| %s |", label)
		for _, r := range runs {
			w(" %s |", f(r))
		}
		w("\n")
	}
	pct := func(v float64) string { return fmt.Sprintf("%.1f", v) }
	shown := func(win func(Run) Window) []string {
		seen := map[string]bool{}
		for _, r := range runs {
			for g := range win(r).Pct {
				seen[g] = true
			}
		}
		var out []string
		for _, g := range groups {
			if seen[g.name] {
				out = append(out, g.name)
			}
		}
		for _, g := range slices.Sorted(maps.Keys(seen)) {
			if !slices.Contains(out, g) {
				out = append(out, g)
			}
		}
		return out
	}
	labelOf := func(name string) string {
		for _, g := range groups {
			if g.name == name {
				return g.label
			}
		}
		return name
	}
	disturbed := func(win Window) string {
		if win.Other > disturbedShare {
			return fmt.Sprintf("%.1f (**disturbed**)", win.OtherPct)
		}
		return pct(win.OtherPct)
	}
	windows := []struct {
		title string
		win   func(Run) Window
	}{
		{"Idle, CPU % of one CPU over the idle window", func(r Run) Window { return r.Idle }},
		{"Under load, CPU % of one CPU over the load phase", func(r Run) Window { return r.Load }},
	}
	for i, x := range windows {
		w("%s:\n\n", x.title)
		header("process")
		for _, g := range shown(x.win) {
			row(labelOf(g), func(r Run) string { return pct(x.win(r).Pct[g]) })
		}
		row("**the cluster** (all but this tool)", func(r Run) string { return "**" + pct(x.win(r).Stack) + "**" })
		row("other processes", func(r Run) string { return disturbed(x.win(r)) })
		row("idle", func(r Run) string { return pct(x.win(r).IdlePct) })
		row("history's resident memory, MB", func(r Run) string { return fmt.Sprintf("%.0f", x.win(r).HistoryRSSMB) })
		row("load average at the end", func(r Run) string { return fmt.Sprintf("%.2f", x.win(r).LoadAvg) })
		if i == 1 {
			row("orders/s answered 201", func(r Run) string { return fmt.Sprintf("%.1f", r.PerSecond) })
			row("POST /orders p50 / p99 ms", func(r Run) string { return fmt.Sprintf("%.0f / %.0f", r.P50Ms, r.P99Ms) })
			row("5xx or unanswered", func(r Run) string { return strconv.FormatInt(r.Errors, 10) })
			row("the cluster's CPU per order over its idle rate, ms", func(r Run) string { return fmt.Sprintf("%.0f", r.CPUPerOrderMs) })
		} else {
			row("start-up, s (fresh folder: schemas, namespace, workers)", func(r Run) string { return fmt.Sprintf("%.0f", r.StartupSecs) })
		}
		w("\n")
	}
	w("%s\n", reading(runs))
	w("%s\n", endMarker)
	return b.String()
}

// reading says, from the figures, what more shards cost idle and under load against the first count.
func reading(runs []Run) string {
	if len(runs) < 2 {
		return ""
	}
	base := runs[0]
	var parts []string
	for _, r := range runs[1:] {
		parts = append(parts, fmt.Sprintf("%d shards idled at %.1f %% of one CPU against %d shards' %.1f %% (history "+
			"%.1f %% against %.1f %%, %.0f MB against %.0f MB resident) and took %.0f ms of CPU per order against %.0f ms at "+
			"%.1f against %.1f orders/s", r.Shards, r.Idle.Stack, base.Shards, base.Idle.Stack, r.Idle.Pct["temporal-history"],
			base.Idle.Pct["temporal-history"], r.Idle.HistoryRSSMB, base.Idle.HistoryRSSMB, r.CPUPerOrderMs, base.CPUPerOrderMs,
			r.PerSecond, base.PerSecond))
	}
	var disturbed []string
	for _, r := range runs {
		for _, x := range []struct {
			name string
			win  Window
		}{{"idle", r.Idle}, {"load", r.Load}} {
			if x.win.Other > disturbedShare {
				disturbed = append(disturbed, fmt.Sprintf("%d shards' %s window (other processes %.0f %% of the machine)",
					r.Shards, x.name, 100*x.win.Other))
			}
		}
	}
	s := "Read from these runs: " + strings.Join(parts, "; ") + "."
	if len(disturbed) > 0 {
		s += " Disturbed: " + strings.Join(disturbed, ", ") + "; those figures hold what the cluster kept for itself on a shared machine."
	}
	return s
}
