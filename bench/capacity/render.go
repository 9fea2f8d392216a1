package main

import (
	"fmt"
	"math"
	"strings"

	"github.com/marketplace/checkout/bench/internal/figures"
)

// maxMiss is the validation's target: a prediction within 20 % of the measurement.
const maxMiss = 0.20

func render(in Inputs, v Validation, sz Sizing, calibrateAt int, seed uint64) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("%s\n## Capacity: a queueing model of the campaign, checked against the cluster's runs, sized for 1,000 orders/s\n\n", startMarker)
	w("Written by `make capacity` (bench/capacity); running it again replaces this section. It measures nothing: it reads "+
		"docs/bench-cluster.json, docs/bench-campaign.json and docs/bench-lockwaits.json and simulates, with fixed seeds "+
		"(%d to %d for the validation, %d for the sizing), so the same files give the same section.\n\n", seed,
		seed+validationSeeds-1, seed)
	w("**The model.** A discrete-event simulation of a closed network: each of N shoppers loops as `checkout-dev loadgen`'s "+
		"shoppers do, without think time — the other requests of an order (address, cart writes, preview, its page, 3-D Secure "+
		"or cancel), then POST /orders, then again — and each order leaves work behind after its answer (its hold, timers, "+
		"signals, the rest of its workflow tasks, its events through the broker and its traces to Jaeger) that takes CPU "+
		"but no shopper waits for. A request is a chain of CPU bursts "+
		"(exponentially distributed, so a chain of k bursts varies as an Erlang-k), one per Temporal persistence call of its "+
		"phase: the checkout's share, Temporal's share, then the call in Temporal's database. Every host's cores are shared "+
		"by processor sharing among the bursts on it. Two serialization points are simulated, their waits first come first "+
		"served: a history shard's writes, each holding one of the shard's %d write slots across its call to the database "+
		"(the history service takes one of its shard's I/O semaphore's history.shardIOConcurrency permits before "+
		"CreateWorkflowExecution and UpdateWorkflowExecution and releases it after the call: "+
		"service/history/shard/context_impl.go; %d as the runs' cluster had it), for the write's PostgreSQL burst and its "+
		"flush; and PostgreSQL's notification-queue lock, held one at a time, which every cart write's commit took while "+
		"the cart notices were a trigger's `pg_notify` (their lock waits were that lock's, `object` in UpdateCartDoc and "+
		"CreateCart; simulated only where the calibration run waited on it). The hot SKU's row is not a lock of the model: the saga's runs "+
		"on the cluster had at most %.3f backends on average waiting on the stock rows' locks (ReserveOrder, "+
		"LockInventoryRows), and the combined reserve carries tens of thousands of reservations a second on one row "+
		"(reserve path section). Only costs per order go in, each from a run named below; the shopper count, the machine's "+
		"cores and the shards are the topology's.\n\n", in.ShardIO, in.ShardIO, v.HotRowWaits)

	w("Inputs (costs per placed order, every POST /orders whatever its answer; the campaign mix, 2.5 lines per order):\n\n")
	w("| input | value | from |\n|---|---:|---|\n")
	for _, i := range in.List {
		w("| %s | %s | %s |\n", i.What, i.Value, i.From)
	}
	c := in.Costs
	w("\nSo a placed order's CPU, by phase: the other requests %s, POST /orders' path %s over %d persistence calls, after "+
		"the answer %s over %d calls.\n\n", ms(sum(c.Rest)), ms(sum(c.Post)), c.PostCalls, ms(sum(c.Async)), c.AsyncCalls)

	w("### Validation on this machine\n\n")
	w("The cluster's campaign runs (`make bench-cluster`), every part on the machine's %d CPUs and %d history shards "+
		"of %d write slots each, "+
		"simulated for %.0f s after %.0f s of warm-up at each shopper count. The costs come from the run at %d shoppers; "+
		"the other count is a prediction, and so are the latencies at both (no latency went in). Orders/s are those "+
		"answered 201. Each of the model's figures is the median of %d simulations that differ in their seed alone, "+
		"the lowest and highest in brackets; a miss is the median's.\n\n",
		in.CPUs, clusterShards, in.ShardIO, validateMeasure, validateWarmup, calibrateAt, validationSeeds)
	w("| shoppers | measured orders/s | model | miss | measured p50 / p99 ms | model p50 / p99 ms | miss p50 / p99 | model, cores shared among processes: orders/s, p50 / p99 ms |\n")
	w("|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	var misses []string
	for _, k := range v.Checks {
		m, p, q := k.Measured, k.Predicted, k.Processes
		label := fmt.Sprintf("%d", k.Shoppers)
		if k.Calibration {
			label += " (costs from this run)"
		}
		mx, m50, m99 := miss(p.CreatedPerSec, m.PerSecond), miss(p.P50*1000, m.P50Ms), miss(p.P99*1000, m.P99Ms)
		w("| %s | %.2f | %s | %s | %.0f / %.0f | %s / %s | %s / %s | %.2f, %.0f / %.0f |\n", label, m.PerSecond,
			spread(p, "%.2f", perSec), pct(mx), m.P50Ms, m.P99Ms, spread(p, "%.0f", p50ms), spread(p, "%.0f", p99ms),
			pct(m50), pct(m99), q.CreatedPerSec, q.P50*1000, q.P99*1000)
		for _, x := range []struct {
			what string
			miss float64
		}{{"orders/s", mx}, {"p50", m50}, {"p99", m99}} {
			if math.Abs(x.miss) > maxMiss {
				misses = append(misses, fmt.Sprintf("%s at %d shoppers (%s)", x.what, k.Shoppers, pct(x.miss)))
			}
		}
	}
	w("\n")
	if len(misses) == 0 {
		w("Every prediction is within %.0f %% of the measurement. ", 100*maxMiss)
	} else {
		w("Within %.0f %% of the measurement but for %s. ", 100*maxMiss, strings.Join(misses, ", "))
	}
	var states []string
	for _, k := range v.Checks {
		p := k.Predicted
		states = append(states, fmt.Sprintf("at %d shoppers the model's machine was %.0f %% busy, its busiest shard's write "+
			"slots %.0f %% held, a write held its slot %.0f ms on average, where the run measured its execution writes at %.0f ms, and %.1f calls "+
			"were in Temporal's database at once, where the run had %.1f under way",
			k.Shoppers, 100*p.PoolBusy["machine"], 100*p.ShardBusy, 1000*p.ShardHold, k.WriteMs, p.InFlight, inFlight(k.Measured)))
	}
	w("In the simulation %s (Temporal's persistence latency of CreateWorkflowExecution and UpdateWorkflowExecution, "+
		"the time a write holds its shard, and every persistence call's latency over the window: checks of the model's "+
		"insides that no input was fitted to). ", strings.Join(states, "; "))
	w("%s\n\n", validationReading(v, in.Costs))
	if len(v.Reverse) > 0 {
		w("The other way round, the costs from the run at %d shoppers:\n\n", v.ReverseFrom)
		w("| shoppers | measured orders/s | model | miss | measured p50 / p99 ms | model p50 / p99 ms | miss p50 / p99 |\n|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, k := range v.Reverse {
			m, p := k.Measured, k.Predicted
			label := fmt.Sprintf("%d", k.Shoppers)
			if k.Calibration {
				label += " (costs from this run)"
			}
			w("| %s | %.2f | %s | %s | %.0f / %.0f | %s / %s | %s / %s |\n", label, m.PerSecond, spread(p, "%.2f", perSec),
				pct(miss(p.CreatedPerSec, m.PerSecond)), m.P50Ms, m.P99Ms, spread(p, "%.0f", p50ms), spread(p, "%.0f", p99ms),
				pct(miss(p.P50*1000, m.P50Ms)), pct(miss(p.P99*1000, m.P99Ms)))
		}
		w("\n")
	}

	w("### Sized for %s orders/s of the campaign mix\n\n", thousands(sz.Target))
	w("The same costs with the load generator left out (shoppers bring their own machines) and the cart notices on "+
		"the broker, as this build sends them (no notification-queue lock). Each part on hosts of its own: %d-core hosts for "+
		"the checkout (API replicas and workers, behind HAProxy), Temporal's services and the front (HAProxy, the broker, tracing, the identity provider, "+
		"what the runs could not attribute), as many as keep each part at most %.0f %% busy at the target; PostgreSQL as one "+
		"primary for the checkout's database and one for Temporal's, each the smallest of %s cores at most %.0f %% busy; "+
		"history shards doubled from `make cluster`'s %d until no shard is more than %.0f %% busy and the target is carried. "+
		"%d shoppers in the closed loop place the target (found from the simulation's own turn time); %.0f s simulated after "+
		"%.0f s of warm-up.\n\n", hostCores, 100*busyTarget, joinSizes(), 100*busyTarget, clusterShards, 100*shardTarget,
		sz.Result.Shoppers, sizeMeasure, sizeWarmup)
	w("| part | hosts × cores | CPU per order answered 201 | busy at the target | saturated at, orders/s |\n|---|---:|---:|---:|---:|\n")
	r := sz.Result
	for _, p := range []string{partAPI, partTemporal, partFront, partPGC, partPGT} {
		pl := sz.Topology.Pools[p]
		w("| %s | %d × %.0f | %s | %.0f %% | %.0f |\n", partName(p), pl.Hosts, pl.Cores, ms(sz.Demand[p]),
			100*r.PoolBusy[p], r.CreatedPerSec/r.PoolBusy[p])
	}
	w("\n| history shards | orders/s | POST /orders p50 / p99 ms | busiest shard (its write slots held) | shards' mean | a write's hold of its slot |\n|---:|---:|---:|---:|---:|---:|\n")
	for _, t := range sz.Sweep {
		w("| %d | %.0f | %.0f / %.0f | %.0f %% | %.0f %% | %.1f ms |\n", t.Shards, t.Result.CreatedPerSec, 1000*t.Result.P50,
			1000*t.Result.P99, 100*t.Result.ShardBusy, 100*t.Result.ShardMean, 1000*t.Result.ShardHold)
	}
	w("\n**The topology:** %d checkout hosts, %d Temporal hosts and %d front hosts of %d cores, PostgreSQL with %.0f cores for the "+
		"checkout's database and %.0f for Temporal's, %d history shards: the model carries %.0f orders/s answered 201 with "+
		"POST /orders at p50 %.0f ms and p99 %.0f ms.\n\n", sz.Topology.Pools[partAPI].Hosts, sz.Topology.Pools[partTemporal].Hosts,
		sz.Topology.Pools[partFront].Hosts, hostCores, sz.Topology.Pools[partPGC].Cores, sz.Topology.Pools[partPGT].Cores,
		sz.Topology.Shards, r.CreatedPerSec, 1000*r.P50, 1000*r.P99)

	w("What saturates first as the load grows past the target, from the sized run (a resource's busy share grows with " +
		"the orders, so it is saturated at the orders/s ÷ its busy share):\n\n| resource | saturated at, orders/s answered 201 | |\n|---|---:|---|\n")
	var firstSerial, firstCPU *Ceiling
	for i, x := range sz.Ceilings {
		kind := "CPU"
		switch {
		case x.Serial:
			kind = "serialization point"
			if firstSerial == nil && !x.Absent {
				firstSerial = &sz.Ceilings[i]
			}
		case firstCPU == nil:
			firstCPU = &sz.Ceilings[i]
		}
		note := kind
		if x.Note != "" {
			note += "; " + x.Note
		}
		w("| %s | %.0f | %s |\n", x.Resource, x.PerSec, note)
	}
	w("\n")
	if firstSerial != nil && firstCPU != nil {
		w("%s\n\n", firstSerialReading(sz, *firstSerial, *firstCPU, v))
	}
	w("%s\n\n", shardSensitivity(in, v, sz))
	w("Read this as a projection from a 2-CPU machine, not a measurement of hosts: the costs per order were measured " +
		"with the machine saturated and shared (CPU per order falls on hosts that are not: less waiting, fewer context " +
		"switches), so the host and core counts are cautious; the model leaves out the network between hosts, the " +
		"connection pools' limits and the cost of more shards, hosts and processes themselves.\n")
	w("%s\n", endMarker)
	return b.String()
}

// likeOthers names the other load points' persistence calls under way beside k's, when they were
// about as many (within the validation's margin).
func likeOthers(v Validation, k Check) string {
	var others []string
	for _, o := range v.Checks {
		if o.Shoppers == k.Shoppers {
			continue
		}
		if math.Abs(miss(inFlight(o.Measured), inFlight(k.Measured))) > maxMiss {
			return ""
		}
		others = append(others, fmt.Sprintf("%.0f at %d shoppers", inFlight(o.Measured), o.Shoppers))
	}
	if len(others) == 0 {
		return ""
	}
	return ", about as many as at the other load (" + strings.Join(others, ", ") + ")"
}

// waitedWhere says where a run's shoppers waited before Temporal's database: its workflow tasks
// in the task queue for the workers' pollers, where the run recorded the SDK's latencies.
func waitedWhere(r figures.Run) string {
	for _, l := range r.Window.SDK {
		if l.Series == "workflow_task_schedule_to_start" {
			return fmt.Sprintf("in Temporal's task queue (%.0f workflow tasks at once waiting for the workers' pollers, "+
				"%.0f ms each on average from scheduled to started, by the SDK's latencies)", l.InFlight, l.MeanMs)
		}
	}
	return "in Temporal's task queue for the workers' pollers, as a later run that recorded the SDK's latencies " +
		"measured (the reading after this section)"
}

// validationReading says what the validation's misses come from, read from the model's own figures.
func validationReading(v Validation, c Costs) string {
	parts := []string{"Throughput is set by the CPU: the machine was saturated at both counts, in the runs and in the model"}
	for _, k := range v.Checks {
		p, q, m := k.Predicted, k.Processes, k.Measured
		if miss(p.P99*1000, m.P99Ms) > maxMiss && p.ShardBusy >= 0.8 {
			// Sharing the cores among processes moves the queue: into POST /orders' busiest processes
			// when its latencies run long too, into the shoppers' other requests when they run short.
			where := "queues the requests in the busiest processes and runs long as well"
			if miss(q.P50*1000, m.P50Ms) < 0 {
				where = "queues the shoppers in their other requests instead, so POST /orders runs short"
			}
			parts = append(parts, fmt.Sprintf("At %d shoppers the model's p99 runs long because its shards queue: processor "+
				"sharing among requests gives the write that holds a shard the same sliver of the CPU as each of the %d "+
				"shoppers' requests, so its hold grows to %.0f ms, where the run measured its writes at %.0f ms. The model "+
				"had %.0f calls in Temporal's database at once, the run %.0f under way%s: on the machine the shoppers "+
				"beyond those waited before reaching it, %s, not behind "+
				"the shards. Sharing the cores among processes instead (the last column: the kernel "+
				"shares them among threads, a Go process among its goroutines) keeps the holds short (%.0f ms) but %s "+
				"(p50 %s, p99 %s). The model's p99, the cores shared among requests, is %.1f "+
				"times its p50 where the run's was %.1f: what it gets wrong past the knee is the spread, not the throughput",
				k.Shoppers, k.Shoppers, 1000*p.ShardHold, k.WriteMs, p.InFlight, inFlight(m), likeOthers(v, k), waitedWhere(m), 1000*q.ShardHold, where, pct(miss(q.P50*1000, m.P50Ms)),
				pct(miss(q.P99*1000, m.P99Ms)), p.P99/p.P50, m.P99Ms/m.P50Ms))
		}
		if mx := miss(p.P99*1000, m.P99Ms); mx < -maxMiss {
			parts = append(parts, fmt.Sprintf("At %d shoppers the model's p99 is short by %s: its p50 is short by %s (below) "+
				"and its spread is narrower, p99 %.2f times p50 against the run's %.2f", k.Shoppers, magnitude(mx),
				magnitude(miss(p.P50*1000, m.P50Ms)), p.P99/p.P50, m.P99Ms/m.P50Ms))
		}
		if mx := miss(p.P50*1000, m.P50Ms); mx < -maxMiss/2 && p.PlacedPerSec > 0 && m.Placed > 0 {
			turn := float64(k.Shoppers) / p.PlacedPerSec
			measuredTurn := float64(k.Shoppers) * m.Seconds / float64(m.Placed)
			parts = append(parts, fmt.Sprintf("At %d shoppers the model's p50 is short by %s: its shoppers' turn is the "+
				"run's (%.1f s against %.1f s), but it spends %.0f %% of it on the other requests where the run's p50 leaves "+
				"them about %.0f %%. The model puts all of the load generator's and the unattributed CPU (%s an order) in "+
				"that phase, when HAProxy and the load generator work for POST /orders too", k.Shoppers, magnitude(mx), turn, measuredTurn, 100*(1-p.Mean/turn), 100*(1-m.P50Ms/1000/measuredTurn),
				ms(c.Rest[partFront]+c.Rest[partDriver])))
		}
	}
	if inside := insidesApart(v); inside != "" {
		parts = append(parts, inside)
	}
	return strings.Join(parts, ". ") + "."
}

// insidesApart says where the model's insides part from the runs' while its latencies do not:
// the calls under way in Temporal's database, and the time an execution write takes.
func insidesApart(v Validation) string {
	var apart []string
	for _, k := range v.Checks {
		p, m := k.Predicted, k.Measured
		if math.Abs(miss(p.P50*1000, m.P50Ms)) > maxMiss || math.Abs(miss(p.P99*1000, m.P99Ms)) > maxMiss {
			return ""
		}
		// Only fewer calls in the model's database than the run's: its shoppers then wait elsewhere.
		if miss(p.InFlight, inFlight(m)) < -maxMiss {
			writes := ""
			if k.WriteMs > 0 {
				writes = fmt.Sprintf(", its execution writes taking %.0f ms where the model's held a slot %.0f ms", k.WriteMs, 1000*p.ShardHold)
			}
			apart = append(apart, fmt.Sprintf("at %d shoppers the run had %.0f calls under way where the model had %.0f%s, "+
				"and its shoppers waited %s", k.Shoppers, inFlight(m), p.InFlight, writes, waitedWhere(m)))
		}
	}
	if len(apart) == 0 {
		return ""
	}
	return "The latencies agree where the model's insides do not: " + strings.Join(apart, "; ") + ". The model's " +
		"shoppers wait instead in the CPU's processor sharing, so it predicts what an order waits, not where"
}

// The figures of a prediction its tables show, in their units.
func perSec(r Result) float64 { return r.CreatedPerSec }
func p50ms(r Result) float64  { return 1000 * r.P50 }
func p99ms(r Result) float64  { return 1000 * r.P99 }

// spread is a prediction's figure: the median over its simulations, their lowest and highest
// in brackets.
func spread(p Prediction, format string, figure func(Result) float64) string {
	lo, hi := p.span(figure)
	return fmt.Sprintf(format+" ("+format+"–"+format+")", figure(p.Result), lo, hi)
}

func firstSerialReading(sz Sizing, first, cpu Ceiling, v Validation) string {
	s16 := sz.Shards16
	var b strings.Builder
	if first.PerSec <= cpu.PerSec {
		fmt.Fprintf(&b, "The serialization ceiling that binds first is **%s**, at about %.0f orders/s: with them the model "+
			"carried %.0f orders/s of the %s asked (busiest shard %.0f %% busy, POST /orders p99 %.0f ms), before any part's "+
			"CPU is saturated. ", first.Resource, first.PerSec, s16.CreatedPerSec, thousands(sz.Target), 100*s16.ShardBusy, 1000*s16.P99)
	} else {
		fmt.Fprintf(&b, "No serialization point binds before the CPU: the first, **%s**, saturates at about %.0f orders/s, "+
			"past the sized hosts' CPU; with `make cluster`'s %d shards the model carried %.0f orders/s of the %s asked "+
			"(busiest shard %.0f %% of its write slots busy, POST /orders p99 %.0f ms). ", first.Resource, first.PerSec,
			clusterShards, s16.CreatedPerSec, thousands(sz.Target), 100*s16.ShardBusy, 1000*s16.P99)
	}
	fmt.Fprintf(&b, "A cluster's shard count is fixed when it is created, so a cluster meant for a campaign's peak "+
		"needs its shards set then: %d by the model", sz.Topology.Shards)
	if v.FloorWriteMs > 0 {
		c := sz.Costs
		writes := float64(c.PostCalls+c.AsyncCalls) * c.WriteShare / c.CreatedShare
		need := sz.Target * writes * v.FloorWriteMs / 1000 / shardTarget / float64(max(sz.Topology.ShardIO, 1))
		n := clusterShards
		for float64(n) < need {
			n *= 2
		}
		fmt.Fprintf(&b, ", and %d if a write holds its slot as long as the floor's did on this machine (%.0f ms, table below)", n, v.FloorWriteMs)
	}
	if first.PerSec <= cpu.PerSec {
		fmt.Fprintf(&b, ". With the shards out of the way, the first to saturate is CPU: **%s**, at about %.0f orders/s.", cpu.Resource, cpu.PerSec)
	} else {
		fmt.Fprintf(&b, ". The first to saturate is CPU: **%s**, at about %.0f orders/s.", cpu.Resource, cpu.PerSec)
	}
	for _, x := range sz.Ceilings {
		if x.Absent {
			when := "long before either"
			if x.PerSec >= min(first.PerSec, cpu.PerSec) {
				when = "too"
			}
			fmt.Fprintf(&b, " Had the cart notices stayed a `pg_notify` in PostgreSQL, its notification-queue lock would bind "+
				"%s, at about %.0f orders/s.", when, x.PerSec)
		}
	}
	return b.String()
}

// shardSensitivity is the shard ceiling at other holds: the model's hold is a write's CPU and flush on
// a host that is not saturated, and the measured writes took longer.
func shardSensitivity(in Inputs, v Validation, sz Sizing) string {
	c := sz.Costs
	writes := float64(c.PostCalls+c.AsyncCalls) * c.WriteShare / c.CreatedShare // per order answered 201
	holds := []struct {
		label string
		s     float64
	}{{"the sized model's", sz.Result.ShardHold}}
	type hold = struct {
		label string
		s     float64
	}
	if v.FloorWriteMs > 0 {
		holds = append(holds, hold{"measured in the floor's run at the calibration count (this machine, not saturated)", v.FloorWriteMs / 1000})
	}
	if v.WriteMs > 0 {
		holds = append(holds, hold{"measured in the calibration run (this machine, saturated)", v.WriteMs / 1000})
	}
	slots := max(sz.Topology.ShardIO, 1)
	var b strings.Builder
	fmt.Fprintf(&b, "How the shard ceiling moves with a write's hold (%.1f execution writes per order answered 201, all shards "+
		"equally busy, %d writes of a shard under way at once: shards × %d ÷ (writes × hold)):\n\n| a write's hold |", writes, slots, slots)
	counts := []int{16, 64, 256, 512}
	for _, n := range counts {
		fmt.Fprintf(&b, " %d shards |", n)
	}
	b.WriteString("\n|---|")
	for range counts {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	for _, h := range holds {
		fmt.Fprintf(&b, "| %s, %s |", ms(h.s), h.label)
		for _, n := range counts {
			fmt.Fprintf(&b, " %s |", thousands(float64(n*slots)/(writes*h.s)))
		}
		b.WriteString("\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func partName(p string) string {
	return map[string]string{partAPI: "checkout (API replicas, workers)", partTemporal: "Temporal's services",
		partFront: "front (HAProxy, broker, tracing, identity provider, unattributed)", partPGC: "PostgreSQL, the checkout's database",
		partPGT: "PostgreSQL, Temporal's database"}[p]
}

func sum(m map[string]float64) float64 {
	var s float64
	for _, p := range parts {
		s += m[p]
	}
	return s
}

// miss is the prediction's relative error against the measurement.
func miss(predicted, measured float64) float64 {
	if measured == 0 {
		return 0
	}
	return predicted/measured - 1
}

func pct(x float64) string { return fmt.Sprintf("%+.0f %%", 100*x) }

// magnitude is a relative error's magnitude.
func magnitude(x float64) string { return fmt.Sprintf("%.0f %%", 100*math.Abs(x)) }

func thousands(x float64) string {
	n := int64(math.Round(x))
	if n < 1000 {
		return fmt.Sprintf("%d", n)
	}
	return fmt.Sprintf("%d,%03d", n/1000, n%1000)
}

func joinSizes() string {
	var s []string
	for _, n := range pgSizes {
		s = append(s, fmt.Sprintf("%.0f", n))
	}
	return strings.Join(s, ", ")
}
