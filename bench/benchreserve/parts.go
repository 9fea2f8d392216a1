package main

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/marketplace/checkout/internal/dev/benchkit"
)

// reserveParts are BenchmarkReserveParts' parts in order (inventory/reserveparts_bench_test.go):
// pgbench's statement from the Go client, then one guarantee of a reservation more at a time, to
// the engine.
var reserveParts = []struct{ name, what string }{
	{"statement", "pgbench's UPDATE … INSERT, one statement in autocommit"},
	{"function", "reserve_order's one-line path with warehouse 1 taken and no guards: the same work in a PL/pgSQL function"},
	{"nearest", "and the nearest warehouse that holds the line chosen"},
	{"reserve_order", "and the order's advisory lock and the lookup of a retried order's reservations: the schema's function itself"},
	{"hold", "the engine's statement: reserve_order and the hold's expiry recorded on the order"},
	{"engine", "Engine.Reserve, combining off"},
}

// partsRound is one round: pgbench's run and each part's.
type partsRound struct {
	pg    pgRun
	parts map[string]goRun
}

// parts measures a spread reservation with combining off beside pgbench at clients, part by part,
// rounds times, the parts' order reversed every other round, and prints the table.
func parts(ctx context.Context, seconds, rounds, clients int) error {
	if !slices.Contains([]int{8, 50, 200}, clients) {
		return fmt.Errorf("-parts %d: BenchmarkReserveParts runs 8, 50 or 200 clients", clients)
	}
	root, err := benchkit.ModuleRoot()
	if err != nil {
		return err
	}
	b, done, err := setUp(ctx, root, seconds, rounds)
	if err != nil {
		return err
	}
	defer done()
	c := benchCase{shape: "spread", skus: spreadSKUs, clients: clients}
	var measured []partsRound
	for n := range b.rounds {
		b.round = n + 1
		logf("round %d of %d", b.round, b.rounds)
		r := partsRound{parts: map[string]goRun{}}
		if r.pg, err = steady(c.name()+" pgbench", func(attempt int) (pgRun, error) {
			return b.runPgbench(ctx, c.shape, c.skus, c.clients, 1, attempt)
		}); err != nil {
			return err
		}
		order := slices.Clone(reserveParts)
		if n%2 == 1 {
			slices.Reverse(order)
		}
		for _, p := range order {
			name := "BenchmarkReserveParts/" + c.name() + "/part=" + p.name
			pattern := fmt.Sprintf("^BenchmarkReserveParts$/^%s$/^clients=%d$/^part=%s$", c.shape, c.clients,
				regexp.QuoteMeta(p.name))
			if r.parts[p.name], err = steady(name, func(int) (goRun, error) {
				return b.runGoPattern(ctx, c.name()+" part="+p.name, pattern, name, "reservations/s")
			}); err != nil {
				return err
			}
		}
		measured = append(measured, r)
	}
	fmt.Print(partsTable(measured, c, seconds))
	return nil
}

// partsTable is each part's median rate, its ratio to pgbench (each round's own, their median and
// spread), and its client CPU per order.
func partsTable(rounds []partsRound, c benchCase, seconds int) string {
	var b strings.Builder
	med := func(f func(partsRound) float64) (m, lo, hi float64) {
		xs := make([]float64, len(rounds))
		for i, r := range rounds {
			xs[i] = f(r)
		}
		sp := benchkit.SpreadOf(xs)
		return sp.Median, sp.Lo, sp.Hi
	}
	// A run's disturbance is the most of its rounds'.
	most := func(f func(partsRound) float64) float64 {
		_, _, hi := med(f)
		return hi
	}
	tps, _, _ := med(func(r partsRound) float64 { return r.pg.tps })
	cpu, _, _ := med(func(r partsRound) float64 { return r.pg.clientCPU })
	other := most(func(r partsRound) float64 { return r.pg.other })
	fmt.Fprintf(&b, "Spread reservations, combining off, part by part, %s, %d rounds of %d s each (medians; a ratio is each round's own, with its lowest and highest):\n\n",
		c.name(), len(rounds), seconds)
	b.WriteString("| part | what it adds | reservations/s | ÷ pgbench | client CPU µs per order | other processes |\n|---|---|---:|---:|---:|---:|\n")
	fmt.Fprintf(&b, "| pgbench | its transaction: BEGIN, the UPDATE … INSERT, COMMIT | %.0f | 1 | %.1f | %.0f%% |\n", tps, cpu, 100*other)
	for _, p := range reserveParts {
		rate, _, _ := med(func(r partsRound) float64 { return r.parts[p.name].rate })
		ratio, lo, hi := med(func(r partsRound) float64 { return r.parts[p.name].rate / r.pg.tps })
		pcpu, _, _ := med(func(r partsRound) float64 { return r.parts[p.name].clientCPU })
		pother := most(func(r partsRound) float64 { return r.parts[p.name].other })
		fmt.Fprintf(&b, "| %s | %s | %.0f | %.2f (%.2f–%.2f) | %.1f | %.0f%% |\n", p.name, p.what, rate, ratio, lo, hi, pcpu, 100*pother)
	}
	return b.String()
}
