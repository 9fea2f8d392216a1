package main

import (
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/bench/internal/figures"
)

// openQueue runs Poisson arrivals at rate lambda through steps made for each arrival, for n
// arrivals after a warm-up of n/10, and returns their sojourn times.
func openQueue(s *sim, lambda float64, n int, steps func() []step) []float64 {
	var out []float64
	warm := n / 10
	arrived := 0
	var arrive func()
	arrive = func() {
		arrived++
		if arrived > n+warm {
			return
		}
		start, i := s.now, arrived
		run(steps(), func() {
			if i > warm {
				out = append(out, s.now-start)
			}
		})
		s.at(s.now+s.exp(1/lambda), arrive)
	}
	s.at(0, arrive)
	s.runUntil(math.Inf(1))
	return out
}

// A processor-sharing host of one core fed by Poisson arrivals with exponential work is M/M/1:
// mean sojourn 1/(μ−λ).
func TestProcessorSharingIsMM1(t *testing.T) {
	s := newSim(7)
	s.addPool("cpu", 1, 1)
	const lambda, mu = 0.7, 1.0
	r := openQueue(s, lambda, 200000, func() []step { return []step{s.cpu("cpu", "", 0, 1/mu)} })
	assert.InEpsilon(t, 1/(mu-lambda), mean(r), 0.05)
}

// Processor sharing on c cores with exponential work is, in the number of jobs, the M/M/c queue:
// its mean sojourn is Erlang C's.
func TestProcessorSharingOnCoresIsMMc(t *testing.T) {
	s := newSim(11)
	s.addPool("cpu", 1, 2)
	const lambda, mu, c = 1.5, 1.0, 2
	r := openQueue(s, lambda, 200000, func() []step { return []step{s.cpu("cpu", "", 0, 1/mu)} })
	assert.InEpsilon(t, erlangCSojourn(lambda, mu, c), mean(r), 0.05)
}

// A lock held for exponential times, first come first served, is M/M/1 FCFS: its sojourn is
// exponential with rate μ−λ, so its mean is 1/(μ−λ) and its p99 ln(100)/(μ−λ).
func TestSerialIsMM1FCFS(t *testing.T) {
	s := newSim(13)
	s.addLocks("lock", 1, 1)
	l := s.locks["lock"][0]
	const lambda, mu = 0.6, 1.0
	r := openQueue(s, lambda, 200000, func() []step {
		d := s.exp(1 / mu)
		return []step{holding(l, s.wait(d))}
	})
	assert.InEpsilon(t, 1/(mu-lambda), mean(r), 0.05)
	assert.InEpsilon(t, math.Log(100)/(mu-lambda), quantile(r, 0.99), 0.07)
}

// A resource of c slots held for exponential times, first come first served, is M/M/c: its mean
// sojourn is Erlang C's, and each slot is held λ/(cμ) of the time.
func TestSlotsAreMMc(t *testing.T) {
	s := newSim(17)
	const lambda, mu, c = 3.0, 1.0, 4
	s.addLocks("shard", 1, c)
	l := s.locks["shard"][0]
	r := openQueue(s, lambda, 200000, func() []step {
		d := s.exp(1 / mu)
		return []step{holding(l, s.wait(d))}
	})
	assert.InEpsilon(t, erlangCSojourn(lambda, mu, c), mean(r), 0.05)
	assert.InEpsilon(t, lambda/(c*mu), l.busy/(c*l.last), 0.03)
}

// A closed network of customers thinking, then visiting two processor-sharing stations, matches
// exact mean value analysis in throughput and response time.
func TestClosedNetworkMatchesMVA(t *testing.T) {
	demands := []float64{0.05, 0.03}
	const think, customers, horizon, warm = 0.2, 10, 20000.0, 500.0
	s := newSim(17)
	s.warmup = warm
	s.addPool("a", 1, 1)
	s.addPool("b", 1, 1)
	var responses []float64
	var loop func()
	loop = func() {
		run([]step{s.wait(s.exp(think))}, func() {
			start := s.now
			run([]step{s.cpu("a", "", 0, demands[0]), s.cpu("b", "", 0, demands[1])}, func() {
				if s.now >= warm {
					responses = append(responses, s.now-start)
				}
				loop()
			})
		})
	}
	for range customers {
		loop()
	}
	s.runUntil(horizon)
	x, r := mva(demands, think, customers)
	assert.InEpsilon(t, x, float64(len(responses))/(horizon-warm), 0.03)
	assert.InEpsilon(t, r, mean(responses), 0.03)
}

// Cores shared among processes: two jobs in one single-threaded process and one job alone on two
// cores — the lone job has a core, the pair shares the other.
func TestProcessSharing(t *testing.T) {
	s := newSim(1)
	s.addPool("cpu", 1, 2)
	h := s.pools["cpu"].hosts[0]
	var done []float64
	finish := func() { done = append(done, s.now) }
	h.serve("p", 1, 1, finish)
	h.serve("p", 1, 1, finish)
	h.serve("", 0, 1, finish)
	s.runUntil(10)
	require.Len(t, done, 3)
	assert.InDelta(t, 1, done[0], 1e-9) // the lone job, a full core
	assert.InDelta(t, 2, done[1], 1e-9) // the pair, half a core each
	assert.InDelta(t, 2, done[2], 1e-9)
}

func testCosts() Costs {
	return Costs{
		Rest:      map[string]float64{partAPI: 0.004, partPGC: 0.007, partFront: 0.01, partDriver: 0.005},
		Post:      map[string]float64{partAPI: 0.015, partTemporal: 0.03, partPGT: 0.017, partPGC: 0.02},
		Async:     map[string]float64{partAPI: 0.02, partTemporal: 0.035, partPGT: 0.02, partPGC: 0.024},
		PostCalls: 12, AsyncCalls: 14, WriteShare: 0.29, Commit: 0.00085, NotifyHold: 0.011, CreatedShare: 0.94,
	}
}

// The same costs, topology and seed give the same result; another seed another.
func TestSimulateIsDeterministic(t *testing.T) {
	c, top := testCosts(), machine(2, 1, false)
	a := Simulate(c, top, 30, 10, 30, 5)
	b := Simulate(c, top, 30, 10, 30, 5)
	assert.True(t, reflect.DeepEqual(a, b), "same seed: %+v against %+v", a, b)
	other := Simulate(c, top, 30, 10, 30, 6)
	assert.NotEqual(t, a.P99, other.P99)
}

// A prediction is one simulation per seed from its own on, and each of its figures their median.
func TestPredictionIsTheMedianOfItsSeeds(t *testing.T) {
	c, top := testCosts(), machine(2, 1, false)
	p := predict(c, top, 30, 11)
	require.Len(t, p.Runs, validationSeeds)
	var p99s []float64
	for i, r := range p.Runs {
		assert.True(t, reflect.DeepEqual(r, Simulate(c, top, 30, validateWarmup, validateMeasure, 11+uint64(i))), "run %d", i)
		p99s = append(p99s, r.P99)
	}
	assert.Equal(t, quantile(p99s, 0.5), p.P99)
	lo, hi := p.span(p99ms)
	assert.Less(t, lo, hi, "the seeds give different tails")
	assert.Equal(t, fmt.Sprintf("%.0f (%.0f–%.0f)", 1000*p.P99, lo, hi), spread(p, "%.0f", p99ms))
}

// Calls in flight are the share of time a lone shopper spends in Temporal's database: half, when its
// other requests cost as much CPU as its calls there (Little's law with one customer).
func TestInFlightIsTimeInTheDatabase(t *testing.T) {
	c := Costs{Rest: map[string]float64{partDriver: 0.01}, Post: map[string]float64{partPGT: 0.01}, PostCalls: 4,
		WriteShare: 0.5, CreatedShare: 1}
	top := machine(1, 1, false)
	r := Simulate(c, top, 1, 10, 2000, 9)
	assert.InEpsilon(t, 0.5, r.InFlight, 0.02)
	c.Rest[partDriver] = 0.03
	r = Simulate(c, top, 1, 10, 2000, 9)
	assert.InEpsilon(t, 0.25, r.InFlight, 0.02)
}

// A shard bound by its writes' flushes carries as many more orders as it has write slots: the
// topology's ShardIO reaches the simulated shards.
func TestShardSlotsMultiplyWhatAShardCarries(t *testing.T) {
	c := Costs{Rest: map[string]float64{partDriver: 0.0001}, Post: map[string]float64{partPGT: 0.0001}, PostCalls: 1,
		WriteShare: 1, Commit: 0.01, CreatedShare: 1}
	top := machine(2, 1, false)
	top.Shards = 1
	one := Simulate(c, top, 20, 10, 200, 4)
	top.ShardIO = 4
	four := Simulate(c, top, 20, 10, 200, 4)
	assert.InEpsilon(t, 1/(2*c.Commit), one.PlacedPerSec, 0.05, "two writes an order, one at a time")
	assert.InEpsilon(t, 4*one.PlacedPerSec, four.PlacedPerSec, 0.05)
	assert.InDelta(t, 1, one.ShardBusy, 0.02)
	assert.InDelta(t, 1, four.ShardBusy, 0.02, "all four slots held")
}

// Saturated, the closed loop carries what the cores can serve: cores ÷ CPU per order.
func TestSaturatedThroughputIsCoresOverDemand(t *testing.T) {
	c := testCosts()
	c.NotifyHold = 0
	var demand float64
	for _, m := range []map[string]float64{c.Rest, c.Post, c.Async} {
		demand += sum(m)
	}
	top := machine(2, 1, false)
	top.Shards = 1024
	r := Simulate(c, top, 200, 60, 240, 3)
	assert.InEpsilon(t, 2/demand, r.PlacedPerSec, 0.03)
	assert.InDelta(t, 1, r.PoolBusy["machine"], 0.01)
}

// The calibration spends every CPU share the calibration run measured, and no more: the phases'
// costs add up to each part's CPU per placed order.
func TestCalibrationSpendsTheMeasuredCPU(t *testing.T) {
	docs := filepath.Join("..", "..", "docs")
	var cluster, campaign figures.Results
	var lock figures.LockWaitResults
	require.NoError(t, readJSON(filepath.Join(docs, "bench-cluster.json"), &cluster))
	require.NoError(t, readJSON(filepath.Join(docs, "bench-campaign.json"), &campaign))
	require.NoError(t, readJSON(filepath.Join(docs, "bench-lockwaits.json"), &lock))
	in, err := calibrate(cluster, campaign, lock, 50)
	require.NoError(t, err)
	run, err := find(cluster, "campaign", 50)
	require.NoError(t, err)
	cpu := run.Window.CPU
	measured := (cpu.Checkout + cpu.Temporal + cpu.Postgres + cpu.Driver + cpu.OtherPct + cpu.Balancer + cpu.Support) / 100 / placedPerSec(run)
	c := in.Costs
	assert.InEpsilon(t, measured, sum(c.Rest)+sum(c.Post)+sum(c.Async), 1e-9)
	assert.InEpsilon(t, cpu.Temporal/100/placedPerSec(run), c.Post[partTemporal]+c.Async[partTemporal], 1e-9)
	assert.InEpsilon(t, cpu.Support/100/placedPerSec(run), c.Async[partFront], 1e-9, "the broker's, tracing's and the identity provider's CPU comes after the answer")
	assert.Positive(t, in.NotifyHold)
	assert.Equal(t, waitsOnNotify(run), c.NotifyHold > 0, "the lock is simulated only where the run waited on it")
	assert.InEpsilon(t, visitCheckout, c.Rest[partAPI], 1e-9, "the other requests cost what the visit measured")
	assert.InEpsilon(t, visitPostgres, c.Rest[partPGC], 1e-9)
	assert.Equal(t, int(math.Round(run.Window.Persistence.PerSecond/placedPerSec(run))), c.PostCalls+c.AsyncCalls)
}

// mva is exact mean value analysis of a closed network of single-server queueing stations of
// the given demands and a delay (think) station: throughput and response time (the think time
// not counted) at n customers.
func mva(demands []float64, think float64, n int) (x, r float64) {
	q := make([]float64, len(demands))
	for k := 1; k <= n; k++ {
		r = 0
		rs := make([]float64, len(demands))
		for i, d := range demands {
			rs[i] = d * (1 + q[i])
			r += rs[i]
		}
		x = float64(k) / (r + think)
		for i := range q {
			q[i] = x * rs[i]
		}
	}
	return x, r
}

// erlangCSojourn is the M/M/c queue's mean sojourn time.
func erlangCSojourn(lambda, mu float64, c int) float64 {
	a := lambda / mu
	rho := a / float64(c)
	var sum, term float64 = 0, 1
	for k := 0; k < c; k++ {
		if k > 0 {
			term *= a / float64(k)
		}
		sum += term
	}
	last := term * a / float64(c) // a^c / c!
	pWait := last / (1 - rho) / (sum + last/(1-rho))
	return pWait/(float64(c)*mu-lambda) + 1/mu
}

// A run that recorded the SDK's latencies names its task queue's wait; one that did not points to
// the run that measured it.
func TestWaitedWhere(t *testing.T) {
	var r figures.Run
	assert.Contains(t, waitedWhere(r), "as a later run that recorded the SDK's latencies measured")
	r.Window.SDK = []figures.Latency{{Series: "workflow_task_execution", InFlight: 4, MeanMs: 150},
		{Series: "workflow_task_schedule_to_start", PerSecond: 25.8, MeanMs: 5134.7, InFlight: 132.3}}
	assert.Contains(t, waitedWhere(r), "(132 workflow tasks at once waiting for the workers' pollers, 5135 ms each")
}
