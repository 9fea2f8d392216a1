package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// testRun is one run of the CPU pass with the given milliseconds per order for the floor, the plain
// checkout and every kind, split over two processes so that sums are exercised.
func testRun(floor, plain, order float64) cpuRun {
	split := func(ms float64) cpuCost {
		return cpuCost{byPart: map[string]float64{"checkout": ms / 4, "temporal": 3 * ms / 4}}
	}
	r := cpuRun{floor: split(floor), plain: split(plain), visit: split(1), kinds: map[string]cpuCost{}}
	for _, k := range kinds {
		r.kinds[k.name] = split(order)
	}
	return r
}

// TestRatiosOverFloorAndPlain_EachRunItsOwn: the ratio over the floor and the plain checkout
// together is taken in each run and then summarized, not formed from the medians of its parts.
func TestRatiosOverFloorAndPlain_EachRunItsOwn(t *testing.T) {
	t.Parallel()
	r := cpuResult{withPlain: true, runs: []cpuRun{
		testRun(10, 10, 30), // 1.5
		testRun(20, 20, 40), // 1.0
		testRun(10, 30, 80), // 2.0
	}}
	got := r.ratiosOverFloorAndPlain("paid-at-once")
	assert.InDelta(t, 1.5, got.Median, 1e-9)
	assert.InDelta(t, 1.0, got.Lo, 1e-9)
	assert.InDelta(t, 2.0, got.Hi, 1e-9)
	// From the medians of the parts it would be 40 ÷ (10 + 20) = 1.33.
	assert.InDelta(t, 1.0, r.plainRatio().Median, 1e-9)
}

// TestRenderCPU_PlainCheckoutOnlyWhenMeasured: the section sets the kinds over the floor and the
// plain checkout together when the runs measured it, and leaves that table out otherwise.
func TestRenderCPU_PlainCheckoutOnlyWhenMeasured(t *testing.T) {
	t.Parallel()
	with := cpuResult{label: "this build", withPlain: true, parts: []string{"checkout", "temporal"},
		runs: []cpuRun{testRun(10, 10, 30), testRun(10, 10, 30), testRun(10, 10, 30)}}
	section := renderCPU(with, nil)
	assert.Contains(t, section, "| "+plainOrder.name+" | 10.00 (10.00–10.00) | 1.00 (1.00–1.00) |")
	assert.Contains(t, section, "| paid-at-once | 30.00 (30.00–30.00) | 1.50 (1.50–1.50) |")
	assert.Contains(t, section, "÷ (floor + plain checkout)")
	assert.Contains(t, section, "the visit alone 1.00 ms, plain checkout 10.00 ms; other processes",
		"each run's line names its visit and plain checkout")

	without := with
	without.withPlain = false
	section = renderCPU(without, nil)
	assert.NotContains(t, section, "plain checkout")
	assert.True(t, strings.HasSuffix(section, cpuEndMarker+"\n"))
}

// TestRenderCPU_OtherStacksByProcess: beside another stack's totals, its paid-at-once order is
// split by process as this build's is, each column the median of that stack's runs.
func TestRenderCPU_OtherStacksByProcess(t *testing.T) {
	t.Parallel()
	this := cpuResult{label: "this build", withPlain: true, parts: []string{"checkout", "temporal", "plain checkout"},
		runs: []cpuRun{testRun(10, 10, 30), testRun(10, 10, 30), testRun(10, 10, 30)}}
	before := cpuResult{label: "before", parts: []string{"checkout", "temporal"},
		runs: []cpuRun{testRun(10, 0, 40), testRun(10, 0, 44), testRun(10, 0, 80)}}
	section := renderCPU(this, []cpuResult{before})
	assert.Contains(t, section, "| stack | checkout | temporal |\n")
	assert.Contains(t, section, "| this build | 7.50 | 22.50 |\n")
	assert.Contains(t, section, "| before | 11.00 | 33.00 |\n")
}

// TestTurnOrder: with stacks measured in turns, each is first as often as last.
func TestTurnOrder(t *testing.T) {
	t.Parallel()
	assert.Equal(t, []int{0, 1, 2}, turnOrder(3, 0))
	assert.Equal(t, []int{2, 1, 0}, turnOrder(3, 1))
	assert.Equal(t, []int{0, 1, 2}, turnOrder(3, 4))
	firsts := map[int]int{}
	for r := range 4 {
		firsts[turnOrder(2, r)[0]]++
	}
	assert.Equal(t, map[int]int{0: 2, 1: 2}, firsts)
}
