package main

import (
	"strings"
	"testing"
)

// The spread bar is judged on the spread rows alone, combining off against pgbench at the same
// count, while the 0.8× bar still reads every row.
func TestVerdicts_SpreadBarOnTheSpreadRowsWithCombiningOff(t *testing.T) {
	rs := []result{
		{benchCase: benchCase{"hot", 1, 8}, pg: pgRun{tps: 1000}, off: goRun{rate: 500}, on: goRun{rate: 9000}},
		{benchCase: benchCase{"spread", 1000, 8}, pg: pgRun{tps: 1000}, off: goRun{rate: 880}, on: goRun{rate: 990}},
		{benchCase: benchCase{"spread", 1000, 200}, pg: pgRun{tps: 1000}, off: goRun{rate: 1030}, on: goRun{rate: 5000}},
	}
	got := spreadVerdict(rs)
	want := "Spread target (combining off ≥ 1.0× pgbench at every client count) met for spread/clients=200 (1.03×); " +
		"missed for spread/clients=8 (0.88×)."
	if got != want {
		t.Fatalf("spread verdict\n got %q\nwant %q", got, want)
	}
	off := verdicts(rs)[1]
	if !strings.HasPrefix(off, "Target (Go with combining off ≥ 0.8× pgbench) met for spread/clients=8 (0.88×), "+
		"spread/clients=200 (1.03×); missed for hot/clients=8 (0.50×).") {
		t.Fatalf("0.8× verdict %q", off)
	}
}
