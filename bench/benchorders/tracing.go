package main

import (
	"context"
	"fmt"
	"log"
	"math"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/marketplace/checkout/internal/dev/benchkit"
	"github.com/marketplace/checkout/internal/dev/pgserver"
)

const (
	tracingStart = "<!-- tracing-bench:start -->"
	tracingEnd   = "<!-- tracing-bench:end -->"
)

// tracingMode is one way of running the stack: its name and the settings that make it so.
type tracingMode struct {
	name string
	env  []string
	// stack and its Jaeger's pid (0 when it runs none).
	stack  *benchkit.Stack
	jaeger int
}

// cell is one measurement: n orders of one mode at one shopper count, with the CPU the product's
// process (and Jaeger's) spent on them and the machine's load around it.
type cell struct {
	mode, round, clients int
	r                    result
	cpuMs, jaegerCPUMs   float64 // per order
	loadBefore, loadEnd  float64
}

// tracingModes starts a stack per mode beside off (the stack already running, tracing off): every
// trace sampled at 10 % and at 100 %, each sending its spans to a Jaeger of its own on free ports
// (dev starts it), with every other setting at its default. On an error it returns the modes it
// started, to be stopped.
func tracingModes(ctx context.Context, off *benchkit.Stack) ([]*tracingMode, error) {
	modes := []*tracingMode{{name: "off", stack: off}}
	for _, ratio := range []string{"0.1", "1"} {
		ui, err := pgserver.FreePort()
		if err != nil {
			return modes, err
		}
		otlp, err := pgserver.FreePort()
		if err != nil {
			return modes, err
		}
		m := &tracingMode{name: "sampled " + percent(ratio), env: []string{"JAEGER_UI_PORT=" + strconv.Itoa(ui),
			"JAEGER_OTLP_PORT=" + strconv.Itoa(otlp), "TRACES_SAMPLE_RATIO=" + ratio}}
		log.Printf("starting the dev stack with traces %s", m.name)
		if m.stack, err = benchkit.StartStack(ctx, "checkout-bench-tracing-", m.env...); err != nil {
			return modes, err
		}
		for _, pid := range benchkit.PIDs() {
			if st, err := benchkit.ProcTimes(pid); err == nil && st.PPID == m.stack.Cmd.Process.Pid && st.Comm == "jaeger" {
				m.jaeger = pid
			}
		}
		modes = append(modes, m)
	}
	return modes, nil
}

func percent(ratio string) string {
	f, _ := strconv.ParseFloat(ratio, 64)
	return strconv.FormatFloat(f*100, 'f', -1, 64) + " %"
}

func cpuMs(pid int) float64 {
	if pid == 0 {
		return 0
	}
	st, err := benchkit.ProcTimes(pid)
	if err != nil {
		return 0
	}
	return (st.UTime + st.STime) * 1000 / benchkit.UserHZ
}

// measureTracing runs rounds of every mode in turn (the order rotating each round, so that a
// disturbance of the shared machine falls on each mode alike), n orders at 1 and at 20 shoppers.
func measureTracing(modes []*tracingMode, rounds, n int, place func(s *benchkit.Stack, key string, sh shopper) error) ([]cell, error) {
	var cells []cell
	for round := range rounds {
		for k := range modes {
			mi := (k + round) % len(modes)
			m := modes[mi]
			for _, clients := range []int{1, 20} {
				log.Printf("round %d: traces %s, %d shoppers: preparing %d", round+1, m.name, clients, n)
				shoppers := make([]shopper, n)
				base := int64(1_000_000*(round+1) + 100_000*(mi+1) + 10_000*clients)
				prep := measure("prepare", 8, n, func(i int) error {
					var err error
					shoppers[i], err = newShopper(m.stack, base+int64(i))
					return err
				})
				if prep.errors > 0 {
					return nil, fmt.Errorf("%d shoppers could not be prepared", prep.errors)
				}
				c := cell{mode: mi, round: round, clients: clients, loadBefore: benchkit.LoadAverage()}
				cpu0, j0 := cpuMs(m.stack.Cmd.Process.Pid), cpuMs(m.jaeger)
				c.r = measure("POST /api/v1/orders", clients, n, func(i int) error {
					return place(m.stack, fmt.Sprintf("trace-%d-%d-%d-%d", round, mi, clients, i), shoppers[i])
				})
				if c.r.errors > 0 {
					return nil, fmt.Errorf("traces %s at %d shoppers: %d errors", m.name, clients, c.r.errors)
				}
				c.cpuMs = (cpuMs(m.stack.Cmd.Process.Pid) - cpu0) / float64(n)
				c.jaegerCPUMs = (cpuMs(m.jaeger) - j0) / float64(n)
				c.loadEnd = benchkit.LoadAverage()
				cells = append(cells, c)
			}
		}
	}
	return cells, nil
}

func writeTracing(path string, modes []*tracingMode, cells []cell, rounds, n int, started time.Time) error {
	var b strings.Builder
	w := func(format string, args ...any) { b.WriteString(fmt.Sprintf(format, args...)) }
	w("%s\n## Tracing: what it costs\n\n", tracingStart)
	w("Measured %s on %d CPUs (%s), %s, by `make bench-orders` (`bin/benchorders`, after the section above): three "+
		"`checkout-dev dev` stacks as `make run` starts them, alike but for tracing — off (no `TRACES_ENDPOINT`, no "+
		"Jaeger), every new trace sampled at 10 %% (`TRACES_SAMPLE_RATIO=0.1`) and at 100 %%, each traced stack "+
		"sending its spans over OTLP/HTTP to a Jaeger of its own on this machine (`TRACES_SLOW_THRESHOLD` 2 s: a "+
		"request or step that slow, or one that fails, is kept whatever the ratio). %d rounds; in each, every stack "+
		"places %d orders at 1 shopper, then %d at 20 (`tok_ok`, one line, each shopper's cart and preview "+
		"prepared before the clock starts), the stacks' order turning each round so that a disturbance of the "+
		"shared machine falls on each alike. A figure is the median of the rounds, with the smallest and largest "+
		"in brackets. CPU is the `checkout-dev dev` process's own (the API and the worker; not PostgreSQL, Temporal or "+
		"Jaeger) per order, from `/proc`; Jaeger's is given apart.\n\n",
		started.UTC().Format("2006-01-02 15:04 UTC"), runtime.NumCPU(), benchkit.CPUModel(), runtime.Version(), rounds, n, n)
	w("| traces | shoppers | p50 ms | p99 ms | orders/s | checkout CPU ms/order | Jaeger CPU ms/order |\n")
	w("|---|---:|---|---|---|---|---:|\n")
	type key struct{ mode, clients int }
	fig := func(k key, f func(c cell) float64) (float64, string) {
		var vs []float64
		for _, c := range cells {
			if c.mode == k.mode && c.clients == k.clients {
				vs = append(vs, f(c))
			}
		}
		sp := benchkit.SpreadOf(vs)
		return sp.Median, fmt.Sprintf("%.1f (%.1f–%.1f)", sp.Median, sp.Lo, sp.Hi)
	}
	p50 := map[key]float64{}
	cpu := map[key]float64{}
	for _, clients := range []int{1, 20} {
		for mi, m := range modes {
			k := key{mi, clients}
			var s50, s99, sRate, sCPU string
			p50[k], s50 = fig(k, func(c cell) float64 { return c.r.pct(0.5) })
			_, s99 = fig(k, func(c cell) float64 { return c.r.pct(0.99) })
			_, sRate = fig(k, func(c cell) float64 { return c.r.rate() })
			cpu[k], sCPU = fig(k, func(c cell) float64 { return c.cpuMs })
			j, _ := fig(k, func(c cell) float64 { return c.jaegerCPUMs })
			jaeger := "—"
			if m.jaeger != 0 {
				jaeger = fmt.Sprintf("%.1f", j)
			}
			w("| %s | %d | %s | %s | %s | %s | %s |\n", m.name, clients, s50, s99, sRate, sCPU, jaeger)
		}
	}
	w("\nAgainst tracing off (medians):\n\n")
	for _, clients := range []int{1, 20} {
		off := key{0, clients}
		for mi := 1; mi < len(modes); mi++ {
			k := key{mi, clients}
			w("- %s, %d shopper(s): p50 %+.1f ms (%+.0f %%), checkout CPU %+.1f ms per order (%+.0f %%).\n",
				modes[mi].name, clients, p50[k]-p50[off], 100*(p50[k]/p50[off]-1), cpu[k]-cpu[off], 100*(cpu[k]/cpu[off]-1))
		}
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, c := range cells {
		lo, hi = min(lo, c.loadBefore, c.loadEnd), max(hi, c.loadBefore, c.loadEnd)
	}
	if hi > float64(runtime.NumCPU()) {
		w("\n**The run was disturbed: the machine's 1-minute load average stayed between %.1f and %.1f on %d CPUs "+
			"during the cells, so other work ran beside the stacks.** The latency at 20 shoppers, bound by the CPU, "+
			"moved most (see the brackets); CPU per order is the steadier measure of the cost. Compare figures "+
			"within this run only.\n", lo, hi, runtime.NumCPU())
	}
	w("\nThe machine during the cells (1-minute load average as each began and ended):\n\n")
	w("| round | traces | shoppers | load before | load at the end |\n|---:|---|---:|---:|---:|\n")
	for _, c := range cells {
		w("| %d | %s | %d | %.1f | %.1f |\n", c.round+1, modes[c.mode].name, c.clients, c.loadBefore, c.loadEnd)
	}
	w("%s\n", tracingEnd)
	fmt.Print(b.String())
	return benchkit.WriteSection(path, tracingStart, tracingEnd, b.String())
}
