// Package figures holds what bench/benchcampaign measures, as it writes it to docs/bench-*.json
// and as the capacity model (bench/capacity) reads it back: one set of types, so that a field the
// benchmark renames is one the model stops compiling against rather than silently reads as zero.
package figures

import (
	"sort"
	"time"

	"github.com/marketplace/checkout/audit"
	"github.com/marketplace/checkout/loadgen"
)

// Window is what the machine did during one measured load phase.
type Window struct {
	CPU         CPU          `json:"cpu"`
	PG          PGWaits      `json:"postgres"`
	Persistence *Persistence `json:"temporalPersistence,omitempty"`
	// SDK is what the checkout's processes (API replicas and workers) timed in the Temporal SDK's
	// latency histograms, series by series; Tasks what the Temporal server's history and matching
	// services timed of their tasks on the way to a worker.
	SDK   []Latency `json:"sdk,omitempty"`
	Tasks []Latency `json:"temporalTasks,omitempty"`
}

// Latency is one latency histogram over a load phase, summed over the processes that keep it:
// how many a second, their mean, and so how many were in that state at once on average (rate ×
// mean, Little's law).
type Latency struct {
	Series    string  `json:"series"`
	PerSecond float64 `json:"perSecond"`
	MeanMs    float64 `json:"meanMs"`
	InFlight  float64 `json:"inFlight"`
}

// Run is one measured run: for the floor, workflows; otherwise orders placed through POST /orders.
type Run struct {
	What     string  `json:"what"`
	Shoppers int     `json:"shoppers"`
	Seconds  float64 `json:"seconds"`
	// Created is how many orders were answered 201 (the floor: workflows that answered), and
	// PerSecond that over the load phase; Placed counts every POST /orders, whatever its answer.
	Created   int64   `json:"created"`
	PerSecond float64 `json:"createdPerSecond"`
	Placed    int64   `json:"placed"`
	P50Ms     float64 `json:"p50Ms"`
	P95Ms     float64 `json:"p95Ms"`
	P99Ms     float64 `json:"p99Ms"`
	// Errors are answers of 5xx or none at all; Unexpected, orders that ended otherwise than their
	// scenario says; Mismatches, repeated keys whose answers differed.
	Errors     int64           `json:"errors"`
	Unexpected int64           `json:"unexpected"`
	Mismatches int             `json:"mismatches"`
	Answers    []loadgen.Count `json:"answers,omitempty"`
	Window     Window          `json:"window"`
	// Refusals are POST /orders' error answers by code, every try counted (BUSY among them).
	Refusals []loadgen.ErrorCount `json:"refusals,omitempty"`
	// ByPayment is each payment token's orders as their shoppers waited for them (from the first
	// try of POST /orders to its last answer), beside the run's latency of every POST /orders.
	ByPayment []loadgen.EndpointStats `json:"byPayment,omitempty"`
	// CouponOrders are the orders placed with the run's coupon, and Coupons what the previews
	// with it said of it (runPromo only).
	CouponOrders int64           `json:"couponOrders,omitempty"`
	Coupons      []loadgen.Count `json:"coupons,omitempty"`
}

// Results are everything one invocation measured.
type Results struct {
	// Stack is the stack measured: dev (also for figures from before there was a choice) or cluster.
	Stack         string       `json:"stack,omitempty"`
	StartedAt     time.Time    `json:"startedAt"`
	WindowSeconds float64      `json:"windowSeconds"`
	CPUs          int          `json:"cpus"`
	CPUModel      string       `json:"cpuModel"`
	LoadBefore    float64      `json:"loadAverageBefore"`
	LoadAfter     float64      `json:"loadAverageAfter"`
	Runs          []Run        `json:"runs"`
	Audit         audit.Report `json:"audit"`
	PlainSettle   int          `json:"plainOrdersSettled"`
	// Dev is, for the cluster, the dev stack's floor and campaign at the same counts, measured in
	// the same invocation after the cluster's runs.
	Dev *Results `json:"devStack,omitempty"`
	// DevFullSync is the same dev stack with its SQLite fsyncing every commit (TEMPORAL_DEV_SQLITE_SYNC=full),
	// as the cluster's PostgreSQL does; Env is what a stack was started with beyond the defaults.
	DevFullSync *Results `json:"devStackFullSync,omitempty"`
	Env         []string `json:"env,omitempty"`
	// Flags are the cluster's flags beyond the tool's own (its -dynamic-config values).
	Flags []string `json:"flags,omitempty"`
	// ShardIOConcurrency is, for the cluster, how many writes of one history shard its Temporal
	// server let be under way at once (history.shardIOConcurrency); 0 in files written before it
	// was recorded, whose clusters ran the server's 1.
	ShardIOConcurrency int `json:"shardIOConcurrency,omitempty"`
}

// Find returns the run of what at shoppers.
func (r Results) Find(what string, shoppers int) (Run, bool) {
	for _, x := range r.Runs {
		if x.What == what && x.Shoppers == shoppers {
			return x, true
		}
	}
	return Run{}, false
}

// Counts are the shopper counts measured, in order.
func (r Results) Counts() []int {
	seen := map[int]bool{}
	var out []int
	for _, x := range r.Runs {
		if !seen[x.Shoppers] {
			seen[x.Shoppers] = true
			out = append(out, x.Shoppers)
		}
	}
	sort.Ints(out)
	return out
}

// CPU is what each party took during a measured window, in percent of one CPU (the machine has
// CPUs × 100 %), and Other, the share of the whole machine that went to processes outside the
// benchmark: the figure that says whether the window was disturbed.
type CPU struct {
	Checkout float64 `json:"checkoutDevPct"`
	Temporal float64 `json:"temporalPct"`
	Balancer float64 `json:"haproxyPct,omitempty"`
	// Support is the stack's own helpers that serve no request themselves: its event broker (the
	// dev stack's NATS server, the cluster's three NATS nodes), and on the cluster its trace
	// collector (Jaeger) and identity provider.
	Support  float64 `json:"supportPct,omitempty"`
	Postgres float64 `json:"postgresPct"`
	Driver   float64 `json:"driverPct"`
	OtherPct float64 `json:"otherPct"`
	IdlePct  float64 `json:"idlePct"`
	// Other is the share (0–1) of the machine's CPU time taken by other processes.
	Other   float64 `json:"otherShare"`
	Seconds float64 `json:"seconds"`
}

// PGWaits summarise pg_stat_activity samples of the stack's database: the mean number of client
// backends in each state over the window, and which waits on heavyweight locks were seen most.
type PGWaits struct {
	Samples int `json:"samples"`
	// Active is the mean number of backends running a statement; OnCPU those of them not waiting
	// on anything; Lock waiting on a heavyweight lock (row, transaction id, tuple, relation,
	// advisory); LWLock, IO and IPC the other waits; IdleInTx the backends inside a transaction
	// waiting for their client's next statement (they hold their locks meanwhile).
	Active   float64 `json:"active"`
	OnCPU    float64 `json:"onCpu"`
	Lock     float64 `json:"lock"`
	LWLock   float64 `json:"lwlock"`
	IO       float64 `json:"io"`
	IPC      float64 `json:"ipc"`
	IdleInTx float64 `json:"idleInTx"`
	// LockSamples is the share of samples with at least one backend waiting on a lock.
	LockSamples float64     `json:"lockSampleShare"`
	TopLocks    []WaitCount `json:"topLocks"`
	TopOther    []WaitCount `json:"topOtherWaits"`
}

// WaitCount is how many backend-samples waited on Event, running the statement named Query.
type WaitCount struct {
	Event string  `json:"event"`
	Query string  `json:"query"`
	Mean  float64 `json:"mean"`
}

// Persistence is what the Temporal server's persistence layer (the dev server's SQLite, the
// cluster's PostgreSQL) did during a window.
type Persistence struct {
	PerSecond float64 `json:"callsPerSecond"`
	MeanMs    float64 `json:"meanMs"`
	P99Ms     float64 `json:"p99Ms"`
	// InFlight is the mean number of persistence calls under way (total latency ÷ window): the
	// dev server's SQLite store runs one write at a time, so above about 1 calls wait for each other.
	InFlight float64     `json:"inFlight"`
	TopOps   []OpLatency `json:"topOperations"`
	// WorkflowTasksTimedOut is how many workflow tasks the history service timed out after they
	// had started (start-to-close, 10 s by default), within the window: tasks that started and
	// whose worker never answered. A task lost in the window's last seconds times out after it.
	WorkflowTasksTimedOut float64 `json:"workflowTasksTimedOut"`
}

// OpLatency is one persistence operation's rate and mean latency.
type OpLatency struct {
	Op        string  `json:"operation"`
	PerSecond float64 `json:"perSecond"`
	MeanMs    float64 `json:"meanMs"`
	Share     float64 `json:"timeShare"`
}

// LockWaitResults are the runs of the lock-waits section.
type LockWaitResults struct {
	StartedAt     time.Time     `json:"startedAt"`
	WindowSeconds float64       `json:"windowSeconds"`
	Counts        []int         `json:"shoppers"`
	CPUs          int           `json:"cpus"`
	CPUModel      string        `json:"cpuModel"`
	LoadBefore    float64       `json:"loadAverageBefore"`
	LoadAfter     float64       `json:"loadAverageAfter"`
	Runs          []LockWaitRun `json:"runs"`
	PlainSettle   int           `json:"plainSettled"`
	Audit         audit.Report  `json:"audit"`
}

// LockWaitRun is one plain run, with the notices in PostgreSQL (Notify) or on the broker.
type LockWaitRun struct {
	Notify bool `json:"notifyInPostgres"`
	Round  int  `json:"round"`
	Run    Run  `json:"run"`
}
