package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/marketplace/checkout/bench/internal/figures"
	"github.com/marketplace/checkout/internal/dev/benchkit"
)

func readJSON(path string, v any) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// find is the run of what at shoppers, or an error that names it.
func find(f figures.Results, what string, shoppers int) (figures.Run, error) {
	if r, ok := f.Find(what, shoppers); ok {
		return r, nil
	}
	return figures.Run{}, fmt.Errorf("no %s run at %d shoppers", what, shoppers)
}

// placedPerSec is the rate of the shoppers' loop: every POST /orders, whatever its answer.
func placedPerSec(r figures.Run) float64 { return float64(r.Placed) / r.Seconds }

// writesPerSec is the execution writes (Create/UpdateWorkflowExecution) among the operations the
// run listed.
func writesPerSec(r figures.Run) float64 {
	var w float64
	if p := r.Window.Persistence; p != nil {
		for _, op := range p.TopOps {
			if op.Op == "history CreateWorkflowExecution" || op.Op == "history UpdateWorkflowExecution" {
				w += op.PerSecond
			}
		}
	}
	return w
}

// waitsOnNotify is whether the run's backends waited on PostgreSQL's notification-queue lock (a
// wait on `object`, as a commit that queued a notice does), among the lock waits it lists.
func waitsOnNotify(r figures.Run) bool {
	for _, l := range r.Window.PG.TopLocks {
		if l.Event == "object" {
			return true
		}
	}
	return false
}

// hotRowWaits is, over the saga's runs, the most backends waiting on the stock rows' locks
// (ReserveOrder, LockInventoryRows) on average: a run's figure where its heaviest waits list it,
// and otherwise the least of the waits it lists, which bounds it.
func hotRowWaits(f figures.Results) float64 {
	var most float64
	for _, r := range f.Runs {
		if r.What == "floor" {
			continue
		}
		locks := r.Window.PG.TopLocks
		bound, listed := math.Inf(1), 0.0
		for _, l := range locks {
			bound = math.Min(bound, l.Mean)
			if l.Query == "ReserveOrder" || l.Query == "LockInventoryRows" || l.Query == "LockInventoryRow" {
				listed = math.Max(listed, l.Mean)
			}
		}
		switch {
		case listed > 0:
			most = math.Max(most, listed)
		case len(locks) >= 3:
			most = math.Max(most, bound)
		}
	}
	return most
}

// Input is one figure the model was given and where it comes from.
type Input struct {
	What, Value, From string
}

// Inputs are the model's costs with their provenance.
type Inputs struct {
	Costs Costs
	List  []Input
	CPUs  int
	// ShardIO is the writes of one history shard the runs' cluster let be under way at once.
	ShardIO int
	// NotifyHold is what one order's cart writes held PostgreSQL's notification-queue lock while
	// the cart notices were a trigger's pg_notify (the lock-wait runs); Costs.NotifyHold has it
	// only where the calibration run waited on that lock.
	NotifyHold float64
}

// commitFlush is a PostgreSQL commit's latency beyond CPU (its WAL flush): pgbench's mean
// latency of a one-row reserve transaction at 8 clients on spread rows, durable commits, on this
// machine: 8 clients ÷ 6,068 tps = 1.32 ms in `make bench`'s run of 2026-12-05 07:13 UTC ("Reserve
// path against pgbench"), on the Intel Xeon machine of the cluster's runs of that day (0.85 ms on
// 2026-11-30, 1.23 and 2.03 ms on 2026-12-03, on the AMD EPYC one). The JSON files of the campaign
// runs do not separate it from CPU.
const commitFlush = 1.32e-3

// visitCheckout and visitPostgres are the CPU of a shopper's requests around the order (an
// address, the cart's lines, the cart read, the preview; no order) in the checkout process and
// in PostgreSQL: `make bench-cost`'s "the visit alone", median of its runs on the dev stack, one
// shopper at a time (docs/benchmarks.md, "CPU per order": 2.12 ms and 1.44 ms in its four runs of
// 2026-12-05 06:30 UTC, on the Intel Xeon machine of the cluster's runs of that day; 2.80 ms and
// 2.66 ms on 2026-12-03 and 2.06 ms and 2.03 ms on 2026-12-02, on the AMD EPYC one). The campaign
// JSON files do not separate them from the order's own work. The order's page, 3-D Secure's page
// and a cancel are not in them: a lower bound, where the plain run gives an upper one.
const (
	visitCheckout = 2.12e-3
	visitPostgres = 1.44e-3
)

// calibrate derives the costs per placed order from the cluster's campaign run at shoppers, the
// cluster's floor at the same count, the dev stack's plain run (the shopper's other requests) and
// the lock-wait runs (the notification lock).
func calibrate(cluster figures.Results, campaign figures.Results, lockWaits figures.LockWaitResults, shoppers int) (Inputs, error) {
	c, err := find(cluster, "campaign", shoppers)
	if err != nil {
		return Inputs{}, fmt.Errorf("cluster: %w", err)
	}
	floor, err := find(cluster, "floor", shoppers)
	if err != nil {
		return Inputs{}, fmt.Errorf("cluster: %w", err)
	}
	plain, err := lowestPlain(campaign)
	if err != nil {
		return Inputs{}, err
	}
	if c.Window.Persistence == nil || floor.Window.Persistence == nil || c.Placed == 0 || plain.Placed == 0 {
		return Inputs{}, fmt.Errorf("cluster: the campaign or floor run at %d shoppers lacks persistence or order counts", shoppers)
	}
	var in Inputs
	in.CPUs = cluster.CPUs
	in.ShardIO = max(cluster.ShardIOConcurrency, 1)
	add := func(what, value, from string) { in.List = append(in.List, Input{what, value, from}) }
	campaignRun := fmt.Sprintf("bench-cluster.json, campaign at %d", shoppers)
	floorRun := fmt.Sprintf("bench-cluster.json, floor at %d", shoppers)
	plainRun := fmt.Sprintf("bench-campaign.json, plain-ok at %d (dev stack)", plain.Shoppers)

	x := placedPerSec(c)
	per := func(pct float64) float64 { return pct / 100 / x }
	cpu := c.Window.CPU
	api, temporal, pg := per(cpu.Checkout), per(cpu.Temporal), per(cpu.Postgres)
	front, support, driver := per(cpu.OtherPct+cpu.Balancer), per(cpu.Support), per(cpu.Driver)
	add("orders placed per second (every POST /orders)", fmt.Sprintf("%.2f", x), campaignRun)
	add("CPU per placed order: checkout (API replicas, workers)", ms(api), campaignRun+": its CPU share ÷ orders placed/s")
	add("CPU per placed order: Temporal's services", ms(temporal), campaignRun)
	add("CPU per placed order: PostgreSQL (both databases)", ms(pg), campaignRun)
	add("CPU per placed order: HAProxy, unattributed (other)", ms(front), campaignRun)
	add("CPU per placed order: the broker (three NATS nodes), Jaeger, the OIDC provider", ms(support),
		campaignRun+": work after the answer (events relayed from the outbox and replicated, spans exported in batches)")
	add("CPU per placed order: load generator", ms(driver), campaignRun)

	calls := c.Window.Persistence.PerSecond / x
	add("Temporal persistence calls per placed order", fmt.Sprintf("%.1f", calls), campaignRun)
	floorCalls := floor.Window.Persistence.PerSecond / floor.PerSecond
	pgPerCall := floor.Window.CPU.Postgres / 100 / floor.Window.Persistence.PerSecond
	add("persistence calls per Update-with-Start (the floor's empty workflow)", fmt.Sprintf("%.1f", floorCalls), floorRun)
	add("PostgreSQL CPU per persistence call", ms(pgPerCall), floorRun+": PostgreSQL served only Temporal")
	pgT := math.Min(calls*pgPerCall, pg)
	pgC := pg - pgT
	writeShare := writesPerSec(c) / c.Window.Persistence.PerSecond
	add("share of calls that write an execution (Create/UpdateWorkflowExecution)", fmt.Sprintf("%.2f", writeShare),
		campaignRun+": the two operations' calls/s ÷ all calls/s")
	crit := math.Min(floorCalls/calls, 1)
	add("share of an order's work on POST /orders' path", fmt.Sprintf("%.2f", crit),
		"the floor's calls per Update-with-Start ÷ the campaign's calls per order")

	// The other requests cost what the visit measured, and never more than the plain run's
	// upper bound or the campaign's own CPU of that part.
	pp := placedPerSec(plain)
	upperAPI, upperPG := plain.Window.CPU.Checkout/100/pp, plain.Window.CPU.Postgres/100/pp
	restAPI := math.Min(math.Min(visitCheckout, upperAPI), api)
	restPG := math.Min(math.Min(visitPostgres, upperPG), pgC)
	add("CPU of a shopper's other requests: checkout / PostgreSQL", ms(restAPI)+" / "+ms(restPG),
		"docs/benchmarks.md, CPU per order: the visit alone (an address, the cart's lines, the cart read, the preview), "+
			"median of `make bench-cost`'s four runs of 2026-12-05 06:30 UTC (the machine of the cluster's runs of that day), dev stack; without the order's page, 3-D Secure's page or a cancel, so a lower bound")
	add("the same, upper bound (not used)", ms(upperAPI)+" / "+ms(upperPG),
		plainRun+": the same requests around a one-transaction order")

	var notify []float64
	for _, r := range lockWaits.Runs {
		if r.Notify && r.Run.PerSecond > 0 {
			notify = append(notify, 1/r.Run.PerSecond)
		}
	}
	in.NotifyHold = benchkit.SpreadOf(notify).Median
	hold := 0.0
	if in.NotifyHold > 0 {
		add("notification-queue lock held per order, were the cart notices in PostgreSQL (cart writes)", ms(in.NotifyHold),
			fmt.Sprintf("bench-lockwaits.json: 1 ÷ orders/s, median of the %d runs with notices in PostgreSQL (the lock busy throughout)", len(notify)))
		if waitsOnNotify(c) {
			hold = in.NotifyHold
			add("notification-queue lock held per order in the run", ms(hold), campaignRun+": its lock waits list the lock's")
		} else {
			add("notification-queue lock held per order in the run", "0", campaignRun+": its build announces cart writes "+
				"on the broker, and its lock waits list none on that lock (`object`)")
		}
	}
	add("a write's flush, beyond CPU", ms(commitFlush), "`make bench` of 2026-12-05 07:13 UTC, reserve path: pgbench's one-row commit on spread rows at 8 clients")
	shardIOFrom := "bench-cluster.json: the cluster's history.shardIOConcurrency (deploy/temporal-dynamicconfig.yaml)"
	if cluster.ShardIOConcurrency == 0 {
		shardIOFrom = "the server's default: bench-cluster.json predates the setting and does not record it"
	}
	add("writes of one history shard under way at once", strconv.Itoa(in.ShardIO), shardIOFrom)
	createdShare := float64(c.Created) / float64(c.Placed)
	add("share of placed orders answered 201", fmt.Sprintf("%.3f", createdShare), campaignRun)

	postCalls := max(int(math.Round(crit*calls)), 1)
	in.Costs = Costs{
		Rest: map[string]float64{partAPI: restAPI, partPGC: restPG, partFront: front, partDriver: driver},
		Post: map[string]float64{partAPI: crit * (api - restAPI), partTemporal: crit * temporal, partPGT: crit * pgT,
			partPGC: crit * (pgC - restPG)},
		Async: map[string]float64{partAPI: (1 - crit) * (api - restAPI), partTemporal: (1 - crit) * temporal,
			partPGT: (1 - crit) * pgT, partPGC: (1 - crit) * (pgC - restPG), partFront: support},
		PostCalls: postCalls, AsyncCalls: max(int(math.Round(calls))-postCalls, 0),
		WriteShare: writeShare, Commit: commitFlush, NotifyHold: hold, CreatedShare: createdShare,
	}
	return in, nil
}

// lowestPlain is the dev stack's plain run at its lowest shopper count (the least contended).
func lowestPlain(f figures.Results) (figures.Run, error) {
	var best figures.Run
	for _, r := range f.Runs {
		if r.What == "plain-ok" && (best.Shoppers == 0 || r.Shoppers < best.Shoppers) {
			best = r
		}
	}
	if best.Shoppers == 0 {
		return best, fmt.Errorf("campaign: no plain-ok run")
	}
	return best, nil
}

func ms(seconds float64) string {
	v := seconds * 1000
	switch {
	case v >= 10:
		return fmt.Sprintf("%.0f ms", v)
	case v >= 1:
		return fmt.Sprintf("%.1f ms", v)
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.2f", v), "0"), ".") + " ms"
}
