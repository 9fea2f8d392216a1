// Command benchreserve is `make bench`: it measures the reserve path (BenchmarkReserve in
// ./inventory, with combining off and on) and, as its baseline, pgbench running the same
// reserve-and-insert transaction on the same schema, on one private cluster in the same run, and
// writes both into docs/benchmarks.md. A figure without a baseline measured beside it says little
// about the code. It also measures the confirm path on the hot row (BenchmarkConfirm, combining
// off and on), each side the other's baseline.
//
// For the hot row it also runs pgbench over a few rows instead of one: the ceiling of splitting
// the row into logical buckets, the design the engine did not take, measured beside the one it did.
//
// With -profile N it prints instead where one combined batch of N orders spends its time inside
// PostgreSQL, statement by statement, beside pgbench's batched baseline of the same size; with
// -profile 1, where one order with combining off does, beside pgbench's one-order transaction.
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
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/marketplace/checkout/internal/dev/benchdata"
	"github.com/marketplace/checkout/internal/dev/benchkit"
	"github.com/marketplace/checkout/internal/dev/pgserver"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/migrations"
)

// target is the product's bar: the Go path reaches at least this share of pgbench's tps.
const target = 0.8

// hotTarget is the hot-SKU bar: on one row, at hotTargetClients, the default (combining) path
// serves at least this multiple of pgbench's one-row tps.
const (
	hotTarget        = 3.0
	hotTargetClients = 50
)

// bucketRows is how many rows the pgbench bucket reference spreads the hot SKU's load over.
const bucketRows = 8

// spreadSKUs is the spread case's SKU count.
const spreadSKUs = 1000

const (
	startMarker = "<!-- reserve-bench:start -->"
	endMarker   = "<!-- reserve-bench:end -->"
)

// pgbenchTxn is the design's reserve-and-insert transaction (the conditional UPDATE and the
// reservation insert that reserve_order runs per line), with its parameters fixed as the benchmark
// uses them. Order ids come from a sequence so that the unique (order_id, sku_id, warehouse_id)
// never fires.
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

// pgbenchBatchTxn is the same transaction for :batch orders at once, as reserve_orders commits a
// combined batch: one conditional UPDATE of the row by the batch's units, one reservation row per
// order.
const pgbenchBatchTxn = `BEGIN;
WITH r AS (UPDATE inventory SET reserved = reserved + :batch, version = version + 1 WHERE sku_id = :sku AND warehouse_id = 1 AND on_hand - reserved >= :batch RETURNING sku_id, warehouse_id) INSERT INTO stock_reservations (order_id, sku_id, warehouse_id, quantity, expires_at) SELECT nextval('bench_order_seq'), sku_id, warehouse_id, 1, now() + interval '15 minutes' FROM r, generate_series(1, :batch);
COMMIT;
`

// maxBatchOrders is the engine's bound on one combined batch (inventory's maxBatchOrders).
const maxBatchOrders = 256

// batchedSize is the orders per transaction of the batched baseline: the engine's mean batch in
// its run beside it, or, when the run reported none, min(clients, maxBatchOrders), the size its
// batches reach when every client waits.
func batchedSize(mean float64, clients int) int {
	if n := int(math.Round(mean)); n >= 1 {
		return min(n, maxBatchOrders)
	}
	return min(clients, maxBatchOrders)
}

// bestClients are the client counts pgbench runs the one-row transaction at to find its best.
var bestClients = []int{1, 2, 4, 8, 16, 32}

// script is the pgbench transaction on one of skus rows, for batch orders at a time (1: one).
func script(skus, batch int) string {
	if batch > 1 {
		return scriptVars(skus, batch) + pgbenchBatchTxn
	}
	return scriptVars(skus, batch) + pgbenchTxn
}

// scriptVars are a pgbench script's variables: :sku, one of skus rows (the first when one), and
// :batch when there is more than one order a transaction.
func scriptVars(skus, batch int) string {
	set := fmt.Sprintf("\\set sku %d\n", benchdata.FirstSKU)
	if skus > 1 {
		set = fmt.Sprintf("\\set sku random(%d, %d)\n", benchdata.FirstSKU, benchdata.FirstSKU+skus-1)
	}
	if batch > 1 {
		set += fmt.Sprintf("\\set batch %d\n", batch)
	}
	return set
}

// pgRun is one pgbench run; other is the share of the machine's CPU that processes outside the
// benchmark took while it ran.
type pgRun struct {
	tps, latencyMs float64
	txns           int64
	other          float64
	// clientCPU is pgbench's own CPU per order, in microseconds (its connecting included).
	clientCPU float64
	// clients and batch are what the run used: its connections, and orders per transaction.
	clients, batch int
}

// rate is the run's orders a second: its transactions times the orders in each.
func (r pgRun) rate() float64 { return r.tps * float64(max(r.batch, 1)) }

// goRun is one run of a BenchmarkReserve or BenchmarkConfirm case.
type goRun struct {
	rate, p50, p99 float64
	other          float64
	// clientCPU is the benchmark process's CPU per order over the timed calls, in microseconds:
	// the engine, pgx and the callers.
	clientCPU float64
	// batch is the mean orders per combined batch (0: none combined).
	batch float64
}

type result struct {
	benchCase
	pg pgRun
	// buckets is pgbench over bucketRows rows of the hot SKU's stock (hot cases only).
	buckets pgRun
	// batched is pgbench on the hot row committing as the combining engine does: one connection,
	// as many orders per transaction as the engine's batches held (batchedSize), one transaction at
	// a time on the row (hot cases only): the row's limit for batches of that size.
	batched pgRun
	// off and on are the Go reserve path with combining off (each order its own transaction)
	// and on (the default).
	off, on goRun
}

// confirmResult is one client count of BenchmarkConfirm on the hot row: every confirm its own
// transaction (off) and the default engine, which combines them (on).
type confirmResult struct {
	clients int
	off, on goRun
}

// confirmClients are the client counts BenchmarkConfirm runs at.
var confirmClients = []int{50, 200}

// bench is what every run needs.
type bench struct {
	srv        *pgserver.Server
	postmaster int
	pgbench    string
	testBin    string // the compiled ./inventory test binary
	pkgDir     string // where go test would run that binary
	tmp        string
	seconds    int
	// rounds is how many times every case is measured; round is the one under way (from 1).
	rounds, round int
}

func main() {
	seconds := flag.Int("seconds", 5, "duration of each measured run, for pgbench (-T) and go test (-benchtime)")
	rounds := flag.Int("rounds", 3, "times every case is measured; the tables show each figure's median, the ratios their spread")
	out := flag.String("out", "docs/benchmarks.md", "file to write the section into, relative to the module root")
	partsAt := flag.Int("parts", 0, "instead of the benchmark, measure a spread reservation with combining off part by part (pgbench's statement, then one guarantee more at a time, to the engine) beside pgbench, at this many clients, and print the table")
	profileBatch := flag.Int("profile", 0, "instead of the benchmark, print where one combined batch of this many orders spends its time in PostgreSQL, statement by statement, beside pgbench's batched baseline (1: one order with combining off, beside pgbench's one-order transaction)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch {
	case *partsAt > 0:
		err = parts(ctx, *seconds, *rounds, *partsAt)
	case *profileBatch > 0:
		err = profile(ctx, *seconds, max(*rounds, 1), *profileBatch)
	default:
		err = run(ctx, *seconds, *rounds, *out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchreserve:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, seconds, rounds int, out string) error {
	root, err := benchkit.ModuleRoot()
	if err != nil {
		return err
	}
	loadBefore := fmt.Sprintf("%.2f", benchkit.LoadAverage())
	b, done, err := setUp(ctx, root, seconds, rounds)
	if err != nil {
		return err
	}
	defer done()

	var measured []round
	for n := range b.rounds {
		b.round = n + 1
		logf("round %d of %d", b.round, b.rounds)
		r, err := b.measureRound(ctx)
		if err != nil {
			return err
		}
		measured = append(measured, r)
	}
	results, confirms, best := medians(measured)

	facts, err := machineFacts(ctx, b.srv)
	if err != nil {
		return err
	}
	facts.loadBefore, facts.loadAfter = loadBefore, fmt.Sprintf("%.2f", benchkit.LoadAverage())
	section := render(results, confirms, best, facts, seconds, measured)
	fmt.Println(table(results))
	fmt.Println(confirmTable(confirms))
	fmt.Println(hotTable(results))
	fmt.Println(fairTable(results, best))
	for _, v := range append(verdicts(results), fairVerdict(results, best), spreadVerdict(results)) {
		fmt.Println(v)
	}
	if d := disturbance(results); d != "" {
		fmt.Println(d)
	}
	path := out
	if !filepath.IsAbs(path) {
		path = filepath.Join(root, out)
	}
	if err := benchkit.WriteSection(path, startMarker, endMarker, section); err != nil {
		return err
	}
	logf("wrote %s", path)
	return nil
}

// setUp builds the inventory benchmarks once, so that no run measures the compiler (running the
// binary is what `go test` does), and starts a private durable PostgreSQL cluster for both sides;
// done stops it and removes its folder.
func setUp(ctx context.Context, root string, seconds, rounds int) (b *bench, done func(), err error) {
	bindir, err := pgserver.BinDir()
	if err != nil {
		return nil, nil, err
	}
	b = &bench{seconds: seconds, rounds: max(rounds, 1), pkgDir: filepath.Join(root, "inventory")}
	if b.pgbench, err = pgbenchPath(bindir); err != nil {
		return nil, nil, err
	}
	if b.tmp, err = os.MkdirTemp("", "checkout-bench-"); err != nil {
		return nil, nil, err
	}
	done = func() { os.RemoveAll(b.tmp) }
	b.testBin = filepath.Join(b.tmp, "inventory.test")
	logf("go test -c -o %s ./inventory", b.testBin)
	if _, _, err := command(ctx, root, nil, "go", "test", "-c", "-o", b.testBin, "./inventory"); err != nil {
		done()
		return nil, nil, fmt.Errorf("build the inventory benchmark: %w", err)
	}
	logf("starting a private PostgreSQL cluster (durable settings) in %s", b.tmp)
	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	b.srv, err = pgserver.Start(startCtx, pgserver.Options{Dir: filepath.Join(b.tmp, "data")})
	cancel()
	if err != nil {
		done()
		return nil, nil, err
	}
	done = func() {
		b.srv.Stop()
		os.RemoveAll(b.tmp)
	}
	if b.postmaster, err = benchkit.PostmasterPID(b.srv.Dir); err != nil {
		done()
		return nil, nil, err
	}
	return b, done, nil
}

// round is one measurement of every case, pgbench's best and the confirms.
type round struct {
	results  []result
	confirms []confirmResult
	best     pgRun
}

// measureRound measures every case once (each side steady: run again while disturbed).
func (b *bench) measureRound(ctx context.Context) (round, error) {
	// 200 clients: pgbench opens 200 connections, the Go side a pool of 202; the cluster allows 300.
	cases := []benchCase{{"hot", 1, 8}, {"hot", 1, 50}, {"hot", 1, 200},
		{"spread", spreadSKUs, 8}, {"spread", spreadSKUs, 50}, {"spread", spreadSKUs, 200}}
	results := make([]result, len(cases))
	var err error
	for i, c := range cases {
		r := &results[i]
		r.benchCase = c
		steps := []func() error{
			func() (err error) {
				r.pg, err = steady(c.name()+" pgbench", func(attempt int) (pgRun, error) {
					return b.runPgbench(ctx, c.shape, c.skus, c.clients, 1, attempt)
				})
				return err
			},
			func() (err error) {
				r.off, err = steady(c.name()+" combining=off", func(int) (goRun, error) {
					return b.runGoBench(ctx, "BenchmarkReserve", c, "off", "reservations/s")
				})
				return err
			},
			func() (err error) {
				r.on, err = steady(c.name()+" combining=on", func(int) (goRun, error) {
					return b.runGoBench(ctx, "BenchmarkReserve", c, "on", "reservations/s")
				})
				return err
			},
		}
		if c.skus == 1 {
			steps = append(steps, func() (err error) {
				label := fmt.Sprintf("buckets%d", bucketRows)
				r.buckets, err = steady(fmt.Sprintf("%s pgbench over %d rows", c.name(), bucketRows),
					func(attempt int) (pgRun, error) { return b.runPgbench(ctx, label, bucketRows, c.clients, 1, attempt) })
				return err
			})
		}
		// Rotate which side runs first, so that none always gets the fresher machine.
		for k := range steps {
			if err := steps[(k+i)%len(steps)](); err != nil {
				return round{}, fmt.Errorf("%s: %w", c.name(), err)
			}
		}
		if c.skus == 1 {
			// After the engine's run: pgbench batches as many orders as the engine's batches held.
			batch := batchedSize(r.on.batch, c.clients)
			r.batched, err = steady(fmt.Sprintf("%s pgbench batched by %d", c.name(), batch),
				func(attempt int) (pgRun, error) {
					return b.runPgbench(ctx, fmt.Sprintf("batched%d", batch), 1, 1, batch, attempt)
				})
			if err != nil {
				return round{}, fmt.Errorf("%s: %w", c.name(), err)
			}
		}
	}

	// pgbench's best on the one row: the client count it does most at, since more backends on one
	// row mostly wait for each other.
	var best pgRun
	for _, n := range bestClients {
		r, err := steady(fmt.Sprintf("hot pgbench at %d clients", n), func(attempt int) (pgRun, error) {
			return b.runPgbench(ctx, "best", 1, n, 1, attempt)
		})
		if err != nil {
			return round{}, err
		}
		if r.tps > best.tps {
			best = r
		}
	}

	confirms := make([]confirmResult, len(confirmClients))
	for i, clients := range confirmClients {
		c := benchCase{shape: "hot", skus: 1, clients: clients}
		r := &confirms[i]
		r.clients = clients
		modes := []string{"off", "on"}
		if i%2 == 1 {
			modes = []string{"on", "off"} // take turns running first, as the reserve cases do
		}
		for _, mode := range modes {
			run, err := steady(c.name()+" confirm combining="+mode, func(int) (goRun, error) {
				return b.runGoBench(ctx, "BenchmarkConfirm", c, mode, "confirms/s")
			})
			if err != nil {
				return round{}, fmt.Errorf("%s confirm: %w", c.name(), err)
			}
			if mode == "off" {
				r.off = run
			} else {
				r.on = run
			}
		}
	}

	return round{results: results, confirms: confirms, best: best}, nil
}

// medians are the rounds' figures, each the median of its rounds (a ratio of two medians is then
// set beside the spread of the rounds' own ratios: spreads); a run's disturbance is instead the
// most of its rounds'.
func medians(rounds []round) ([]result, []confirmResult, pgRun) {
	med := func(get func(round) float64) float64 {
		xs := make([]float64, len(rounds))
		for i, r := range rounds {
			xs[i] = get(r)
		}
		return benchkit.SpreadOf(xs).Median
	}
	// A run's disturbance is the most of its rounds': a row is quiet only if every round was.
	most := func(get func(round) float64) float64 {
		var m float64
		for _, r := range rounds {
			m = max(m, get(r))
		}
		return m
	}
	medPG := func(get func(round) pgRun) pgRun {
		p := get(rounds[0])
		p.tps = med(func(r round) float64 { return get(r).tps })
		p.latencyMs = med(func(r round) float64 { return get(r).latencyMs })
		p.other = most(func(r round) float64 { return get(r).other })
		p.clientCPU = med(func(r round) float64 { return get(r).clientCPU })
		p.batch = int(math.Round(med(func(r round) float64 { return float64(get(r).batch) })))
		return p
	}
	medGo := func(get func(round) goRun) goRun {
		return goRun{rate: med(func(r round) float64 { return get(r).rate }),
			p50: med(func(r round) float64 { return get(r).p50 }), p99: med(func(r round) float64 { return get(r).p99 }),
			other: most(func(r round) float64 { return get(r).other }), batch: med(func(r round) float64 { return get(r).batch }),
			clientCPU: med(func(r round) float64 { return get(r).clientCPU })}
	}
	results := slices.Clone(rounds[0].results)
	for i := range results {
		results[i].pg = medPG(func(r round) pgRun { return r.results[i].pg })
		results[i].buckets = medPG(func(r round) pgRun { return r.results[i].buckets })
		results[i].batched = medPG(func(r round) pgRun { return r.results[i].batched })
		results[i].off = medGo(func(r round) goRun { return r.results[i].off })
		results[i].on = medGo(func(r round) goRun { return r.results[i].on })
	}
	confirms := slices.Clone(rounds[0].confirms)
	for i := range confirms {
		confirms[i].off = medGo(func(r round) goRun { return r.confirms[i].off })
		confirms[i].on = medGo(func(r round) goRun { return r.confirms[i].on })
	}
	best := medPG(func(r round) pgRun { return r.best })
	best.clients = rounds[0].best.clients
	return results, confirms, best
}

// spreads is the table of the headline ratios round by round: each round's own ratio, their
// median and their lowest and highest.
func spreads(measured []round) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| ratio | %s |\n|---|", roundHeads(len(measured)))
	b.WriteString(strings.Repeat("---:|", len(measured)+1) + "\n")
	row := func(name string, get func(round) float64) {
		xs := make([]float64, len(measured))
		fmt.Fprintf(&b, "| %s |", name)
		for i, r := range measured {
			xs[i] = get(r)
			fmt.Fprintf(&b, " %.2f |", xs[i])
		}
		fmt.Fprintf(&b, " %s |\n", benchkit.SpreadOf(xs))
	}
	for i, c := range measured[0].results {
		if c.skus == 1 {
			row(fmt.Sprintf("%s, combining on ÷ pgbench batched", c.name()), func(r round) float64 {
				return ratio(r.results[i].on.rate, r.results[i].batched.rate())
			})
			row(fmt.Sprintf("%s, combining on ÷ pgbench at its best", c.name()), func(r round) float64 {
				return ratio(r.results[i].on.rate, r.best.tps)
			})
		} else {
			row(fmt.Sprintf("%s, combining off ÷ pgbench", c.name()), func(r round) float64 {
				return ratio(r.results[i].off.rate, r.results[i].pg.tps)
			})
			row(fmt.Sprintf("%s, combining on ÷ pgbench", c.name()), func(r round) float64 {
				return ratio(r.results[i].on.rate, r.results[i].pg.tps)
			})
		}
	}
	for i, c := range measured[0].confirms {
		row(fmt.Sprintf("confirm hot/clients=%d, combining on ÷ off", c.clients), func(r round) float64 {
			return ratio(r.confirms[i].on.rate, r.confirms[i].off.rate)
		})
	}
	return b.String()
}

func roundHeads(n int) string {
	heads := make([]string, 0, n+1)
	for i := range n {
		heads = append(heads, fmt.Sprintf("round %d", i+1))
	}
	return strings.Join(append(heads, "median (lowest–highest)"), " | ")
}

// maxRuns bounds the runs of one side of one case; see steady.
const maxRuns = 3

// runOther is what steady needs of a run: the share of the CPUs other processes took during it.
type runOther interface{ otherShare() float64 }

func (r pgRun) otherShare() float64 { return r.other }
func (r goRun) otherShare() float64 { return r.other }

// steady runs one side of a case again while other processes take more than disturbedShare of the
// CPUs (at most maxRuns runs), and keeps the least disturbed run: on a shared machine one busy
// neighbour would otherwise decide the ratio.
func steady[T runOther](name string, run func(attempt int) (T, error)) (T, error) {
	var best T
	for attempt := 1; attempt <= maxRuns; attempt++ {
		x, err := run(attempt)
		if err != nil {
			return best, err
		}
		if attempt == 1 || x.otherShare() < best.otherShare() {
			best = x
		}
		if best.otherShare() <= disturbedShare {
			break
		}
		if attempt < maxRuns {
			logf("%s: other processes took %.0f%% of the CPUs during that run; running it again",
				name, 100*x.otherShare())
		}
	}
	return best, nil
}

// runPgbench measures pgbench's transaction over skus rows, batch orders a transaction, with
// clients connections, on a fresh database seeded like the Go side's.
func (b *bench) runPgbench(ctx context.Context, label string, skus, clients, batch, attempt int) (pgRun, error) {
	r := pgRun{clients: clients, batch: batch}
	c := benchCase{shape: label, skus: skus, clients: clients}
	dbname := fmt.Sprintf("pgbench_%s_%d_%d_%d", label, c.clients, b.round, attempt)
	conn, err := pgbenchDatabase(ctx, b.srv, dbname, skus)
	if err != nil {
		return r, err
	}
	defer conn.Close(ctx)
	file := fmt.Sprintf("reserve_%s.sql", label)
	if err := os.WriteFile(filepath.Join(b.tmp, file), []byte(script(skus, batch)), 0o644); err != nil {
		return r, err
	}
	// One pgbench thread per CPU (as many as clients at most), as the Go side has GOMAXPROCS.
	threads := min(c.clients, runtime.NumCPU())
	args := []string{"-h", "127.0.0.1", "-p", strconv.Itoa(b.srv.Port), "-U", pgserver.Superuser,
		"-n", "-M", "prepared", "-c", strconv.Itoa(c.clients), "-j", strconv.Itoa(threads),
		"-T", strconv.Itoa(b.seconds), "-f", filepath.Join(b.tmp, file), dbname}
	logf("%s: pgbench -n -M prepared -c %d -j %d -T %d -f %s", c.name(), c.clients, threads, b.seconds, file)
	output, other, client, err := b.measured(ctx, "", nil, b.pgbench, args...)
	if err != nil {
		return r, fmt.Errorf("pgbench: %w", err)
	}
	r.other = other
	if r.tps, err = match(output, tpsExpr); err != nil {
		return r, err
	}
	if r.latencyMs, err = match(output, `(?m)^latency average = ([0-9.]+) ms`); err != nil {
		return r, err
	}
	txns, err := match(output, txnsExpr)
	if err != nil {
		return r, err
	}
	r.txns = int64(txns)
	if r.txns > 0 {
		r.clientCPU = client.Seconds() * 1e6 / float64(r.txns*int64(max(batch, 1)))
	}
	if failed, err := match(output, `(?m)^number of failed transactions: ([0-9]+)`); err == nil && failed > 0 {
		return r, fmt.Errorf("pgbench: %v failed transactions", failed)
	}
	// Every counted transaction must have reserved a unit, or pgbench measured something cheaper.
	var rows, reserved int64
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM stock_reservations WHERE status = 'ACTIVE'),
		(SELECT coalesce(sum(reserved), 0) FROM inventory)`).Scan(&rows, &reserved); err != nil {
		return r, err
	}
	if want := r.txns * int64(max(batch, 1)); rows != want || reserved != want {
		return r, fmt.Errorf("pgbench counted %d transactions of %d orders but left %d reservation rows and %d reserved units",
			r.txns, max(batch, 1), rows, reserved)
	}
	return r, nil
}

// pgbenchPath finds pgbench next to the server binaries in bindir, else on PATH.
func pgbenchPath(bindir string) (string, error) {
	path := filepath.Join(bindir, "pgbench")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if path, err := exec.LookPath("pgbench"); err == nil {
		return path, nil
	}
	return "", errors.New("pgbench not found next to the server binaries nor on PATH")
}

// pgbenchDatabase creates dbname on srv with the product's schema and the benchmark's data for
// skus SKUs, plus the sequence pgbench's scripts take order ids from, and checkpoints it, so that
// a run starts from a clean WAL; the caller closes the connection it returns.
func pgbenchDatabase(ctx context.Context, srv *pgserver.Server, dbname string, skus int) (*pgx.Conn, error) {
	if err := srv.CreateDatabase(ctx, dbname, ""); err != nil {
		return nil, err
	}
	if _, err := migrations.Up(ctx, srv.URL(dbname)); err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, srv.URL(dbname))
	if err != nil {
		return nil, err
	}
	if err := benchdata.Seed(ctx, conn, skus); err != nil {
		conn.Close(ctx)
		return nil, err
	}
	for _, s := range []string{"CREATE SEQUENCE bench_order_seq", "CHECKPOINT"} {
		if _, err := conn.Exec(ctx, s); err != nil {
			conn.Close(ctx)
			return nil, fmt.Errorf("seed pgbench database: %w", err)
		}
	}
	return conn, nil
}

// What pgbench prints: its rate without connection time, and the transactions it counted.
const (
	tpsExpr  = `(?m)^tps = ([0-9.]+) \(without initial connection time\)`
	txnsExpr = `(?m)^number of transactions actually processed: ([0-9]+)`
)

// runGoBench runs one case of benchmark (BenchmarkReserve or BenchmarkConfirm) on the same
// cluster through TEST_PG_URL; unit is the metric its rate is reported in.
func (b *bench) runGoBench(ctx context.Context, benchmark string, c benchCase, combining, unit string) (goRun, error) {
	pattern := fmt.Sprintf("^%s$/^%s$/^clients=%d$/^combining=%s$", benchmark, c.shape, c.clients, combining)
	return b.runGoPattern(ctx, c.name(), pattern, benchmark+"/"+c.name()+"/combining="+combining, unit)
}

// runGoPattern runs the inventory benchmarks matching pattern and reads the result line that
// starts with prefix (the sub-benchmark's full name).
func (b *bench) runGoPattern(ctx context.Context, label, pattern, prefix, unit string) (goRun, error) {
	var r goRun
	if err := checkpoint(ctx, b.srv); err != nil {
		return r, err
	}
	logf("%s: go test ./inventory -run '^$' -bench '%s' -benchtime %ds -count 1", label, pattern, b.seconds)
	output, other, _, err := b.measured(ctx, b.pkgDir, []string{"TEST_PG_URL=" + b.srv.URL("postgres")}, b.testBin,
		"-test.run", "^$", "-test.bench", pattern, "-test.benchtime", fmt.Sprintf("%ds", b.seconds), "-test.count", "1")
	if err != nil {
		return r, fmt.Errorf("go test: %w", err)
	}
	r.other = other
	line := ""
	for l := range strings.Lines(output) {
		if rest, ok := strings.CutPrefix(l, prefix); ok && (strings.HasPrefix(rest, "-") || strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, "\t")) {
			line = l
		}
	}
	if line == "" {
		return r, fmt.Errorf("no result line for %s in go test output", prefix)
	}
	f := strings.Fields(line)
	metrics := map[string]float64{}
	for i := 2; i+1 < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return r, fmt.Errorf("unreadable metric %q in %q", f[i], line)
		}
		metrics[f[i+1]] = v
	}
	for unit, dst := range map[string]*float64{unit: &r.rate, "p50-ms": &r.p50, "p99-ms": &r.p99,
		"client-cpu-us/op": &r.clientCPU} {
		v, ok := metrics[unit]
		if !ok {
			return r, fmt.Errorf("metric %s missing from %q", unit, line)
		}
		*dst = v
	}
	r.batch = metrics["orders/batch"]
	return r, nil
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
// the cluster, this program nor that side while it ran (on a shared machine that share says
// whether the row can be trusted), and the side's own CPU (client).
func (b *bench) measured(ctx context.Context, dir string, env []string, name string, args ...string) (output string, other float64, client time.Duration, err error) {
	before, err := b.cpu()
	if err != nil {
		return "", 0, 0, err
	}
	output, state, err := command(ctx, dir, env, name, args...)
	if err != nil {
		return output, 0, 0, err
	}
	after, err := b.cpu()
	if err != nil {
		return output, 0, 0, err
	}
	if ru, ok := state.SysUsage().(*syscall.Rusage); ok {
		client = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	total := after.total - before.total
	if total <= 0 {
		return output, 0, client, nil
	}
	other = (after.busy - before.busy) - (after.ours - before.ours) - client.Seconds()*benchkit.UserHZ
	return output, max(other, 0) / total, client, nil
}

type cpuTimes struct {
	busy, total float64 // the whole machine; busy counts time stolen by the hypervisor
	ours        float64 // the cluster (postmaster, live and reaped children) and this program
}

func (b *bench) cpu() (cpuTimes, error) {
	var t cpuTimes
	var err error
	if t.busy, t.total, err = benchkit.MachineJiffies(); err != nil {
		return t, err
	}
	if t.ours, err = benchkit.TreeJiffies(b.postmaster); err != nil {
		return t, err
	}
	t.ours += benchkit.SelfJiffies()
	return t, nil
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
	loadBefore, loadAfter         string
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

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func table(rs []result) string {
	var b strings.Builder
	b.WriteString("| case | clients | pgbench tps | Go, combining off, reservations/s | off ÷ pgbench | " +
		"Go, combining on (default), reservations/s | on ÷ pgbench | off p50 / p99 ms | on p50 / p99 ms | " +
		"client CPU µs per order: pgbench / Go off / Go on |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "| %s | %d | %.0f | %.0f | %.2f | %.0f | %.2f | %.2f / %.2f | %.2f / %.2f | %.1f / %.1f / %.1f |\n",
			r.shape, r.clients, r.pg.tps, r.off.rate, ratio(r.off.rate, r.pg.tps), r.on.rate, ratio(r.on.rate, r.pg.tps),
			r.off.p50, r.off.p99, r.on.p50, r.on.p99, r.pg.clientCPU, r.off.clientCPU, r.on.clientCPU)
	}
	return b.String()
}

// hotTable sets the hot row's figures side by side: pgbench on the one row (the single-row limit),
// pgbench over bucketRows rows (what logical buckets could reach at best), and the Go path.
func hotTable(rs []result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| hot row, clients | pgbench, one row, tps | pgbench, %d rows (bucket ceiling), tps | "+
		"Go, combining off, reservations/s | Go, combining on, reservations/s | on ÷ pgbench one row | "+
		"%d rows ÷ one row |\n", bucketRows, bucketRows)
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		if r.skus != 1 {
			continue
		}
		fmt.Fprintf(&b, "| %d | %.0f | %.0f | %.0f | %.0f | %.2f | %.2f |\n", r.clients, r.pg.tps, r.buckets.tps,
			r.off.rate, r.on.rate, ratio(r.on.rate, r.pg.tps), ratio(r.buckets.tps, r.pg.tps))
	}
	return b.String()
}

// fairTable sets the combining engine on the hot row beside the two baselines that commit as it
// can: pgbench at its best client count (more backends on one row only wait for each other), and
// pgbench committing batches of the size the engine's batches reach at that many clients.
func fairTable(rs []result, best pgRun) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| hot row, clients | Go, combining on, reservations/s | pgbench at its best (%d clients), tps | "+
		"on ÷ pgbench best | engine: mean orders per batch | pgbench batched: orders per commit | pgbench batched, orders/s | "+
		"**on ÷ pgbench batched** |\n", best.clients)
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		if r.skus != 1 {
			continue
		}
		fmt.Fprintf(&b, "| %d | %.0f | %.0f | %.2f | %.1f | %d | %.0f | **%.2f** |\n", r.clients, r.on.rate, best.tps,
			ratio(r.on.rate, best.tps), r.on.batch, r.batched.batch, r.batched.rate(), ratio(r.on.rate, r.batched.rate()))
	}
	return b.String()
}

// confirmTable sets the confirm path on the hot row with combining off beside on.
func confirmTable(rs []confirmResult) string {
	var b strings.Builder
	b.WriteString("| hot row, clients | Go confirm, combining off, confirms/s | Go confirm, combining on (default), confirms/s | " +
		"on ÷ off | on: mean orders per batch | off p50 / p99 ms | on p50 / p99 ms |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "| %d | %.0f | %.0f | %.2f | %.1f | %.2f / %.2f | %.2f / %.2f |\n", r.clients, r.off.rate, r.on.rate,
			ratio(r.on.rate, r.off.rate), r.on.batch, r.off.p50, r.off.p99, r.on.p50, r.on.p99)
	}
	return b.String()
}

// judge sets the ratio get gives each case that keep keeps against bar, and says after label which
// cases met it and which missed it.
func judge(rs []result, label string, bar float64, keep func(result) bool, get func(result) float64) string {
	var met, missed []string
	for _, r := range rs {
		if !keep(r) {
			continue
		}
		x := get(r)
		s := fmt.Sprintf("%s (%.2f×)", r.name(), x)
		if x >= bar {
			met = append(met, s)
		} else {
			missed = append(missed, s)
		}
	}
	switch {
	case len(missed) == 0:
		return label + " met in every case: " + strings.Join(met, ", ") + "."
	case len(met) == 0:
		return label + " missed in every case: " + strings.Join(missed, ", ") + "."
	}
	return label + " met for " + strings.Join(met, ", ") + "; missed for " + strings.Join(missed, ", ") + "."
}

// every keeps every case.
func every(result) bool { return true }

// fairVerdict judges the hot row against the batched baseline: the engine at least matches the
// row's limit for its batch size.
func fairVerdict(rs []result, best pgRun) string {
	out := judge(rs, "Hot-row target (combining on ≥ 1.0× pgbench committing batches of the same size)", 1,
		func(r result) bool { return r.skus == 1 },
		func(r result) float64 { return ratio(r.on.rate, r.batched.rate()) })
	return out + fmt.Sprintf(" Against pgbench's best client count (%d clients, %.0f tps) instead of the same count, "+
		"the engine's ratios are in the table's fourth column.", best.clients, best.tps)
}

// spreadVerdict judges the spread rows with combining off against pgbench at the same count: one
// order per transaction on both sides, so the engine's own cost per order decides.
func spreadVerdict(rs []result) string {
	return judge(rs, "Spread target (combining off ≥ 1.0× pgbench at every client count)", 1,
		func(r result) bool { return r.skus > 1 },
		func(r result) float64 { return ratio(r.off.rate, r.pg.tps) })
}

// verdicts judges the figures: the 0.8× bar for both reserve paths in every case, and the hot-SKU
// bar.
func verdicts(rs []result) []string {
	bar := func(label string, get func(result) float64) string {
		return judge(rs, fmt.Sprintf("Target (%s ≥ %.1f× pgbench)", label, target), target, every,
			func(r result) float64 { return ratio(get(r), r.pg.tps) })
	}
	out := []string{
		bar("Go with combining on, the default,", func(r result) float64 { return r.on.rate }),
		bar("Go with combining off", func(r result) float64 { return r.off.rate }),
	}
	i := slices.IndexFunc(rs, func(r result) bool { return r.skus == 1 && r.clients == hotTargetClients })
	if i >= 0 {
		r := rs[i]
		x := ratio(r.on.rate, r.pg.tps)
		word := "met"
		if x < hotTarget {
			word = "missed"
		}
		out = append(out, fmt.Sprintf("Hot-SKU target (combining on ≥ %.0f× pgbench's one-row tps at %d clients) %s: "+
			"%.0f reservations/s against %.0f tps, %.2f×.", hotTarget, hotTargetClients, word, r.on.rate, r.pg.tps, x))
	}
	return out
}

func render(rs []result, confirms []confirmResult, best pgRun, f facts, seconds int, measured []round) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("%s\n## Reserve path against pgbench\n\n", startMarker)
	w("Written by `make bench` (bench/benchreserve); running it again replaces this section.\n\n")
	w("- Command: `make bench`, measured %s.\n", f.date)
	w("- Machine: %d CPUs (%s), %s, Linux %s; PostgreSQL %s; %s; 1-minute load average %s when the run "+
		"began and %s when it ended.\n",
		f.cpus, f.cpuModel, f.memory, f.kernel, f.postgres, f.goVersion, f.loadBefore, f.loadAfter)
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
		"as the caller sees it; its client CPU is the test process's (engine, pgx, callers) over the timed "+
		"calls, per order. combining=off: every order its own `reserve_order` transaction "+
		"(`RESERVE_COMBINING=false`). combining=on: the default engine, up to %d batches in flight, "+
		"never two on one SKU; the orders that wait while a batch of their SKU is in flight go "+
		"together as the next batch, one `reserve_orders` transaction. Per case: `go test ./inventory -run '^$' -bench "+
		"'^BenchmarkReserve$/^<case>$/^clients=<clients>$/^combining=<off|on>$' -benchtime %ds -count 1` "+
		"(the test binary is built once beforehand).\n", inventory.DefaultBatchesInFlight, seconds)
	w("- pgbench: the design's conditional UPDATE … INSERT (what `reserve_order` runs per line), in "+
		"BEGIN … COMMIT, order ids from a sequence; `pgbench -n -M prepared -c <clients> "+
		"-j min(clients, CPUs) -T %d -f reserve_<case>.sql`, tps without connection time; its client CPU is pgbench's "+
		"whole run (connecting included) per order. For the hot "+
		"row it also runs the same transaction over %d rows of %d units each, every transaction a "+
		"uniformly random one: the ceiling of logical buckets (the hot stock split into %d rows), "+
		"before any of their costs (falling through an empty bucket, summing buckets to decide a "+
		"line, rebalancing).\n", seconds, bucketRows, benchdata.Stock, bucketRows)
	w("- Fairness: the sides of a case take turns running first. A run during which other "+
		"processes took more than %.0f%% of the CPUs is run again (at most %d runs) and the least "+
		"disturbed one is kept; below the tables, each case lists the most any of its rounds kept.\n", 100*disturbedShare, maxRuns)
	w("- Rounds: every case, pgbench's best and the confirms are measured %d times, one round after another; "+
		"each figure in the tables is the median of its rounds (so a ratio in them is of two medians), and the "+
		"headline ratios are listed round by round, with their spread, after the confirm path.\n\n", len(measured))
	b.WriteString(table(rs))
	w("\n")
	b.WriteString(hotTable(rs))
	w("\nThe hot row beside baselines that commit as the engine can. pgbench with one order per transaction "+
		"collapses as backends pile onto one row, so a ratio against it at 200 clients flatters the engine; it was "+
		"run at %v clients and its best is used here. And the engine commits up to %d orders at once, so the "+
		"row's real limit is pgbench committing batches: one connection, one transaction on the row at a time, "+
		"as many orders in each as the engine's batches held on average in its run beside it (the benchmark counts "+
		"them; the clients split into cohorts, one batch in flight while the next gathers, so a batch holds fewer "+
		"than `clients`), the same conditional UPDATE by the batch's units and one reservation row per order; "+
		"it runs right after the engine's run:\n\n",
		bestClients, maxBatchOrders)
	b.WriteString(fairTable(rs, best))
	w("\npgbench latency average:")
	for i, r := range rs {
		w(" %s %.2f ms%s", r.name(), r.pg.latencyMs, listSep(i, len(rs)))
	}
	w("\n\nCPU taken by other processes on the machine during each run, the most of its rounds (pgbench / Go off / Go on / "+
		"pgbench over %d rows):", bucketRows)
	for i, r := range rs {
		w(" %s %.0f%% / %.0f%% / %.0f%%", r.name(), 100*r.pg.other, 100*r.off.other, 100*r.on.other)
		if r.skus == 1 {
			w(" / %.0f%%", 100*r.buckets.other)
		}
		w("%s", listSep(i, len(rs)))
	}
	w("\n\n%s", strings.Join(append(verdicts(rs), fairVerdict(rs, best), spreadVerdict(rs)), "\n\n"))
	if d := disturbance(rs); d != "" {
		w("\n\n%s", d)
	}
	w("\n\nThe confirm path on the hot row: `Engine.Confirm` of orders reserved beforehand (one unit "+
		"each, off the clock), exactly `clients` goroutines, through a pool of clients+2 connections. "+
		"combining=off: every confirm its own transaction (`CONFIRM_COMBINING=false`); combining=on: the "+
		"default engine, whose confirms that wait while a batch of their SKU is in flight go together as "+
		"the next batch, one `confirm_orders` statement. Per case: `go test ./inventory -run '^$' -bench "+
		"'^BenchmarkConfirm$/^hot$/^clients=<clients>$/^combining=<off|on>$' -benchtime %ds -count 1`. "+
		"CPU taken by other processes, the most of the rounds (off / on):", seconds)
	for i, r := range confirms {
		w(" %d clients %.0f%% / %.0f%%%s", r.clients, 100*r.off.other, 100*r.on.other, listSep(i, len(confirms)))
	}
	w("\n\n")
	b.WriteString(confirmTable(confirms))
	w("\nThe headline ratios round by round, each round's own (its two sides measured in that round):\n\n")
	b.WriteString(spreads(measured))
	w("\nThe pgbench transaction (spread; hot sets `:sku` to %d, the %d-row reference draws it from "+
		"the first %d SKUs):\n\n```sql\n%s```\n%s\n",
		benchdata.FirstSKU, bucketRows, bucketRows, script(spreadSKUs, 1), endMarker)
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
		if max(r.pg.other, r.off.other, r.on.other, r.buckets.other, r.batched.other) > disturbedShare {
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

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "benchreserve: "+format+"\n", a...)
}
