package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/marketplace/checkout/bench/internal/figures"
)

// The section of `-stack cluster` in docs/benchmarks.md.
const (
	clusterStartMarker = "<!-- cluster-bench:start -->"
	clusterEndMarker   = "<!-- cluster-bench:end -->"
)

// renderCluster writes the cluster's section of docs/benchmarks.md.
func renderCluster(res figures.Results, window time.Duration) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	counts := res.Counts()
	w("%s\n## Campaign traffic through `make cluster`'s shape, beside its own floor\n\n", clusterStartMarker)
	w("Written by `make bench-cluster` (bench/benchcampaign with `-stack cluster`); running it again replaces this section.\n\n")
	w("%s", commandAndMachine(res, window, "make bench-cluster", "-stack cluster ",
		"The cluster's processes, the load generator and the floor's worker"))
	w("%s", "- Stack: `bin/checkout-dev cluster` as `make cluster` starts it, on ports of its own: one private PostgreSQL "+
		"cluster (durable commits) with the product's database and Temporal's two; the Temporal server 1.29.1 as four "+
		"processes (frontend, history, matching, worker) with 16 history shards, the product's dynamic config "+
		"(deploy/temporal-dynamicconfig.yaml: one partition per task queue, "+shardWrites(res.ShardIOConcurrency)+
		") and the server's defaults otherwise; "+
		"two workers and two API replicas, HAProxy in front of them, the checkout's settings at their defaults but admission control off, as on the dev stack (`"+
		strings.Join(admissionOff, " ")+"`: with it on, its BUSY refusals make shoppers wait, and runs measured "+
		"that way varied with how many it refused); beside them the event broker (three NATS JetStream nodes), Jaeger "+
		"for the traces and the OIDC provider, whose CPU is the tables' NATS, Jaeger, OIDC column, not \"other\". The "+
		"shoppers reach the API through HAProxy.\n")
	if len(res.Flags) > 0 {
		w("- This run's cluster was also given `%s`, over the product's settings.\n", strings.Join(res.Flags, " "))
	}
	w("- The runs are those of the campaign section above: **saga, campaign mix** and **saga, all tok_ok** are " +
		"`checkout-dev loadgen` shoppers; the **floor** is empty workflows started as the API starts an order " +
		"(Update-with-Start, waiting for the update's answer) against the cluster's frontend, their worker in this tool.\n")
	if res.Dev != nil {
		w("- Then, in the same invocation once the cluster has stopped, the **dev stack** (`make run`): `bin/checkout-dev dev` " +
			"with the Temporal dev server on SQLite, admission control off as in the campaign section, measured the same " +
			"way at the same counts (its floor and the campaign mix), so that the two stacks are compared on the same " +
			"machine within minutes of each other.\n")
	}
	if res.DevFullSync != nil {
		w("- And the dev stack once more with its SQLite fsyncing every commit (`TEMPORAL_DEV_SQLITE_SYNC=full`), " +
			"the floor and the campaign at the same counts: what each store makes durable differs, as the next table " +
			"says, and this run measures what that difference is worth.\n")
	}
	w("\n")
	w("| store | what a commit waits for |\n|---|---|\n")
	w("| the cluster's PostgreSQL (the checkout's database and Temporal's two) | `fsync=on`, `synchronous_commit=on`: " +
		"each commit returns once its WAL is fsynced |\n")
	w("| the dev stack's PostgreSQL (the checkout's database) | the same settings: each commit's WAL fsynced |\n")
	w("| the dev server's SQLite (Temporal's history, `make run`) | `journal_mode=wal`, `synchronous=normal`: a commit " +
		"is written to the WAL file but not fsynced; the WAL is fsynced at each checkpoint. A crash of the machine " +
		"(not of the process) can lose the last commits |\n")
	w("| the dev server's SQLite with `TEMPORAL_DEV_SQLITE_SYNC=full` | `synchronous=full`: each commit fsyncs the WAL |\n\n")

	w("| run | shoppers | per second | POST /orders (floor: update answer) p50 / p99 ms | ÷ floor, per second | answers |\n")
	w("|---|---:|---:|---:|---:|---|\n")
	for _, n := range counts {
		f, _ := res.Find(runFloor, n)
		for _, s := range series {
			r, ok := res.Find(s.what, n)
			if !ok {
				continue
			}
			w("| %s | %d | %.1f | %.0f / %.0f | %s | %s |\n", s.label, n, r.PerSecond, r.P50Ms, r.P99Ms,
				ratio(r.PerSecond, f.PerSecond), answers(r))
		}
		if res.Dev == nil {
			continue
		}
		for _, d := range []struct {
			label string
			res   *figures.Results
		}{{"dev stack (`make run`)", res.Dev}, {"dev stack, SQLite at full sync", res.DevFullSync}} {
			if d.res == nil {
				continue
			}
			df, _ := d.res.Find(runFloor, n)
			for _, what := range []string{runFloor, runCampaign} {
				if r, ok := d.res.Find(what, n); ok {
					w("| %s, %s | %d | %.1f | %.0f / %.0f | %s | %s |\n", d.label, labelOf(what), n, r.PerSecond,
						r.P50Ms, r.P99Ms, ratio(r.PerSecond, df.PerSecond), answers(r))
				}
			}
		}
	}

	w("\nWhere the time went, per run (CPU in %% of one CPU, the machine has %d × 100 %%; PostgreSQL: mean client "+
		"backends running a statement, of them waiting on a heavyweight lock, and inside a transaction waiting for "+
		"their client; Temporal persistence: the four services' calls to PostgreSQL per second, their mean latency and "+
		"how many were under way on average, and the operation that took most of their time):\n\n", res.CPUs)
	w("| run | shoppers | checkout (API replicas and workers) %% | Temporal (four services, UI) %% | HAProxy %% | NATS (three nodes), Jaeger, OIDC provider %% | PostgreSQL %% | this tool %% | other %% | idle %% | PG active / lock / idle in tx | Temporal persistence calls/s, mean ms, in flight | its heaviest operation |\n")
	w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	writeWindows(&b, res, func(c figures.CPU) []float64 {
		return []float64{c.Checkout, c.Temporal, c.Balancer, c.Support, c.Postgres, c.Driver, c.OtherPct, c.IdlePct}
	})
	if l := lostTasks(res); l != "" {
		w("\n%s\n", l)
	}
	if res.Dev != nil {
		w("\nThe dev stack's runs of this invocation (columns as in the campaign section: `checkout dev` is the API and " +
			"worker in one process, Temporal the dev server, its persistence SQLite):\n\n")
		writeDevWindows(&b, *res.Dev)
	}
	if res.DevFullSync != nil {
		w("\nThe dev stack's runs with its SQLite at full sync (the same columns):\n\n")
		writeDevWindows(&b, *res.DevFullSync)
	}
	w("\n%s\n\n", clusterReading(res))
	if c := clusterAgainstDev(res); c != "" {
		w("%s\n\n", c)
	}
	if p := clusterProjection(res); p != "" {
		w("%s\n\n", p)
	}
	writeOutcome(&b, res, " on the cluster")
	if res.Dev != nil {
		w("\n")
		writeOutcome(&b, *res.Dev, " on the dev stack")
	}
	if res.DevFullSync != nil {
		w("\n")
		writeOutcome(&b, *res.DevFullSync, " on the dev stack at full sync")
	}
	w("%s\n", clusterEndMarker)
	return b.String()
}

// lostTasks says, per run, how many workflow tasks started and were never answered: the history
// service timed each out after the task's start-to-close timeout, and its workflow waited that long.
func lostTasks(res figures.Results) string {
	var parts []string
	for _, r := range res.Runs {
		if p := r.Window.Persistence; p != nil {
			parts = append(parts, fmt.Sprintf("%s at %d, %.0f", labelOf(r.What), r.Shoppers, p.WorkflowTasksTimedOut))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "Workflow tasks that started and were never answered, per run (the history service timed each out " +
		"after its workflow's task timeout, and the workflow waited that long; counted in the run's window, so a task " +
		"lost in its last seconds is not): " + strings.Join(parts, "; ") + "."
}

func labelOf(what string) string {
	for _, s := range series {
		if s.what == what {
			return s.label
		}
	}
	return what
}

// clusterReading says, from the figures, where the campaign run at the highest count spent its
// CPU and what an order cost Temporal's persistence beside an empty workflow.
func clusterReading(res figures.Results) string {
	n, c, ok := highestCampaign(res)
	if !ok {
		return ""
	}
	cpu := c.Window.CPU
	parts := largestFirst(share{"the checkout's API replicas and workers", cpu.Checkout}, share{"the Temporal server", cpu.Temporal},
		share{"PostgreSQL", cpu.Postgres}, share{"the load generator", cpu.Driver}, share{"HAProxy", cpu.Balancer})
	var b strings.Builder
	fmt.Fprintf(&b, "Read from the campaign run at %d shoppers: the CPUs were %s (%.0f %% idle of %d × 100 %%); ", n,
		saturation(cpu, res.CPUs), cpu.IdlePct, res.CPUs)
	fmt.Fprintf(&b, "the largest share went to %s (%.0f %%), then %s (%.0f %%) and %s (%.0f %%); HAProxy took %.0f %%. ",
		parts[0].name, parts[0].pct, parts[1].name, parts[1].pct, parts[2].name, parts[2].pct, cpu.Balancer)
	if f, ok := res.Find(runFloor, n); ok {
		cp, fp := c.Window.Persistence, f.Window.Persistence
		if cp != nil && fp != nil && c.Placed > 0 && f.Created > 0 {
			fmt.Fprintf(&b, "Per order placed the Temporal server made %.0f persistence calls to PostgreSQL, against %.0f "+
				"per empty workflow of the floor. ", cp.PerSecond*c.Seconds/float64(c.Placed), fp.PerSecond*f.Seconds/float64(f.Created))
		}
	}
	pg := c.Window.PG
	fmt.Fprintf(&b, "PostgreSQL, which here serves both the checkout and Temporal, had %.2f backends running a statement "+
		"and %.2f waiting on a lock on average.", pg.Active, pg.Lock)
	if cpu.Other > 0.15 {
		fmt.Fprintf(&b, " Processes outside the benchmark took %.0f %% of the machine during this run (the load average "+
			"went from %.1f to %.1f): the figures are what the cluster kept for itself on a shared machine, below what it "+
			"does on a quiet one.",
			100*cpu.Other, res.LoadBefore, res.LoadAfter)
	}
	return b.String()
}

// clusterAgainstDev says, count by count, how the cluster's campaign compared with the dev
// stack's of the same invocation, and what each did beside its own floor.
func clusterAgainstDev(res figures.Results) string {
	if res.Dev == nil {
		return ""
	}
	var parts []string
	for _, n := range res.Counts() {
		c, ok := res.Find(runCampaign, n)
		d, dok := res.Dev.Find(runCampaign, n)
		if !ok || !dok || d.PerSecond <= 0 {
			continue
		}
		if c.Errors > 0 || d.Errors > 0 {
			parts = append(parts, fmt.Sprintf("at %d shoppers the cluster placed %.1f orders/s and the dev stack %.1f, "+
				"but requests went unanswered or were answered 5xx (%d on the cluster, %d on the dev stack): a stack that "+
				"stalls is measured there, not compared", n, c.PerSecond, d.PerSecond, c.Errors, d.Errors))
			continue
		}
		word := "slower than"
		switch r := c.PerSecond / d.PerSecond; {
		case r > 1.05:
			word = "faster than"
		case r >= 0.95:
			word = "as fast as"
		}
		parts = append(parts, fmt.Sprintf("at %d shoppers the cluster placed %.1f orders/s, %s the dev stack's %.1f "+
			"(%.2f×; POST /orders p50 %.0f ms against %.0f)", n, c.PerSecond, word, d.PerSecond, c.PerSecond/d.PerSecond,
			c.P50Ms, d.P50Ms))
	}
	if len(parts) == 0 {
		return ""
	}
	return "Beside the dev stack, measured in this invocation: " + strings.Join(parts, "; ") + ". On 2 CPUs the cluster " +
		"runs nine processes where the dev stack runs two (four Temporal services, two API replicas, two workers and " +
		"HAProxy against `checkout-dev dev` and the dev server) and puts Temporal's persistence on the same PostgreSQL as the checkout, where the dev " +
		"server keeps it in SQLite in its own process; what the cluster buys is the shape that scales out, which the " +
		"capacity section's model sizes."
}

// clusterProjection points at what more hosts would change: not an extrapolation here, but the
// capacity section's model (bench/capacity, `make capacity`), which reads this run's JSON for its
// costs per order, is checked against this run's load points and sizes the topology from them.
func clusterProjection(res figures.Results) string {
	n, c, ok := highestCampaign(res)
	if !ok || c.PerSecond <= 0 {
		return ""
	}
	cpu := c.Window.CPU
	perOrder := func(pct float64) float64 { return 10 * pct / c.PerSecond } // ms of CPU per order
	return fmt.Sprintf("What more hosts would change is not read here: on this machine every part shares 2 CPUs, so "+
		"adding history hosts, shards or workers only adds processes competing for them (in the campaign run at %d "+
		"shoppers an order cost %.0f ms of CPU in the checkout's API replicas and workers, %.0f ms in the Temporal server "+
		"and %.0f ms in PostgreSQL). The capacity section below (`make capacity`) reads these runs' costs per order into "+
		"a queueing model, checks it against these load points and sizes the topology for ~1,000 orders/s from it: "+
		"hosts per part, history shards, PostgreSQL, and the serialization ceiling that binds first.",
		n, perOrder(cpu.Checkout), perOrder(cpu.Temporal), perOrder(cpu.Postgres))
}

// writeDevWindows is the table of where the time went in a dev stack's runs of this invocation.
func writeDevWindows(b *strings.Builder, dev figures.Results) {
	b.WriteString("| run | shoppers | checkout dev % | Temporal % | NATS % | PostgreSQL % | this tool % | other % | idle % | PG active / lock / idle in tx | SQLite calls/s, mean ms, in flight | SQLite's heaviest operation |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	writeWindows(b, dev, func(c figures.CPU) []float64 {
		return []float64{c.Checkout, c.Temporal, c.Support, c.Postgres, c.Driver, c.OtherPct, c.IdlePct}
	})
}

// shardWrites says how many writes of a history shard the run's cluster let be under way at once
// (0, in figures recorded before the setting was: the server's one).
func shardWrites(n int) string {
	if n <= 1 {
		return "one write of a history shard at a time"
	}
	return fmt.Sprintf("%d writes of a history shard under way at once", n)
}
