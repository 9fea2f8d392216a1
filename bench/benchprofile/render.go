package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/marketplace/checkout/internal/dev/benchkit"
)

// wrapperShare hides, from a list of functions, those on nearly every stack of their process
// (main loops, the server's handler chain): they say nothing about which call costs.
const wrapperShare = 0.9

func render(r result) string {
	var b strings.Builder
	b.WriteString(startMarker + "\n## Where the CPU of an order goes\n\n")
	b.WriteString("Written by `make bench-profile` (bench/benchprofile); running it again replaces this section.\n\n")
	fmt.Fprintf(&b, "- Command: `make bench-profile`, measured %s UTC on %d CPUs (%s), load average %.1f before; "+
		"the stack is this build's `checkout-dev dev` (the Temporal dev server on SQLite, PostgreSQL, NATS).\n",
		r.started.Format("2006-01-02 15:04"), benchkit.OnlineCPUs(), benchkit.CPUModel(), r.loadAvg)
	fmt.Fprintf(&b, "- What: %d empty workflows (the floor, as `make bench-cost` starts them, its worker in the tool's "+
		"process), then %d paid-at-once orders, one shopper at a time, each batch under `perf record -a -g -F %d` "+
		"(frame pointers); then %d more paid-at-once orders with PostgreSQL's processes alone under `perf record "+
		"--call-graph dwarf`. CPU ms per order per process from /proc over the same windows, the idle stack's rate "+
		"taken off (PostgreSQL's from the frame-pointer batch: unwinding from DWARF costs the process it samples); a call's ms per order is its share of its process's samples times that. Shares are inclusive "+
		"(a call and everything it calls), so a process's rows overlap and do not add up. An order here is what a shopper of `checkout-dev loadgen` does for one: an address, the cart's lines, the cart read, the preview, POST /orders and the order's page; the floor is the workflow call alone.\n",
		r.floor.n, r.paid.n, r.freq, r.pg.n)
	for _, bt := range []batch{r.floor, r.paid, r.pg} {
		if bt.other > 0.1 {
			fmt.Fprintf(&b, "- **Disturbed**: during the %s batch (%s), processes outside the stack took %.0f%% of the "+
				"machine.\n", bt.name, bt.window.Round(time.Second), 100*bt.other)
		}
	}
	b.WriteString("\n| process | empty workflow, CPU ms | paid-at-once, CPU ms | samples (paid-at-once) |\n|---|---:|---:|---:|\n")
	for _, p := range r.parts {
		samples := 0
		if t := r.paid.tally[p]; t != nil {
			samples = t.total
		}
		fmt.Fprintf(&b, "| %s | %.2f | %.2f | %d |\n", p, r.floor.ms[p], r.paid.ms[p], samples)
	}

	b.WriteString("\n### The checkout process (API, saga worker, outbox relay, consumers)\n\n")
	groupTable(&b, checkoutGroups, []batch{r.paid}, "checkout", true)
	b.WriteString("\nWhich of the product's calls each sample was under (its innermost frame of the product's code):\n\n")
	innerTable(&b, r.paid, "checkout", productCode, 20)
	b.WriteString("\nBy API handler or middleware (the innermost frame of package api):\n\n")
	innerTable(&b, r.paid, "checkout", apiCode, 12)
	b.WriteString("\nBy activity (the innermost frame of package activities):\n\n")
	innerTable(&b, r.paid, "checkout", activityCode, 12)
	b.WriteString("\nBy what started the work (the goroutine's outermost function):\n\n")
	entryTable(&b, r.paid, "checkout", 10)

	b.WriteString("\n### The Temporal dev server\n\n")
	groupTable(&b, temporalGroups, []batch{r.floor, r.paid}, "temporal", true)
	b.WriteString("\nWhich of the services' calls each sample was under (the innermost frame of service/), floor and paid-at-once:\n\n")
	innerTable(&b, r.floor, "temporal", temporalCode, 15)
	b.WriteString("\n")
	innerTable(&b, r.paid, "temporal", temporalCode, 15)
	b.WriteString("\nWhich persistence call (the innermost frame of common/persistence/), paid-at-once:\n\n")
	innerTable(&b, r.paid, "temporal", temporalStore, 12)

	b.WriteString("\n### PostgreSQL\n\n")
	groupTable(&b, postgresGroups, []batch{r.pg}, "postgres", true)
	b.WriteString("\nIts functions with the largest inclusive share, paid-at-once:\n\n")
	funcTable(&b, r.pg, "postgres", 18)
	b.WriteString("\nIts functions by their own samples (self), paid-at-once:\n\n")
	leafTable(&b, r.pg, "postgres", 12)
	b.WriteString(endMarker + "\n")
	return b.String()
}

func groupTable(b *strings.Builder, groups []group, batches []batch, part string, kernel bool) {
	b.WriteString("| group |")
	for _, bt := range batches {
		fmt.Fprintf(b, " %s: share | ms per order |", bt.name)
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|---:|", len(batches)) + "\n")
	row := func(name string, count func(*tally) int) {
		fmt.Fprintf(b, "| %s |", name)
		for _, bt := range batches {
			t := bt.tally[part]
			if t == nil || t.total == 0 {
				b.WriteString(" – | – |")
				continue
			}
			share := float64(count(t)) / float64(t.total)
			fmt.Fprintf(b, " %.1f%% | %.2f |", 100*share, share*bt.ms[part])
		}
		b.WriteString("\n")
	}
	for _, g := range groups {
		row(g.name, func(t *tally) int { return t.groups[g.name] })
	}
	if kernel {
		row("in the kernel (any frame)", func(t *tally) int { return t.kernel })
	}
}

func funcTable(b *strings.Builder, bt batch, part string, n int) {
	t := bt.tally[part]
	if t == nil || t.total == 0 {
		b.WriteString("(no samples)\n")
		return
	}
	b.WriteString("| function | share | ms per order |\n|---|---:|---:|\n")
	shown := 0
	for _, e := range top(t.funcs, len(t.funcs)) {
		share := float64(e.n) / float64(t.total)
		if share > wrapperShare {
			continue
		}
		fmt.Fprintf(b, "| `%s` | %.1f%% | %.2f |\n", strings.TrimPrefix(e.k, prefixOf(part)), 100*share, share*bt.ms[part])
		if shown++; shown == n {
			break
		}
	}
}

func innerTable(b *strings.Builder, bt batch, part, prefix string, n int) {
	t := bt.tally[part]
	if t == nil || t.total == 0 || len(t.inner[prefix]) == 0 {
		b.WriteString("(no samples)\n")
		return
	}
	fmt.Fprintf(b, "| %s: call | share | ms per order |\n|---|---:|---:|\n", bt.name)
	under := 0
	for _, v := range t.inner[prefix] {
		under += v
	}
	for _, e := range top(t.inner[prefix], n) {
		share := float64(e.n) / float64(t.total)
		fmt.Fprintf(b, "| `%s` | %.1f%% | %.2f |\n", strings.TrimPrefix(e.k, productCode), 100*share, share*bt.ms[part])
	}
	rest := float64(t.total-under) / float64(t.total)
	fmt.Fprintf(b, "| (under none) | %.1f%% | %.2f |\n", 100*rest, rest*bt.ms[part])
}

func entryTable(b *strings.Builder, bt batch, part string, n int) {
	countTable(b, bt, part, n, "started by", func(t *tally) map[string]int { return t.entries })
}

func leafTable(b *strings.Builder, bt batch, part string, n int) {
	countTable(b, bt, part, n, "function (self)", func(t *tally) map[string]int { return t.leaves })
}

// countTable lists the n largest of a part's counts with their share and ms per order.
func countTable(b *strings.Builder, bt batch, part string, n int, head string, counts func(*tally) map[string]int) {
	t := bt.tally[part]
	if t == nil || t.total == 0 {
		return
	}
	fmt.Fprintf(b, "| %s | share | ms per order |\n|---|---:|---:|\n", head)
	for _, e := range top(counts(t), n) {
		share := float64(e.n) / float64(t.total)
		fmt.Fprintf(b, "| `%s` | %.1f%% | %.2f |\n", e.k, 100*share, share*bt.ms[part])
	}
}
