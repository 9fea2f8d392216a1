// Command benchreserve is `make bench`: it measures the reserve path (BenchmarkReserve in
// ./inventory) and, as its baseline, pgbench running the same reserve-and-insert transaction on
// the same schema, on one private cluster in the same run, and writes both into
// docs/benchmarks.md. A figure without a baseline measured beside it says little about the code.
//
// It fails when something does not run; it does not fail when the Go path misses its target,
// because the figures are reported as they are.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/marketplace/checkout/internal/benchdata"
	"github.com/marketplace/checkout/internal/pgserver"
	"github.com/marketplace/checkout/migrations"
)

// target is the product's bar: the Go path reaches at least this share of pgbench's tps.
const target = 0.8

const (
	startMarker = "<!-- reserve-bench:start -->"
	endMarker   = "<!-- reserve-bench:end -->"
)

// pgbenchTxn is the design's reserve-and-insert transaction (the conditional UPDATE and the
// reservation insert that the engine's reserve_order_lines runs per line), with its parameters
// fixed as the benchmark uses them. Order ids come from a sequence so that the unique
// (order_id, sku_id, warehouse_id) never fires.
const pgbenchTxn = `BEGIN;
WITH r AS (UPDATE inventory SET reserved = reserved + 1, version = version + 1 WHERE sku_id = :sku AND warehouse_id = 1 AND on_hand - reserved >= 1 RETURNING sku_id, warehouse_id) INSERT INTO stock_reservations (order_id, sku_id, warehouse_id, quantity, expires_at) SELECT nextval('bench_order_seq'), sku_id, warehouse_id, 1, now() + interval '15 minutes' FROM r;
COMMIT;
`

type benchCase struct {
	shape   string // hot or spread, as the sub-benchmark is named
	skus    int
	clients int
}

func (c benchCase) name() string { return fmt.Sprintf("%s/clients=%d", c.shape, c.clients) }

func (c benchCase) script() string {
	set := fmt.Sprintf(`\set sku %d`, benchdata.FirstSKU)
	if c.skus > 1 {
		set = fmt.Sprintf(`\set sku random(%d, %d)`, benchdata.FirstSKU, benchdata.FirstSKU+c.skus-1)
	}
	return set + "\n" + pgbenchTxn
}

type result struct {
	benchCase
	pgTPS, pgLatencyMs   float64
	pgTxns               int64
	goRate, goP50, goP99 float64
	// Shares of the machine's CPU that processes outside the benchmark took during each side's run.
	pgOther, goOther float64
}

// bench is what every run needs.
type bench struct {
	srv        *pgserver.Server
	postmaster int
	pgbench    string
	testBin    string // the compiled ./inventory test binary
	pkgDir     string // where go test would run that binary
	tmp        string
	seconds    int
}

func main() {
	seconds := flag.Int("seconds", 10, "duration of each measured run, for pgbench (-T) and go test (-benchtime)")
	out := flag.String("out", "docs/benchmarks.md", "file to write the section into, relative to the module root")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *seconds, *out); err != nil {
		fmt.Fprintln(os.Stderr, "benchreserve:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, seconds int, out string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	bindir, err := pgserver.BinDir()
	if err != nil {
		return err
	}
	b := &bench{seconds: seconds, pkgDir: filepath.Join(root, "inventory")}
	b.pgbench = filepath.Join(bindir, "pgbench")
	if _, err := os.Stat(b.pgbench); err != nil {
		if b.pgbench, err = exec.LookPath("pgbench"); err != nil {
			return errors.New("pgbench not found next to the server binaries nor on PATH")
		}
	}
	load, _ := os.ReadFile("/proc/loadavg")

	if b.tmp, err = os.MkdirTemp("", "checkout-bench-"); err != nil {
		return err
	}
	defer os.RemoveAll(b.tmp)
	// Built once, so that no run measures the compiler; running it is what `go test` does.
	b.testBin = filepath.Join(b.tmp, "inventory.test")
	logf("go test -c -o %s ./inventory", b.testBin)
	if _, _, err := command(ctx, root, nil, "go", "test", "-c", "-o", b.testBin, "./inventory"); err != nil {
		return fmt.Errorf("build the inventory benchmark: %w", err)
	}
	logf("starting a private PostgreSQL cluster (durable settings) in %s", b.tmp)
	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	b.srv, err = pgserver.Start(startCtx, pgserver.Options{Dir: filepath.Join(b.tmp, "data")})
	cancel()
	if err != nil {
		return err
	}
	defer b.srv.Stop()
	if b.postmaster, err = postmasterPID(b.srv.Dir); err != nil {
		return err
	}

	cases := []benchCase{{"hot", 1, 8}, {"hot", 1, 50}, {"spread", 1000, 8}, {"spread", 1000, 50}}
	results := make([]result, len(cases))
	for i, c := range cases {
		r := &results[i]
		r.benchCase = c
		// Alternate which side runs first, so that neither always gets the fresher machine.
		pg := func() error {
			return steady(ctx, r, b.runPgbench, func(x *result) float64 { return x.pgOther })
		}
		gb := func() error {
			return steady(ctx, r, func(ctx context.Context, x *result, _ int) error { return b.runGoBench(ctx, x) },
				func(x *result) float64 { return x.goOther })
		}
		steps := []func() error{pg, gb}
		if i%2 == 1 {
			steps[0], steps[1] = steps[1], steps[0]
		}
		for _, step := range steps {
			if err := step(); err != nil {
				return fmt.Errorf("%s: %w", c.name(), err)
			}
		}
	}

	facts, err := machineFacts(ctx, b.srv)
	if err != nil {
		return err
	}
	if f := strings.Fields(string(load)); len(f) > 0 {
		facts.loadBefore = f[0]
	}
	section := render(results, facts, seconds)
	fmt.Println(table(results))
	fmt.Println(verdict(results))
	if d := disturbance(results); d != "" {
		fmt.Println(d)
	}
	path := out
	if !filepath.IsAbs(path) {
		path = filepath.Join(root, out)
	}
	if err := writeSection(path, section); err != nil {
		return err
	}
	logf("wrote %s", path)
	return nil
}

// maxRuns bounds the runs of one side of one case; see steady.
const maxRuns = 3

// steady runs one side of a case again while other processes take more than disturbedShare of the
// CPUs (at most maxRuns runs), and keeps the least disturbed run: on a shared machine one busy
// neighbour would otherwise decide the ratio.
func steady(ctx context.Context, r *result, run func(ctx context.Context, x *result, attempt int) error, other func(*result) float64) error {
	var best result
	for attempt := 1; attempt <= maxRuns; attempt++ {
		x := *r
		if err := run(ctx, &x, attempt); err != nil {
			return err
		}
		if attempt == 1 || other(&x) < other(&best) {
			best = x
		}
		if other(&best) <= disturbedShare {
			break
		}
		if attempt < maxRuns {
			logf("%s: other processes took %.0f%% of the CPUs during that run; running it again",
				r.name(), 100*other(&x))
		}
	}
	*r = best
	return nil
}

// runPgbench measures the baseline on a fresh database seeded like the Go side's.
func (b *bench) runPgbench(ctx context.Context, r *result, attempt int) error {
	dbname := fmt.Sprintf("pgbench_%s_%d_%d", r.shape, r.clients, attempt)
	if err := b.srv.CreateDatabase(ctx, dbname, ""); err != nil {
		return err
	}
	if _, err := migrations.Up(ctx, b.srv.URL(dbname)); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, b.srv.URL(dbname))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if err := benchdata.Seed(ctx, conn, r.skus); err != nil {
		return err
	}
	for _, s := range []struct {
		sql  string
		args []any
	}{
		{"CREATE SEQUENCE bench_order_seq", nil},
		{"CHECKPOINT", nil},
	} {
		if _, err := conn.Exec(ctx, s.sql, s.args...); err != nil {
			return fmt.Errorf("seed pgbench database: %w", err)
		}
	}
	script := filepath.Join(b.tmp, fmt.Sprintf("reserve_%s.sql", r.shape))
	if err := os.WriteFile(script, []byte(r.script()), 0o644); err != nil {
		return err
	}
	// One pgbench thread per CPU (as many as clients at most), as the Go side has GOMAXPROCS.
	threads := min(r.clients, runtime.NumCPU())
	args := []string{"-h", "127.0.0.1", "-p", strconv.Itoa(b.srv.Port), "-U", pgserver.Superuser,
		"-n", "-M", "prepared", "-c", strconv.Itoa(r.clients), "-j", strconv.Itoa(threads),
		"-T", strconv.Itoa(b.seconds), "-f", script, dbname}
	logf("%s: pgbench -n -M prepared -c %d -j %d -T %d -f reserve_%s.sql",
		r.name(), r.clients, threads, b.seconds, r.shape)
	output, other, err := b.measured(ctx, "", nil, b.pgbench, args...)
	if err != nil {
		return fmt.Errorf("pgbench: %w", err)
	}
	r.pgOther = other
	if r.pgTPS, err = match(output, `(?m)^tps = ([0-9.]+) \(without initial connection time\)`); err != nil {
		return err
	}
	if r.pgLatencyMs, err = match(output, `(?m)^latency average = ([0-9.]+) ms`); err != nil {
		return err
	}
	txns, err := match(output, `(?m)^number of transactions actually processed: ([0-9]+)`)
	if err != nil {
		return err
	}
	r.pgTxns = int64(txns)
	if failed, err := match(output, `(?m)^number of failed transactions: ([0-9]+)`); err == nil && failed > 0 {
		return fmt.Errorf("pgbench: %v failed transactions", failed)
	}
	// Every counted transaction must have reserved a unit, or pgbench measured something cheaper.
	var rows, reserved int64
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM stock_reservations WHERE status = 'ACTIVE'),
		(SELECT coalesce(sum(reserved), 0) FROM inventory)`).Scan(&rows, &reserved); err != nil {
		return err
	}
	if rows != r.pgTxns || reserved != r.pgTxns {
		return fmt.Errorf("pgbench counted %d transactions but left %d reservation rows and %d reserved units",
			r.pgTxns, rows, reserved)
	}
	return nil
}

// runGoBench runs one case of BenchmarkReserve on the same cluster through TEST_PG_URL.
func (b *bench) runGoBench(ctx context.Context, r *result) error {
	if err := checkpoint(ctx, b.srv); err != nil {
		return err
	}
	pattern := fmt.Sprintf("^BenchmarkReserve$/^%s$/^clients=%d$", r.shape, r.clients)
	logf("%s: go test ./inventory -run '^$' -bench '%s' -benchtime %ds -count 1", r.name(), pattern, b.seconds)
	output, other, err := b.measured(ctx, b.pkgDir, []string{"TEST_PG_URL=" + b.srv.URL("postgres")}, b.testBin,
		"-test.run", "^$", "-test.bench", pattern, "-test.benchtime", fmt.Sprintf("%ds", b.seconds), "-test.count", "1")
	if err != nil {
		return fmt.Errorf("go test: %w", err)
	}
	r.goOther = other
	line := ""
	prefix := "BenchmarkReserve/" + r.name()
	for l := range strings.Lines(output) {
		if rest, ok := strings.CutPrefix(l, prefix); ok && (strings.HasPrefix(rest, "-") || strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, "\t")) {
			line = l
		}
	}
	if line == "" {
		return fmt.Errorf("no result line for %s in go test output", prefix)
	}
	f := strings.Fields(line)
	metrics := map[string]float64{}
	for i := 2; i+1 < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return fmt.Errorf("unreadable metric %q in %q", f[i], line)
		}
		metrics[f[i+1]] = v
	}
	for unit, dst := range map[string]*float64{"reservations/s": &r.goRate, "p50-ms": &r.goP50, "p99-ms": &r.goP99} {
		v, ok := metrics[unit]
		if !ok {
			return fmt.Errorf("metric %s missing from %q", unit, line)
		}
		*dst = v
	}
	return nil
}

// checkpoint starts each measured run with no dirty backlog, so neither side pays for the
// other's writes.
func checkpoint(ctx context.Context, srv *pgserver.Server) error {
	conn, err := pgx.Connect(ctx, srv.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CHECKPOINT")
	return err
}

// measured runs one side and also returns the share of the machine's CPU that went to neither
// the cluster, this program nor that side while it ran. On a shared machine that share says
// whether the row can be trusted.
func (b *bench) measured(ctx context.Context, dir string, env []string, name string, args ...string) (string, float64, error) {
	before, err := b.cpu()
	if err != nil {
		return "", 0, err
	}
	output, state, err := command(ctx, dir, env, name, args...)
	if err != nil {
		return output, 0, err
	}
	after, err := b.cpu()
	if err != nil {
		return output, 0, err
	}
	var client float64
	if ru, ok := state.SysUsage().(*syscall.Rusage); ok {
		client = float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9 * userHZ
	}
	total := after.total - before.total
	if total <= 0 {
		return output, 0, nil
	}
	other := (after.busy - before.busy) - (after.ours - before.ours) - client
	return output, max(other, 0) / total, nil
}

// userHZ is the unit of /proc's CPU times: fixed at 100 a second on Linux.
const userHZ = 100

type cpuTimes struct {
	busy, total float64 // the whole machine; busy counts time stolen by the hypervisor
	ours        float64 // the cluster (postmaster, live and reaped children) and this program
}

func (b *bench) cpu() (cpuTimes, error) {
	var t cpuTimes
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return t, err
	}
	line, _, _ := strings.Cut(string(stat), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return t, fmt.Errorf("unreadable /proc/stat line %q", line)
	}
	// user nice system idle iowait irq softirq steal; guest time is already in user.
	for i, v := range f[1:9] {
		n, _ := strconv.ParseFloat(v, 64)
		t.total += n
		if i != 3 && i != 4 {
			t.busy += n
		}
	}
	pm, err := procTimes(b.postmaster)
	if err != nil {
		return t, err
	}
	t.ours = pm.utime + pm.stime + pm.cutime + pm.cstime
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return t, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, err := procTimes(pid); err == nil && p.ppid == b.postmaster {
			t.ours += p.utime + p.stime
		}
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		t.ours += float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9 * userHZ
	}
	return t, nil
}

type procStat struct {
	ppid                         int
	utime, stime, cutime, cstime float64
}

func procTimes(pid int) (procStat, error) {
	var p procStat
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return p, err
	}
	// The command name may hold spaces; the fields after it start with the state (field 3).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return p, fmt.Errorf("unreadable /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return p, fmt.Errorf("unreadable /proc/%d/stat", pid)
	}
	p.ppid, _ = strconv.Atoi(f[1])
	vals := []*float64{&p.utime, &p.stime, &p.cutime, &p.cstime}
	for k, dst := range vals {
		*dst, _ = strconv.ParseFloat(f[11+k], 64)
	}
	return p, nil
}

func postmasterPID(dataDir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	first, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(first))
}

// command runs a program, echoing its output to stderr as it comes, and returns the output.
func command(ctx context.Context, dir string, env []string, name string, args ...string) (string, *os.ProcessState, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var buf bytes.Buffer
	w := io.MultiWriter(&buf, os.Stderr)
	cmd.Stdout, cmd.Stderr = w, w
	err := cmd.Run()
	return buf.String(), cmd.ProcessState, err
}

func match(s, expr string) (float64, error) {
	m := regexp.MustCompile(expr).FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("pgbench output has no match for %s", expr)
	}
	return strconv.ParseFloat(m[1], 64)
}

type facts struct {
	cpus                          int
	cpuModel, memory, kernel      string
	postgres, goVersion, date     string
	fsync, syncCommit, sharedBufs string
	maxConnections, walSyncMethod string
	loadBefore                    string
}

func machineFacts(ctx context.Context, srv *pgserver.Server) (facts, error) {
	f := facts{cpus: runtime.NumCPU(), date: time.Now().UTC().Format("2006-01-02 15:04 UTC")}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		if m := regexp.MustCompile(`(?m)^model name\s*:\s*(.+)$`).FindSubmatch(b); m != nil {
			f.cpuModel = strings.TrimSpace(string(m[1]))
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if m := regexp.MustCompile(`(?m)^MemTotal:\s*([0-9]+) kB`).FindSubmatch(b); m != nil {
			kb, _ := strconv.ParseFloat(string(m[1]), 64)
			f.memory = fmt.Sprintf("%.0f GiB RAM", kb/1024/1024)
		}
	}
	out, err := exec.CommandContext(ctx, "uname", "-r").Output()
	if err != nil {
		return f, fmt.Errorf("uname -r: %w", err)
	}
	f.kernel = strings.TrimSpace(string(out))
	out, err = exec.CommandContext(ctx, "go", "version").Output()
	if err != nil {
		return f, fmt.Errorf("go version: %w", err)
	}
	f.goVersion = strings.TrimPrefix(strings.TrimSpace(string(out)), "go version ")
	conn, err := pgx.Connect(ctx, srv.URL("postgres"))
	if err != nil {
		return f, err
	}
	defer conn.Close(ctx)
	for name, dst := range map[string]*string{"server_version": &f.postgres, "fsync": &f.fsync,
		"synchronous_commit": &f.syncCommit, "shared_buffers": &f.sharedBufs,
		"max_connections": &f.maxConnections, "wal_sync_method": &f.walSyncMethod} {
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(dst); err != nil {
			return f, err
		}
	}
	return f, nil
}

func (r result) ratio() float64 {
	if r.pgTPS == 0 {
		return 0
	}
	return r.goRate / r.pgTPS
}

func table(rs []result) string {
	var b strings.Builder
	b.WriteString("| case | clients | pgbench tps | Go reserve path reservations/s | ratio Go/pgbench | Go p50 ms | Go p99 ms |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "| %s | %d | %.0f | %.0f | %.2f | %.2f | %.2f |\n",
			r.shape, r.clients, r.pgTPS, r.goRate, r.ratio(), r.goP50, r.goP99)
	}
	return b.String()
}

func verdict(rs []result) string {
	var met, missed []string
	for _, r := range rs {
		s := fmt.Sprintf("%s (%.2f×)", r.name(), r.ratio())
		if r.ratio() >= target {
			met = append(met, s)
		} else {
			missed = append(missed, s)
		}
	}
	switch {
	case len(missed) == 0:
		return fmt.Sprintf("Target (Go ≥ %.1f× pgbench) met in every case: %s.", target, strings.Join(met, ", "))
	case len(met) == 0:
		return fmt.Sprintf("Target (Go ≥ %.1f× pgbench) missed in every case: %s.", target, strings.Join(missed, ", "))
	default:
		return fmt.Sprintf("Target (Go ≥ %.1f× pgbench) met for %s; missed for %s.", target,
			strings.Join(met, ", "), strings.Join(missed, ", "))
	}
}

func render(rs []result, f facts, seconds int) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("%s\n## Reserve path against pgbench\n\n", startMarker)
	w("Written by `make bench` (internal/tools/benchreserve); running it again replaces this section.\n\n")
	w("- Command: `make bench`, measured %s.\n", f.date)
	w("- Machine: %d CPUs (%s), %s, Linux %s; PostgreSQL %s; %s; 1-minute load average %s when the run began.\n",
		f.cpus, f.cpuModel, f.memory, f.kernel, f.postgres, f.goVersion, f.loadBefore)
	w("- Server: one private cluster on loopback TCP for both sides, durable settings (fsync=%s, "+
		"synchronous_commit=%s, wal_sync_method=%s), shared_buffers=%s, max_connections=%s; a fresh "+
		"database per run, checkpointed before it. Clients and server share the machine's CPUs.\n",
		f.fsync, f.syncCommit, f.walSyncMethod, f.sharedBufs, f.maxConnections)
	w("- Data: warehouses 1–3 and seller 42; hot is one SKU with %d units in warehouse 1; spread is "+
		"1000 SKUs with as many each, every order a uniformly random one. stock_reservations starts "+
		"with %d confirmed reservations of past orders and every table is analysed, so the planner "+
		"sees a table in use. Every order reserves 1 unit of 1 SKU; stock never runs out, and each "+
		"side checks afterwards that every counted transaction left one ACTIVE reservation and one "+
		"reserved unit.\n", benchdata.Stock, benchdata.History)
	w("- Go: `Engine.Reserve` through a pgx pool of clients+2 connections (opened before timing), "+
		"exactly `clients` goroutines sharing b.N orders with unique ids; latency is per Reserve call, "+
		"as the caller sees it. Per case: `go test ./inventory -run '^$' -bench "+
		"'^BenchmarkReserve$/^<case>$/^clients=<clients>$' -benchtime %ds -count 1` (the test "+
		"binary is built once beforehand).\n", seconds)
	w("- pgbench: the design's conditional UPDATE … INSERT (what the engine runs per line inside "+
		"`reserve_order_lines`), in BEGIN … COMMIT, "+
		"order ids from a sequence; `pgbench -n -M prepared -c <clients> -j min(clients, CPUs) -T %d "+
		"-f reserve_<case>.sql`, tps without connection time.\n", seconds)
	w("- Fairness: the two sides alternate which runs first per case. A run during which other "+
		"processes took more than %.0f%% of the CPUs is run again (at most %d runs) and the least "+
		"disturbed one is kept; the share kept is listed below the table.\n\n", 100*disturbedShare, maxRuns)
	b.WriteString(table(rs))
	w("\npgbench latency average:")
	for i, r := range rs {
		w(" %s %.2f ms%s", r.name(), r.pgLatencyMs, listSep(i, len(rs)))
	}
	w("\n\nCPU taken by other processes on the machine during each run (pgbench / Go):")
	for i, r := range rs {
		w(" %s %.0f%% / %.0f%%%s", r.name(), 100*r.pgOther, 100*r.goOther, listSep(i, len(rs)))
	}
	w("\n\n%s", verdict(rs))
	if d := disturbance(rs); d != "" {
		w(" %s", d)
	}
	w("\n\nThe pgbench transaction (spread; hot sets `:sku` to %d):\n\n```sql\n%s```\n%s\n",
		benchdata.FirstSKU, rs[len(rs)-1].script(), endMarker)
	return b.String()
}

func listSep(i, n int) string {
	if i == n-1 {
		return "."
	}
	return ","
}

// disturbedShare is where other work on the machine makes a row's ratio unfair to one side.
const disturbedShare = 0.10

// disturbance names the cases whose runs other processes disturbed, or is empty.
func disturbance(rs []result) string {
	var names []string
	for _, r := range rs {
		if r.pgOther > disturbedShare || r.goOther > disturbedShare {
			names = append(names, r.name())
		}
	}
	if len(names) == 0 {
		return ""
	}
	return fmt.Sprintf("Other processes took more than %.0f%% of the CPUs even in the least disturbed "+
		"runs of %s, so those rows are not a fair reading: run `make bench` again on a quieter machine.",
		100*disturbedShare, strings.Join(names, ", "))
}

// writeSection replaces the marked section of path, or appends it, keeping everything else.
func writeSection(path, section string) error {
	old, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		old = []byte("# Benchmarks\n\nEvery figure here is measured on the machine named beside it, with a " +
			"baseline measured beside it on the same machine in the same run, so that the figure is " +
			"judged against that baseline rather than against numbers from elsewhere.\n")
	case err != nil:
		return err
	}
	text := string(old)
	start, end := strings.Index(text, startMarker), strings.Index(text, endMarker)
	switch {
	case start >= 0 && end > start:
		text = text[:start] + strings.TrimSuffix(section, "\n") + text[end+len(endMarker):]
	case start >= 0 || end >= 0:
		return fmt.Errorf("%s: unbalanced %s / %s markers", path, startMarker, endMarker)
	default:
		text = strings.TrimRight(text, "\n") + "\n\n" + section
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(text), 0o644)
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory: run from the module")
		}
		dir = parent
	}
}

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "benchreserve: "+format+"\n", a...)
}
