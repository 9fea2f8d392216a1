package main

import (
	"strings"
	"testing"
)

func TestMedians_EachFigureTheMedianOfItsRounds(t *testing.T) {
	mk := func(pg, on, batched, best, confirmOn float64) round {
		return round{
			results: []result{
				{benchCase: benchCase{"hot", 1, 50}, pg: pgRun{tps: pg}, on: goRun{rate: on, batch: 25},
					batched: pgRun{tps: batched, batch: 25}},
				{benchCase: benchCase{"spread", 1000, 50}, pg: pgRun{tps: pg}, off: goRun{rate: on / 2}, on: goRun{rate: on}},
			},
			confirms: []confirmResult{{clients: 50, off: goRun{rate: 100}, on: goRun{rate: confirmOn}}},
			best:     pgRun{tps: best, clients: 2},
		}
	}
	rounds := []round{mk(1000, 9000, 400, 3000, 2000), mk(1200, 7000, 300, 2800, 1800), mk(1100, 8000, 500, 2900, 2200)}
	results, confirms, best := medians(rounds)
	if results[0].pg.tps != 1100 || results[0].on.rate != 8000 || results[0].batched.tps != 400 || results[0].on.batch != 25 {
		t.Fatalf("hot medians %+v", results[0])
	}
	if confirms[0].on.rate != 2000 || best.tps != 2900 || best.clients != 2 {
		t.Fatalf("confirm %+v best %+v", confirms[0], best)
	}
	table := spreads(rounds)
	// hot on ÷ batched (25 orders a commit): 9000/10000, 7000/7500, 8000/12500.
	for _, want := range []string{"| hot/clients=50, combining on ÷ pgbench batched | 0.90 | 0.93 | 0.64 | 0.90 (0.64–0.93) |",
		"| confirm hot/clients=50, combining on ÷ off | 20.00 | 18.00 | 22.00 | 20.00 (18.00–22.00) |"} {
		if !strings.Contains(table, want) {
			t.Fatalf("no %q in\n%s", want, table)
		}
	}
}

// A case is quiet only if every one of its rounds was: its disturbance is the most of its rounds',
// and one disturbed round is enough for the warning.
func TestMedians_DisturbanceTheMostOfTheRounds(t *testing.T) {
	mk := func(other float64) round {
		return round{results: []result{{benchCase: benchCase{"hot", 1, 50}, pg: pgRun{tps: 1000, other: other},
			on: goRun{rate: 9000, other: other / 2}}}}
	}
	results, _, _ := medians([]round{mk(0.02), mk(0.15), mk(0.03)})
	if results[0].pg.other != 0.15 || results[0].on.other != 0.075 {
		t.Fatalf("disturbance %v / %v, want the most of the rounds", results[0].pg.other, results[0].on.other)
	}
	if d := disturbance(results); !strings.Contains(d, "hot/clients=50") {
		t.Fatalf("one disturbed round is not reported: %q", d)
	}
}
