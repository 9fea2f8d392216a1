package main

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/marketplace/checkout/bench/internal/figures"
)

// series are the runs as they appear in the plot and the tables.
var series = []struct {
	what, label string
	color       color.RGBA
}{
	{runFloor, "Temporal floor (empty workflow)", color.RGBA{R: 120, G: 120, B: 120, A: 255}},
	{runCampaign, "saga, campaign mix", color.RGBA{R: 200, G: 40, B: 40, A: 255}},
	{runSagaOK, "saga, all tok_ok", color.RGBA{R: 230, G: 140, B: 0, A: 255}},
	{runPlainOK, "plain transaction, all tok_ok", color.RGBA{R: 30, G: 90, B: 200, A: 255}},
}

// drawPlot draws throughput (left) and POST /orders p99 (right) against shoppers, one line per
// series, into a PNG.
func drawPlot(path string, res figures.Results) error {
	counts := res.Counts()
	ticks := make([]plot.Tick, 0, len(counts))
	for _, n := range counts {
		ticks = append(ticks, plot.Tick{Value: float64(n), Label: strconv.Itoa(n)})
	}
	through, p99 := plot.New(), plot.New()
	through.Title.Text = "Orders (workflows) answered per second"
	through.Y.Label.Text = "per second"
	p99.Title.Text = "POST /api/v1/orders p99 (floor: update answer)"
	p99.Y.Label.Text = "ms (log scale)"
	p99.Y.Scale = plot.LogScale{}
	p99.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	for _, p := range []*plot.Plot{through, p99} {
		p.X.Label.Text = "concurrent shoppers (log scale)"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.ConstantTicks(ticks)
		p.Add(plotter.NewGrid())
		p.Legend.Top = true
		p.Legend.Left = true
	}
	through.Y.Min = 0
	for _, s := range series {
		var tp, lp plotter.XYs
		for _, n := range counts {
			if r, ok := res.Find(s.what, n); ok {
				tp = append(tp, plotter.XY{X: float64(n), Y: r.PerSecond})
				lp = append(lp, plotter.XY{X: float64(n), Y: max(r.P99Ms, 0.1)})
			}
		}
		for _, pair := range []struct {
			p   *plot.Plot
			pts plotter.XYs
		}{{through, tp}, {p99, lp}} {
			if len(pair.pts) == 0 {
				continue
			}
			line, points, err := plotter.NewLinePoints(pair.pts)
			if err != nil {
				return err
			}
			line.Color, points.Color = s.color, s.color
			line.Width = vg.Points(1.5)
			points.Shape = draw.CircleGlyph{}
			pair.p.Add(line, points)
			pair.p.Legend.Add(s.label, line, points)
		}
	}
	// Headroom above the lines for the legends in the top-left corners.
	var topRate, topP99 float64
	for _, r := range res.Runs {
		topRate, topP99 = max(topRate, r.PerSecond), max(topP99, r.P99Ms)
	}
	through.Y.Max = 1.45 * topRate
	p99.Y.Max = 6 * topP99
	img := vgimg.New(vg.Points(1100), vg.Points(440))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Millimeter * 6, PadY: vg.Millimeter * 3,
		PadLeft: vg.Millimeter * 3, PadRight: vg.Millimeter * 3, PadTop: vg.Millimeter * 3, PadBottom: vg.Millimeter * 3}
	canvases := plot.Align([][]*plot.Plot{{through, p99}}, tiles, dc)
	through.Draw(canvases[0][0])
	p99.Draw(canvases[0][1])
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func ratio(a, b float64) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// render writes the section of docs/benchmarks.md.
func render(res figures.Results, window time.Duration, plotPath, docPath string) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	counts := res.Counts()
	w("%s\n## Campaign traffic through the whole stack, beside the Temporal floor and a plain checkout\n\n", startMarker)
	w("Written by `make bench-campaign` (bench/benchcampaign); running it again replaces this section and the plot.\n\n")
	w("%s", commandAndMachine(res, window, "make bench-campaign", "", "The stack, the load generator and the plain endpoint"))
	w("- Stack: `bin/checkout-dev dev` as `make run` starts it (API and worker in one process, the Temporal dev server with " +
		"SQLite in WAL mode and eager activities, one private PostgreSQL cluster with durable commits), default settings " +
		"but admission control off (`ORDERS_MAX_IN_FLIGHT=0 ORDERS_ADMIT_MAX_LATENCY=0`: these runs look for the knee; " +
		"the admission control section below measures past it with and without), on ports of its own.\n")
	w("- Each run is a load phase of %s (shoppers start orders until it ends; what they started then finishes, "+
		"outside the figures), after the stack has gone quiet; the runs of a count take turns going first.\n", window)
	w("- **saga, campaign mix**: `checkout-dev loadgen` shoppers, each placing one order after another through the REST API " +
		"as a shopper does (address, cart PUTs, preview, POST /orders with an Idempotency-Key, then 3-D Secure approval or " +
		"decline, cancel, abandonment, as the campaign mix says: ok 35, 3ds-approve 25, 3ds-decline 5, abandon 10, " +
		"decline 8, cancel 7, timeout 10; 2.5 lines per order on average, Zipf popularity, 30 %% of orders with a hot SKU, " +
		"5 %% of keys sent twice). Figures: orders answered 201 per second, and POST /orders latency.\n")
	w("- **Temporal floor**: the same number of clients in this tool starting empty workflows the way the API starts an " +
		"order (Update-with-Start, conflict policy use-existing, waiting for the update's answer), one after another " +
		"each, with no think time: what the dev server gives at that concurrency before any checkout work.\n")
	w("- **saga, all tok_ok** and **plain transaction, all tok_ok**: the same shoppers and steps, every order paid with " +
		"`tok_ok`; the plain run posts its orders to a checkout endpoint written only for this benchmark " +
		"(bench/internal/plain): one PostgreSQL transaction that reads the address, cart and prices " +
		"as the saga's price check does, writes the order row and items (with the product's `order.Insert`, which also " +
		"writes the order's first timeline entry), reserves with the product's `reserve_order` " +
		"and appends an outbox event, with no payment step and no Temporal. Their ratio is the cost of durability " +
		"(and of authorizing and capturing the payment, which the plain transaction does not do).\n\n")

	w("| shoppers | floor: workflows/s | floor p50 / p99 ms | saga, campaign: orders/s | POST /orders p50 / p99 ms | campaign ÷ floor, per second | campaign answers |\n")
	w("|---:|---:|---:|---:|---:|---:|---|\n")
	for _, n := range counts {
		f, _ := res.Find(runFloor, n)
		c, _ := res.Find(runCampaign, n)
		w("| %d | %.1f | %.0f / %.0f | %.1f | %.0f / %.0f | %s | %s |\n", n, f.PerSecond, f.P50Ms, f.P99Ms,
			c.PerSecond, c.P50Ms, c.P99Ms, ratio(c.PerSecond, f.PerSecond), answers(c))
	}
	w("\n| shoppers | saga, tok_ok: orders/s | plain, tok_ok: orders/s | saga ÷ plain, per second | saga p50 / p99 ms | plain p50 / p99 ms | saga ÷ plain, p99 |\n")
	w("|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, n := range counts {
		s, _ := res.Find(runSagaOK, n)
		p, _ := res.Find(runPlainOK, n)
		w("| %d | %.1f | %.1f | %s | %.0f / %.0f | %.0f / %.0f | %s |\n", n, s.PerSecond, p.PerSecond,
			ratio(s.PerSecond, p.PerSecond), s.P50Ms, s.P99Ms, p.P50Ms, p.P99Ms, ratio(s.P99Ms, p.P99Ms))
	}
	rel, err := filepath.Rel(filepath.Dir(docPath), plotPath)
	if err != nil {
		rel = plotPath
	}
	w("\n![Throughput and POST /orders p99 against shoppers](%s)\n\n", filepath.ToSlash(rel))

	w("Where the time went, per run (CPU in %% of one CPU, the machine has %d × 100 %%; PostgreSQL: mean client "+
		"backends running a statement, of them waiting on a heavyweight lock, and inside a transaction waiting for "+
		"their client; SQLite: the dev server's persistence calls per second, their mean latency and how many were "+
		"under way on average, and the operation that took most of their time):\n\n", res.CPUs)
	w("| run | shoppers | checkout dev %% | Temporal %% | NATS %% | PostgreSQL %% | this tool (load generator, floor client, plain endpoint) %% | other %% | idle %% | PG active / lock / idle in tx | SQLite calls/s, mean ms, in flight | SQLite's heaviest operation |\n")
	w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	writeWindows(&b, res, func(c figures.CPU) []float64 {
		return []float64{c.Checkout, c.Temporal, c.Support, c.Postgres, c.Driver, c.OtherPct, c.IdlePct}
	})
	w("\n%s\n\n", ceiling(res))
	writeOutcome(&b, res, fmt.Sprintf(" (the plain endpoint's %d unpaid orders cancelled and their stock given back first)", res.PlainSettle))
	w("%s\n", endMarker)
	return b.String()
}

// commandAndMachine are a section's first two items: the command that measured it (flags are
// the tool's flags before -shoppers) and the machine, which who shares.
func commandAndMachine(res figures.Results, window time.Duration, target, flags, who string) string {
	list := make([]string, 0, len(res.Counts()))
	for _, n := range res.Counts() {
		list = append(list, strconv.Itoa(n))
	}
	return fmt.Sprintf("- Command: `%s` (`bin/benchcampaign %s-shoppers %s -window %s`), measured %s.\n"+
		"- Machine: %d CPUs (%s), %s; 1-minute load average %.2f when the run began and %.2f when it ended. "+
		"%s share the machine's CPUs.\n", target, flags, strings.Join(list, ","), window,
		res.StartedAt.Format("2006-01-02 15:04 UTC"), res.CPUs, res.CPUModel, runtime.Version(), res.LoadBefore, res.LoadAfter, who)
}

// writeWindows writes a row per run of what its window saw: the CPU figures cpu picks, then
// PostgreSQL's backends and the Temporal server's persistence.
func writeWindows(b *strings.Builder, res figures.Results, cpu func(figures.CPU) []float64) {
	for _, n := range res.Counts() {
		for _, s := range series {
			r, ok := res.Find(s.what, n)
			if !ok {
				continue
			}
			calls, top := "–", "–"
			if p := r.Window.Persistence; p != nil {
				calls = fmt.Sprintf("%.0f, %.1f, %.2f", p.PerSecond, p.MeanMs, p.InFlight)
				if len(p.TopOps) > 0 {
					top = fmt.Sprintf("%s (%.0f %% of the time)", p.TopOps[0].Op, 100*p.TopOps[0].Share)
				}
			}
			fmt.Fprintf(b, "| %s | %d |", s.label, n)
			for _, v := range cpu(r.Window.CPU) {
				fmt.Fprintf(b, " %.0f |", v)
			}
			pg := r.Window.PG
			fmt.Fprintf(b, " %.2f / %.2f / %.2f | %s | %s |\n", pg.Active, pg.Lock, pg.IdleInTx, calls, top)
		}
	}
}

// writeOutcome writes the audit after the runs (first saying what was done before it) and the
// faults the runs saw.
func writeOutcome(b *strings.Builder, res figures.Results, before string) {
	w := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	if res.Audit.OK() {
		w("Audit after the runs%s: **clean**, %d checks over %d inventory rows, %d reservations and %s.\n",
			before, len(res.Audit.Checks), res.Audit.InventoryRows, res.Audit.Reservations, orderCounts(res.Audit.Orders))
	} else {
		w("Audit after the runs: **%d violations**:\n\n", len(res.Audit.Violations))
		for i, v := range res.Audit.Violations {
			if i == 20 {
				w("- … and %d more\n", len(res.Audit.Violations)-20)
				break
			}
			w("- %s: %s: %s\n", v.Invariant, v.Subject, v.Detail)
		}
	}
	var faults []string
	for _, r := range res.Runs {
		if r.Errors > 0 || r.Unexpected > 0 || r.Mismatches > 0 {
			faults = append(faults, fmt.Sprintf("%s at %d: %d errors (5xx or no answer), %d orders ended otherwise than their scenario, %d repeated keys answered differently",
				r.What, r.Shoppers, r.Errors, r.Unexpected, r.Mismatches))
		}
	}
	if len(faults) == 0 {
		w("\nNo run had a 5xx or unanswered request, an order that ended otherwise than its scenario says, or a repeated key answered differently.\n")
	} else {
		w("\nFaults seen: %s.\n", strings.Join(faults, "; "))
	}
}

func answers(r figures.Run) string {
	parts := make([]string, 0, len(r.Answers))
	for _, a := range r.Answers {
		parts = append(parts, fmt.Sprintf("%s %d", a.Outcome, a.Orders))
	}
	return strings.Join(parts, ", ")
}

func orderCounts(m map[string]int64) string {
	var total int64
	for _, v := range m {
		total += v
	}
	return fmt.Sprintf("%d orders (%s)", total, joinCounts(m))
}

// joinCounts lists counts by name, in the names' order: "CONFIRMED 3, FAILED 1".
func joinCounts(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// highestCampaign is the campaign run at the highest shopper count.
func highestCampaign(r figures.Results) (int, figures.Run, bool) {
	counts := r.Counts()
	if len(counts) == 0 {
		return 0, figures.Run{}, false
	}
	n := counts[len(counts)-1]
	c, ok := r.Find(runCampaign, n)
	return n, c, ok
}

// share is a process's share of the machine's CPU, in % of one CPU.
type share struct {
	name string
	pct  float64
}

// largestFirst orders shares from the largest.
func largestFirst(shares ...share) []share {
	sort.Slice(shares, func(i, j int) bool { return shares[i].pct > shares[j].pct })
	return shares
}

// saturation says whether a run left the machine's CPUs saturated (less than 10 % of each idle).
func saturation(cpu figures.CPU, cpus int) string {
	if cpu.IdlePct < 10*float64(cpus) {
		return "saturated"
	}
	return "not saturated"
}

// ceiling says, from the figures, where the campaign run at the highest count met its limit.
func ceiling(res figures.Results) string {
	n, c, ok := highestCampaign(res)
	if !ok {
		return ""
	}
	cpu := c.Window.CPU
	parts := largestFirst(share{"checkout dev (API and worker)", cpu.Checkout}, share{"the Temporal dev server", cpu.Temporal},
		share{"PostgreSQL", cpu.Postgres}, share{"the load generator", cpu.Driver})
	var b strings.Builder
	fmt.Fprintf(&b, "Where the ceiling is, read from the campaign run at %d shoppers: ", n)
	fmt.Fprintf(&b, "the CPUs were %s (%.0f %% idle of %d × 100 %%), and ", saturation(cpu, res.CPUs), cpu.IdlePct, res.CPUs)
	fmt.Fprintf(&b, "the largest share went to %s (%.0f %%), then %s (%.0f %%), %s (%.0f %%) and %s (%.0f %%). ",
		parts[0].name, parts[0].pct, parts[1].name, parts[1].pct, parts[2].name, parts[2].pct, parts[3].name, parts[3].pct)
	if p := c.Window.Persistence; p != nil {
		if p.InFlight >= 0.8 {
			fmt.Fprintf(&b, "The dev server's SQLite store had %.2f calls under way on average (mean %.1f ms): SQLite "+
				"runs one write at a time, so above about one call in flight they wait for each other, and the dev "+
				"server's persistence is a limit. ", p.InFlight, p.MeanMs)
		} else {
			fmt.Fprintf(&b, "The dev server's SQLite store had %.2f calls under way on average (mean %.1f ms): not yet a queue. ",
				p.InFlight, p.MeanMs)
		}
	}
	pg := c.Window.PG
	if pg.Lock >= 0.5 {
		fmt.Fprintf(&b, "PostgreSQL backends waited on locks (%.2f on average, %.0f %% of samples); the most: %s. ",
			pg.Lock, 100*pg.LockSamples, waits(pg.TopLocks))
	} else {
		fmt.Fprintf(&b, "PostgreSQL was not lock-bound (%.2f backends waiting on a lock on average, %.2f running a statement). ",
			pg.Lock, pg.Active)
	}
	if f, ok := res.Find(runFloor, n); ok && f.PerSecond > 0 {
		fmt.Fprintf(&b, "The floor itself, empty workflows with nothing else running, reached %.1f/s at this concurrency", f.PerSecond)
		cp, fp := c.Window.Persistence, f.Window.Persistence
		if cp != nil && fp != nil && c.Placed > 0 && f.Created > 0 {
			fmt.Fprintf(&b, "; per order placed the dev server made %.0f persistence calls, against %.0f per empty "+
				"workflow: an order is its workflow tasks, its search attributes and, when it waits for 3-D Secure, "+
				"the hold-expiry child workflow and its timer, all written through the same SQLite store", cp.PerSecond*c.Seconds/float64(c.Placed),
				fp.PerSecond*f.Seconds/float64(f.Created))
		}
		b.WriteString(". On a Temporal cluster with a server-grade store and several history shards this limit moves")
		if p, ok := res.Find(runPlainOK, n); ok && p.PerSecond > 2*c.PerSecond {
			fmt.Fprintf(&b, "; on the dev server it is the checkout's ceiling, well below what PostgreSQL serves "+
				"(%.0f orders/s in the plain run)", p.PerSecond)
		}
		b.WriteString(".")
	}
	return b.String()
}

func waits(ws []figures.WaitCount) string {
	parts := make([]string, len(ws))
	for i, x := range ws {
		parts[i] = fmt.Sprintf("%s in %s (%.2f)", x.Event, x.Query, x.Mean)
	}
	return strings.Join(parts, ", ")
}
