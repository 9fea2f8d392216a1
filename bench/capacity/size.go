package main

import (
	"fmt"
	"math"
	"slices"
)

// The sizing's assumptions: hosts of hostCores cores for the checkout, Temporal and the front
// (HAProxy, the broker), each part's hosts at most busyTarget busy at the target (headroom for a
// campaign's peaks and for losing a host), PostgreSQL one primary per database with the cores of
// one of pgSizes, and no history shard busier than shardTarget.
const (
	hostCores   = 8
	busyTarget  = 0.7
	shardTarget = 0.5
	largestPG   = 128 // cores of the largest PostgreSQL host considered
	sizeWarmup  = 3.0
	sizeMeasure = 10.0
)

var pgSizes = []float64{4, 8, 16, 24, 32, 48, 64, 96, 128}

// Sizing is the topology the model sizes for the target and what it predicts of it.
type Sizing struct {
	Target   float64 // orders answered 201 per second
	Costs    Costs   // the costs sized with (no load generator, cart notices on the broker)
	Topology Topology
	Result   Result
	// Demand is each part's CPU per order answered 201, seconds.
	Demand map[string]float64
	// Shards16 is the same load with the 16 shards `make cluster` has; Sweep the shard counts
	// tried, smallest first.
	Shards16 Result
	Sweep    []ShardTry
	// Ceilings are the orders/s (answered 201) at which each resource would be fully busy in the
	// sized topology, lowest first.
	Ceilings []Ceiling
}

// ShardTry is one shard count and what the simulation made of it.
type ShardTry struct {
	Shards int
	Result Result
}

// Ceiling is a resource and the throughput at which it is saturated.
type Ceiling struct {
	Resource string
	Serial   bool // a serialization point, not CPU
	Absent   bool // not in this build: what it would be if it came back
	PerSec   float64
	Note     string
}

// size sizes a topology for target orders answered 201 per second at costs c: hosts from each
// part's CPU at busyTarget, then the simulation for the shoppers that place that load, the shard
// count (each shard letting shardIO writes be under way at once, as the runs' cluster did), and
// the latency. notifyHold is what an order's cart writes held the notification-queue lock while
// the notices were in PostgreSQL: a ceiling of its own, not simulated, since this build announces
// cart writes on the broker.
func size(c Costs, shardIO int, notifyHold, target float64, seed uint64) Sizing {
	c.Rest = withoutDriver(c.Rest)
	c.NotifyHold = 0
	sz := Sizing{Target: target, Costs: c, Demand: map[string]float64{}}
	placed := target / c.CreatedShare
	for _, p := range parts {
		sz.Demand[p] = (c.Rest[p] + c.Post[p] + c.Async[p]) / c.CreatedShare
	}
	t := Topology{Pools: map[string]Pool{}, Place: map[string]string{}, Procs: map[string]int{}, ShardIO: shardIO}
	for _, p := range []string{partAPI, partTemporal, partFront} {
		load := target * sz.Demand[p] // cores busy
		t.Pools[p] = Pool{Hosts: max(int(math.Ceil(load/(hostCores*busyTarget))), 1), Cores: hostCores}
		t.Place[p] = p
	}
	for _, p := range []string{partPGT, partPGC} {
		load := target * sz.Demand[p]
		cores := pgSizes[len(pgSizes)-1]
		for _, n := range pgSizes {
			if load <= n*busyTarget {
				cores = n
				break
			}
		}
		t.Pools[p] = Pool{Hosts: 1, Cores: cores}
		t.Place[p] = p
	}

	// The shoppers: a closed loop without think time, as measured; as many as place the target,
	// found from the loop's turn time with shards that are not the limit.
	t.Shards = 4096
	turn := 0.0
	for _, m := range []map[string]float64{c.Rest, c.Post} {
		for _, v := range m {
			turn += v
		}
	}
	turn += float64(c.PostCalls) * c.WriteShare * c.Commit
	shoppers := max(int(math.Ceil(placed*turn)), 1)
	for range 2 {
		r := Simulate(c, t, shoppers, sizeWarmup, sizeMeasure, seed)
		if r.PlacedPerSec <= 0 {
			break
		}
		shoppers = max(int(math.Round(float64(shoppers)*placed/r.PlacedPerSec)), 1)
	}

	// The shards: 16 as `make cluster` has them, then doubling until none is busier than shardTarget
	// and the target is carried.
	for s := clusterShards; s <= 4096; s *= 2 {
		t.Shards = s
		r := Simulate(c, t, shoppers, sizeWarmup, sizeMeasure, seed)
		sz.Sweep = append(sz.Sweep, ShardTry{s, r})
		if s == clusterShards {
			sz.Shards16 = r
		}
		if r.ShardBusy <= shardTarget && r.CreatedPerSec >= 0.97*target {
			sz.Topology, sz.Result = t, r
			break
		}
	}
	if sz.Topology.Pools == nil { // no count up to 4096 did: keep the last
		sz.Topology, sz.Result = t, sz.Sweep[len(sz.Sweep)-1].Result
	}
	sz.Ceilings = ceilings(sz, notifyHold)
	return sz
}

func withoutDriver(m map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if k != partDriver {
			out[k] = v
		}
	}
	return out
}

// ceilings reads, from the sized run, the throughput at which each resource would be saturated:
// its utilization grows in proportion to the orders (the CPU's exactly, a lock's as long as its
// hold does not grow), so the ceiling is the throughput ÷ the utilization.
func ceilings(sz Sizing, notifyHold float64) []Ceiling {
	r := sz.Result
	var out []Ceiling
	names := map[string]string{partAPI: "checkout hosts (API replicas, workers)", partTemporal: "Temporal hosts",
		partFront: "front hosts (HAProxy, broker, tracing, identity provider)", partPGT: "PostgreSQL primary of Temporal's database",
		partPGC: "PostgreSQL primary of the checkout's database"}
	for _, p := range []string{partAPI, partTemporal, partFront, partPGT, partPGC} {
		if b := r.PoolBusy[p]; b > 0 {
			out = append(out, Ceiling{Resource: names[p], PerSec: r.CreatedPerSec / b})
		}
	}
	for _, p := range []string{partPGT, partPGC} {
		if d := sz.Demand[p]; d > 0 {
			note := "the checkout's database is one primary, not sharded"
			if p == partPGT {
				note = "Temporal's SQL persistence keeps a cluster's histories in one database"
			}
			out = append(out, Ceiling{Resource: fmt.Sprintf("%s, on the largest host considered (%d cores)", names[p], largestPG),
				PerSec: largestPG / d, Note: note})
		}
	}
	if r.ShardBusy > 0 {
		out = append(out, Ceiling{Resource: fmt.Sprintf("history shards at the sized %d, the busiest", sz.Topology.Shards),
			Serial: true, PerSec: r.CreatedPerSec / r.ShardBusy})
	}
	if s := sz.Shards16; s.ShardBusy > 0 && sz.Topology.Shards != clusterShards {
		out = append(out, Ceiling{Resource: fmt.Sprintf("history shards at `make cluster`'s %d", clusterShards), Serial: true,
			PerSec: math.Min(s.CreatedPerSec/s.ShardBusy, s.CreatedPerSec/s.ShardMean)})
	}
	if notifyHold > 0 {
		out = append(out, Ceiling{Resource: "PostgreSQL's notification-queue lock, were the cart notices put back in PostgreSQL",
			Serial: true, Absent: true, PerSec: sz.Costs.CreatedShare / notifyHold, Note: "this build announces cart writes on the broker"})
	}
	slices.SortFunc(out, func(a, b Ceiling) int {
		switch {
		case a.PerSec == 0:
			return 1
		case b.PerSec == 0:
			return -1
		case a.PerSec < b.PerSec:
			return -1
		case a.PerSec > b.PerSec:
			return 1
		}
		return 0
	})
	return out
}
