package main

import (
	"math"
	"slices"
)

// The parts of the checkout whose CPU the model serves, as the runs measured them.
const (
	partAPI      = "checkout" // the API replicas and the workers
	partTemporal = "temporal" // Temporal's four services
	partPGT      = "pg-temporal"
	partPGC      = "pg-checkout"
	partFront    = "front"  // HAProxy, the broker, tracing, the identity provider and what the runs did not attribute
	partDriver   = "driver" // the load generator (its shoppers' own CPU)
)

var parts = []string{partAPI, partTemporal, partPGT, partPGC, partFront, partDriver}

// Costs are what one placed order (one turn of a shopper's loop) costs each part, in CPU
// seconds, split into the phases of the loop, and what it holds of the serialization points.
type Costs struct {
	// Rest is the shopper's other requests of one turn (address, cart writes, preview, the
	// order's page, 3-D Secure or cancel): part → CPU seconds.
	Rest map[string]float64
	// Post is POST /orders' own path (the Update-with-Start and the order's steps it waits for),
	// spread over PostCalls persistence calls; Async is the order's work after its answer (the
	// hold, timers, signals, the rest of its workflow tasks), over AsyncCalls calls.
	Post, Async           map[string]float64
	PostCalls, AsyncCalls int
	// WriteShare is the share of persistence calls that write an execution (Create/Update
	// WorkflowExecution), each holding one of its history shard's write slots; Commit is a
	// write's flush, the latency it adds beyond CPU while the slot is held.
	WriteShare float64
	Commit     float64
	// NotifyHold is how long one order's cart writes hold PostgreSQL's notification-queue lock
	// (0: the build's cart notices are on the broker).
	NotifyHold float64
	// CreatedShare is the share of placed orders answered 201 (the rest were declined).
	CreatedShare float64
}

// Pool is a part's hosts: how many, and cores each.
type Pool struct {
	Hosts int
	Cores float64
}

// Topology says where each part runs, how many history shards there are and how many writes of
// one shard may be under way at once.
type Topology struct {
	// Pools by name; Place maps each part to a pool (several parts may share one); Procs is how
	// many processes of a part run on each of its hosts, each with as many threads as the host has
	// cores (0: a process per request, one thread, as PostgreSQL's backends).
	Pools  map[string]Pool
	Place  map[string]string
	Procs  map[string]int
	Shards int
	// ShardIO is history.shardIOConcurrency: the writes of one shard under way at once (0: 1).
	ShardIO int
}

// Result is what a simulation measured after its warm-up.
type Result struct {
	Shoppers       int
	Seconds        float64
	PlacedPerSec   float64
	CreatedPerSec  float64
	P50, P99, Mean float64 // POST /orders, seconds
	// PoolBusy is each pool's mean CPU busy share (0–1); ShardBusy the busiest shard's share of
	// its write slots held, and ShardMean all shards' mean; ShardHold a write's mean hold of its
	// slot (seconds);
	// NotifyBusy the notification lock's; InFlight the persistence calls in Temporal's database at
	// once, on average (waiting for their shard included).
	PoolBusy                                              map[string]float64
	ShardBusy, ShardMean, ShardHold, NotifyBusy, InFlight float64
}

// Simulate runs shoppers in a closed loop through topology t at costs c for warmup then
// measure seconds of simulated time.
func Simulate(c Costs, t Topology, shoppers int, warmup, measure float64, seed uint64) Result {
	s := newSim(seed)
	s.warmup = warmup
	for name, p := range t.Pools {
		s.addPool(name, p.Hosts, p.Cores)
	}
	s.addLocks("shard", max(t.Shards, 1), t.ShardIO)
	s.addLocks("notify", 1, 1)
	inDatabase := &gauge{s: s}
	on := func(part string, cpu float64) step {
		if cpu <= 0 {
			return func(next func()) { next() }
		}
		return s.cpu(t.Place[part], part, t.Procs[part], cpu)
	}

	// calls is one phase's persistence calls, the phase's CPU spread evenly over them: the
	// checkout's share (its own work and its database's) then Temporal's, then the call itself
	// in Temporal's database, a write holding one of its shard's write slots with its flush.
	calls := func(costs map[string]float64, n int, shard *serial) []step {
		if n < 1 {
			n = 1
		}
		var steps []step
		for range n {
			steps = append(steps, on(partAPI, costs[partAPI]/float64(n)), on(partPGC, costs[partPGC]/float64(n)),
				on(partFront, costs[partFront]/float64(n)), on(partTemporal, costs[partTemporal]/float64(n)))
			call := on(partPGT, costs[partPGT]/float64(n))
			if s.rng.Float64() < c.WriteShare {
				call = holding(shard, call, s.wait(c.Commit))
			}
			steps = append(steps, within(inDatabase, call))
		}
		return steps
	}
	rest := func() []step {
		steps := []step{on(partDriver, c.Rest[partDriver]), on(partFront, c.Rest[partFront]), on(partAPI, c.Rest[partAPI])}
		if c.NotifyHold > 0 {
			steps = append(steps, holding(s.locks["notify"][0], s.wait(c.NotifyHold)))
		}
		return append(steps, on(partPGC, c.Rest[partPGC]))
	}

	var latencies []float64
	placed := 0
	var turn func()
	turn = func() {
		run(rest(), func() {
			start := s.now
			shard := s.locks["shard"][s.rng.IntN(len(s.locks["shard"]))]
			run(calls(c.Post, c.PostCalls, shard), func() {
				if s.now >= warmup { // completed in the window: throughput counts completions
					latencies = append(latencies, s.now-start)
					placed++
				}
				run(calls(c.Async, c.AsyncCalls, shard), func() {})
				turn()
			})
		})
	}
	for range shoppers {
		turn()
	}
	s.runUntil(warmup + measure)

	r := Result{Shoppers: shoppers, Seconds: measure, PoolBusy: map[string]float64{}}
	r.PlacedPerSec = float64(placed) / measure
	r.CreatedPerSec = r.PlacedPerSec * c.CreatedShare
	r.P50, r.P99, r.Mean = quantile(latencies, 0.50), quantile(latencies, 0.99), mean(latencies)
	for name, p := range s.pools {
		var busy, cores float64
		for _, h := range p.hosts {
			h.advance()
			busy += h.busy
			cores += h.cores
		}
		r.PoolBusy[name] = busy / (cores * measure)
	}
	var holds int
	var held float64
	for _, l := range s.locks["shard"] {
		occupied := l.occupancy(measure)
		r.ShardBusy = math.Max(r.ShardBusy, occupied)
		r.ShardMean += occupied / float64(len(s.locks["shard"]))
		holds += l.holds
		held += l.busy
	}
	if holds > 0 {
		r.ShardHold = held / float64(holds)
	}
	r.NotifyBusy = s.locks["notify"][0].occupancy(measure)
	inDatabase.add(0)
	r.InFlight = inDatabase.area / measure
	return r
}

// quantile is the q-quantile of xs (nearest rank), 0 for none.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sorted := slices.Clone(xs)
	slices.Sort(sorted)
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}
