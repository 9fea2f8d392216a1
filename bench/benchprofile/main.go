// Command benchprofile says where an order's CPU goes, call by call: it profiles every server
// process of the dev stack with Linux perf while paid-at-once orders run one at a time, beside the
// same profile of empty workflows, and writes the "Where the CPU of an order goes" section of
// docs/benchmarks.md.
//
// perf samples every process on the machine; each sample is given to the stack's process it was
// taken in (PostgreSQL's backends by their postmaster). The Go processes (checkout, the Temporal
// dev server) keep frame pointers, so their stacks are whole and a call's share is inclusive, as
// pprof's cum. PostgreSQL's Debian build has none: its stacks are unwound from DWARF call frame
// information in a batch of its own. Each process's CPU per order comes from /proc, as `make
// bench-cost` reads it, with the idle stack's rate taken off; a call's milliseconds per order are
// its share of its process's samples times that.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/marketplace/checkout/internal/dev/benchkit"
	"github.com/marketplace/checkout/loadgen"
)

const (
	startMarker = "<!-- cpu-profile:start -->"
	endMarker   = "<!-- cpu-profile:end -->"
	holdTTL     = 15 * time.Second
	idleWindow  = 15 * time.Second
)

func main() {
	orders := flag.Int("orders", 300, "paid-at-once orders (and empty workflows) in each profiled batch")
	freq := flag.Int("freq", 499, "perf's samples per second per CPU")
	out := flag.String("out", "docs/benchmarks.md", "the document to write the section into")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if _, err := exec.LookPath("perf"); err != nil {
		log.Fatal("perf is not installed: apt-get install linux-perf")
	}
	if err := benchkit.ChdirModuleRoot(); err != nil {
		log.Fatal(err)
	}
	res, err := profile(ctx, *orders, *freq)
	if err != nil {
		log.Fatal(err)
	}
	section := render(res)
	fmt.Print(section)
	if *out != "" {
		if err := benchkit.WriteSection(*out, startMarker, endMarker, section); err != nil {
			log.Fatal(err)
		}
	}
}

// batch is one profiled batch: each process's CPU per order and its samples' tallies.
type batch struct {
	name   string
	n      int
	ms     map[string]float64
	tally  map[string]*tally
	other  float64
	window time.Duration
}

type result struct {
	started time.Time
	loadAvg float64
	freq    int
	parts   []string
	idle    map[string]float64
	floor   batch
	paid    batch
	pg      batch // PostgreSQL alone, DWARF stacks
}

func profile(ctx context.Context, n, freq int) (result, error) {
	res := result{started: time.Now().UTC(), loadAvg: benchkit.LoadAverage(), freq: freq}
	env := []string{"HOLD_TTL=" + holdTTL.String(), "PAYMENT_RECONCILER_EVERY=1h", "SWEEPER_EVERY=1h", "RECONCILER_EVERY=1h"}
	st, err := benchkit.StartStack(ctx, "benchprofile-", env...)
	if err != nil {
		return res, err
	}
	defer st.Stop()
	parts, err := benchkit.DevParts(st.Cmd.Process.Pid, st.Dir)
	if err != nil {
		return res, err
	}
	for _, p := range parts {
		res.parts = append(res.parts, p.Name)
	}
	floor, err := benchkit.StartFloor(st)
	if err != nil {
		return res, err
	}
	defer floor.Close()

	// Warm up: connections opened, caches filled, code paged in.
	if _, err := runOrders(ctx, st, 10, nil); err != nil {
		return res, err
	}
	for i := range 10 {
		if err := floor.Run(ctx, fmt.Sprintf("profile-warm-%d-%d", time.Now().UnixNano(), i)); err != nil {
			return res, err
		}
	}
	time.Sleep(5 * time.Second)
	a, _ := benchkit.Read(parts)
	time.Sleep(idleWindow)
	b, _ := benchkit.Read(parts)
	res.idle = benchkit.Rates(a, b)
	log.Printf("idle stack (jiffies a second): %v", res.idle)

	dir := filepath.Join(st.Dir, "perf")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	fp := []string{"-a", "-g", "-F", fmt.Sprint(freq)}
	res.floor, err = profiled(ctx, parts, res.idle, filepath.Join(dir, "floor.data"), fp, "floor", func(start func()) (int, error) {
		start()
		for i := range n {
			if err := floor.Run(ctx, fmt.Sprintf("profile-floor-%d-%d", time.Now().UnixNano(), i)); err != nil {
				return 0, err
			}
		}
		time.Sleep(2 * time.Second)
		return n, nil
	})
	if err != nil {
		return res, err
	}
	paid := func(start func()) (int, error) {
		n, err := runOrders(ctx, st, n, start)
		time.Sleep(3 * time.Second) // the orders' events relayed and consumed
		return n, err
	}
	if res.paid, err = profiled(ctx, parts, res.idle, filepath.Join(dir, "paid.data"), fp, "paid-at-once", paid); err != nil {
		return res, err
	}
	// PostgreSQL's processes alone, stacks from DWARF: its backends are the pool's, open by now.
	pm := parts[slices.IndexFunc(parts, func(p benchkit.Part) bool { return p.Name == "postgres" })]
	pids := append([]int{pm.PID}, descendants(pm.PID)...)
	dwarf := []string{"-g", "--call-graph", "dwarf,16384", "-F", fmt.Sprint(freq), "-p", joinInts(pids)}
	if res.pg, err = profiled(ctx, parts, res.idle, filepath.Join(dir, "pg.data"), dwarf, "paid-at-once", paid); err != nil {
		return res, err
	}
	// Unwinding from DWARF copies each sampled stack, which the sampled process pays for: its
	// shares are taken with the frame-pointer batch's CPU per order.
	res.pg.ms = res.paid.ms
	return res, nil
}

// runOrders places n paid-at-once orders, one shopper at a time; start is called as they begin.
func runOrders(ctx context.Context, st *benchkit.Stack, n int, start func()) (int, error) {
	cfg := loadgen.Defaults()
	cfg.BaseURL, cfg.MetricsURL, cfg.JWTSecret = st.Base, st.Metrics, st.Secret
	cfg.Shoppers, cfg.Orders, cfg.Duration = 1, n, 10*time.Minute
	cfg.Mix = loadgen.Mix{loadgen.ScenarioOK: 1}
	cfg.RepeatShare, cfg.HotShare = 0, 0
	cfg.HoldTTL, cfg.WaitAbandoned, cfg.Settle = holdTTL, true, time.Minute
	cfg.OnPhase = func(p string) {
		if p == loadgen.PhaseLoad && start != nil {
			start()
		}
	}
	rep, err := loadgen.Run(ctx, cfg)
	if err != nil {
		return 0, err
	}
	if rep.Orders == 0 {
		return 0, fmt.Errorf("no order placed")
	}
	return int(rep.Orders), nil
}

// profiled runs work under perf record with args, reading the parts' CPU over the same window, and
// tallies the samples by part.
func profiled(ctx context.Context, parts []benchkit.Part, idle map[string]float64, file string, args []string,
	name string, work func(start func()) (int, error)) (batch, error) {
	bt := batch{name: name, tally: map[string]*tally{}}
	var perf *exec.Cmd
	var from benchkit.Reading
	var startErr error
	start := func() {
		perf = exec.CommandContext(ctx, "perf", append([]string{"record", "-q", "-o", file}, args...)...)
		perf.Stderr = os.Stderr
		if startErr = perf.Start(); startErr != nil {
			return
		}
		time.Sleep(500 * time.Millisecond) // perf is recording
		from, _ = benchkit.Read(parts, perf.Process.Pid)
	}
	n, err := work(start)
	if startErr != nil {
		return bt, fmt.Errorf("perf record: %w", startErr)
	}
	if perf == nil {
		return bt, fmt.Errorf("%s: the batch never began", name)
	}
	to, _ := benchkit.Read(parts, perf.Process.Pid)
	_ = perf.Process.Signal(syscall.SIGINT)
	_ = perf.Wait()
	if err != nil {
		return bt, err
	}
	bt.n, bt.window = n, to.At.Sub(from.At)
	bt.ms = benchkit.PerOrder(from, to, idle, n)
	bt.other = benchkit.OtherShare(from, to)
	owner := owners(parts)
	cmd := exec.CommandContext(ctx, "perf", "script", "-i", file, "-F", "comm,pid,ip,sym,dso")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return bt, err
	}
	if err := cmd.Start(); err != nil {
		return bt, err
	}
	perr := parseScript(stdout, func(s sample) {
		part, ok := owner[s.pid]
		if !ok && s.comm == "postgres" {
			part, ok = "postgres", true // a backend that came and went during the batch
		}
		if !ok {
			return
		}
		t := bt.tally[part]
		if t == nil {
			t = newTally()
			bt.tally[part] = t
		}
		t.add(s, groupsOf(part), prefixOf(part), innerOf(part))
	})
	if err := cmd.Wait(); err != nil {
		return bt, fmt.Errorf("perf script: %w", err)
	}
	log.Printf("%s (%s): %d orders in %s; CPU ms per order %v", name, filepath.Base(file), n, bt.window, bt.ms)
	return bt, perr
}

// owners maps every process of the parts (a tree's descendants too) to its part.
func owners(parts []benchkit.Part) map[int]string {
	m := map[int]string{}
	for _, p := range parts {
		m[p.PID] = p.Name
		if p.Tree {
			for _, c := range descendants(p.PID) {
				m[c] = p.Name
			}
		}
	}
	return m
}

// descendants are pid's children, theirs, and so on.
func descendants(pid int) []int {
	kids := map[int][]int{}
	for _, p := range benchkit.PIDs() {
		if st, err := benchkit.ProcTimes(p); err == nil {
			kids[st.PPID] = append(kids[st.PPID], p)
		}
	}
	var out []int
	var walk func(int)
	walk = func(p int) {
		for _, c := range kids[p] {
			out = append(out, c)
			walk(c)
		}
	}
	walk(pid)
	return out
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}
