package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/marketplace/checkout/bench/internal/figures"
	"github.com/marketplace/checkout/internal/dev/benchkit"
)

// procs are the processes of the stack under test: its checkout processes (`checkout-dev dev`, API
// and worker in one; or the cluster's API replicas and workers), its Temporal server (the dev
// server, or the cluster's four services and UI), HAProxy (the cluster's), the helpers that serve
// no request themselves (figures.CPU's Support) and its PostgreSQL cluster (the postmaster and its
// children).
type procs struct {
	checkout, temporal, balancer, support []int
	postmaster                            int
	cpus                                  int
}

// findProcs finds the processes of `checkout-dev dev` (benchkit.DevParts); its event broker counts
// as the stack's support.
func findProcs(checkoutPID int, dataDir string) (procs, error) {
	p := procs{cpus: benchkit.OnlineCPUs()}
	parts, err := benchkit.DevParts(checkoutPID, dataDir)
	if err != nil {
		return p, err
	}
	for _, part := range parts {
		switch part.Name {
		case "checkout":
			p.checkout = append(p.checkout, part.PID)
		case "temporal":
			p.temporal = append(p.temporal, part.PID)
		case "postgres":
			p.postmaster = part.PID
		case "nats-server":
			p.support = append(p.support, part.PID)
		}
	}
	return p, nil
}

// findClusterProcs reads the processes of `checkout-dev cluster` from its processes.json.
func findClusterProcs(dataDir string) (procs, error) {
	p := procs{cpus: benchkit.OnlineCPUs()}
	var err error
	if p.postmaster, err = benchkit.PostmasterPID(filepath.Join(dataDir, "pg")); err != nil {
		return p, fmt.Errorf("postmaster.pid: %w", err)
	}
	raw, err := os.ReadFile(filepath.Join(dataDir, "processes.json"))
	if err != nil {
		return p, err
	}
	var state map[string]struct {
		Pid     int    `json:"pid"`
		Service string `json:"service"`
	}
	if err := json.Unmarshal(raw, &state); err != nil {
		return p, fmt.Errorf("processes.json: %w", err)
	}
	for _, x := range state {
		switch {
		case x.Service == "api" || x.Service == "worker":
			p.checkout = append(p.checkout, x.Pid)
		case strings.HasPrefix(x.Service, "temporal-"):
			p.temporal = append(p.temporal, x.Pid)
		case x.Service == "haproxy":
			p.balancer = append(p.balancer, x.Pid)
		case strings.HasPrefix(x.Service, "nats-") || x.Service == "jaeger" || x.Service == "oidc-provider":
			p.support = append(p.support, x.Pid)
		}
	}
	if len(p.checkout) == 0 || len(p.temporal) == 0 || len(p.balancer) == 0 {
		return p, errors.New("processes.json: no checkout, Temporal or HAProxy process")
	}
	return p, nil
}

// cpuSnap is one reading of the machine's CPU counters and of each party's share, in jiffies.
type cpuSnap struct {
	at                                                      time.Time
	busy, total                                             float64 // the whole machine; busy counts time stolen by the hypervisor
	checkout, temporal, balancer, support, postgres, driver float64
}

// jiffies is the CPU time of pids.
func jiffies(pids []int) float64 {
	var sum float64
	for _, pid := range pids {
		if st, err := benchkit.ProcTimes(pid); err == nil {
			sum += st.UTime + st.STime
		}
	}
	return sum
}

func (p procs) snap() (cpuSnap, error) {
	s := cpuSnap{at: time.Now()}
	var err error
	if s.busy, s.total, err = benchkit.MachineJiffies(); err != nil {
		return s, err
	}
	s.checkout, s.temporal, s.balancer, s.support = jiffies(p.checkout), jiffies(p.temporal), jiffies(p.balancer), jiffies(p.support)
	if j, err := benchkit.TreeJiffies(p.postmaster); err == nil {
		s.postgres = j
	}
	s.driver = benchkit.SelfJiffies()
	return s, nil
}

func cpuBetween(a, b cpuSnap, cpus int) figures.CPU {
	total := b.total - a.total
	if total <= 0 {
		return figures.CPU{}
	}
	perCPU := total / float64(cpus) // jiffies of one CPU over the window
	pct := func(x float64) float64 { return 100 * x / perCPU }
	ours := (b.checkout - a.checkout) + (b.temporal - a.temporal) + (b.balancer - a.balancer) + (b.support - a.support) +
		(b.postgres - a.postgres) + (b.driver - a.driver)
	other := max((b.busy-a.busy)-ours, 0)
	return figures.CPU{Checkout: pct(b.checkout - a.checkout), Temporal: pct(b.temporal - a.temporal), Balancer: pct(b.balancer - a.balancer),
		Support: pct(b.support - a.support), Postgres: pct(b.postgres - a.postgres), Driver: pct(b.driver - a.driver), OtherPct: pct(other),
		IdlePct: pct(total - (b.busy - a.busy)), Other: other / total, Seconds: b.at.Sub(a.at).Seconds()}
}

// stackBusy is the stack's CPU (checkout, Temporal, HAProxy, its support, PostgreSQL) over d, in percent of one CPU.
func (p procs) stackBusy(d time.Duration) float64 {
	a, err := p.snap()
	if err != nil {
		return 0
	}
	time.Sleep(d)
	b, err := p.snap()
	if err != nil {
		return 0
	}
	c := cpuBetween(a, b, p.cpus)
	return c.Checkout + c.Temporal + c.Balancer + c.Support + c.Postgres
}

type pgSample struct {
	at                                           time.Time
	active, cpu, lock, lwlock, io, ipc, idleInTx int
	locks, other                                 map[string]int // "event\x00query" → backends
}

// pgSampler reads pg_stat_activity of the stack's database every interval.
type pgSampler struct {
	mu      sync.Mutex
	samples []pgSample
	stop    chan struct{}
	done    chan struct{}
}

var sqlcName = regexp.MustCompile(`-- name: (\w+)`)

// queryName names a statement by its sqlc name, or by its first words.
func queryName(q string) string {
	if m := sqlcName.FindStringSubmatch(q); m != nil {
		return m[1]
	}
	q = strings.Join(strings.Fields(q), " ")
	if len(q) > 48 {
		q = q[:48] + "…"
	}
	return q
}

func startPGSampler(ctx context.Context, url string, every time.Duration) (*pgSampler, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	s := &pgSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer conn.Close(context.Background())
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			smp, err := readActivity(ctx, conn)
			if err != nil {
				continue
			}
			s.mu.Lock()
			s.samples = append(s.samples, smp)
			s.mu.Unlock()
		}
	}()
	return s, nil
}

func readActivity(ctx context.Context, conn *pgx.Conn) (pgSample, error) {
	smp := pgSample{at: time.Now(), locks: map[string]int{}, other: map[string]int{}}
	rows, err := conn.Query(ctx, `SELECT coalesce(wait_event_type, ''), coalesce(wait_event, ''), state, left(query, 300)
		FROM pg_stat_activity
		WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND datname = current_database()
		  AND state IN ('active', 'idle in transaction')`)
	if err != nil {
		return smp, err
	}
	defer rows.Close()
	for rows.Next() {
		var typ, event, state, query string
		if err := rows.Scan(&typ, &event, &state, &query); err != nil {
			return smp, err
		}
		if state != "active" {
			smp.idleInTx++
			continue
		}
		smp.active++
		key := event + "\x00" + queryName(query)
		switch typ {
		case "":
			smp.cpu++
		case "Lock":
			smp.lock++
			smp.locks[key]++
		case "LWLock":
			smp.lwlock++
			smp.other[typ+":"+key]++
		case "IO":
			smp.io++
			smp.other[typ+":"+key]++
		case "IPC":
			smp.ipc++
			smp.other[typ+":"+key]++
		default:
			smp.other[typ+":"+key]++
		}
	}
	return smp, rows.Err()
}

// close stops the sampler.
func (s *pgSampler) close() {
	close(s.stop)
	<-s.done
}

// between summarises the samples taken in [from, to].
func (s *pgSampler) between(from, to time.Time) figures.PGWaits {
	s.mu.Lock()
	defer s.mu.Unlock()
	var w figures.PGWaits
	locks, other := map[string]int{}, map[string]int{}
	withLock := 0
	for _, smp := range s.samples {
		if smp.at.Before(from) || smp.at.After(to) {
			continue
		}
		w.Samples++
		w.Active += float64(smp.active)
		w.OnCPU += float64(smp.cpu)
		w.Lock += float64(smp.lock)
		w.LWLock += float64(smp.lwlock)
		w.IO += float64(smp.io)
		w.IPC += float64(smp.ipc)
		w.IdleInTx += float64(smp.idleInTx)
		if smp.lock > 0 {
			withLock++
		}
		for k, n := range smp.locks {
			locks[k] += n
		}
		for k, n := range smp.other {
			other[k] += n
		}
	}
	if w.Samples == 0 {
		return w
	}
	n := float64(w.Samples)
	for _, v := range []*float64{&w.Active, &w.OnCPU, &w.Lock, &w.LWLock, &w.IO, &w.IPC, &w.IdleInTx} {
		*v /= n
	}
	w.LockSamples = float64(withLock) / n
	w.TopLocks, w.TopOther = top(locks, n, 3), top(other, n, 3)
	return w
}

func top(m map[string]int, samples float64, k int) []figures.WaitCount {
	out := make([]figures.WaitCount, 0, len(m))
	for key, c := range m {
		event, query, _ := strings.Cut(key, "\x00")
		out = append(out, figures.WaitCount{Event: event, Query: query, Mean: float64(c) / samples})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Mean != out[j].Mean {
			return out[i].Mean > out[j].Mean
		}
		return out[i].Event+out[i].Query < out[j].Event+out[j].Query
	})
	return out[:min(k, len(out))]
}

// persistence is the Temporal server's persistence_latency histogram at one moment: per
// operation ("service operation" → calls, seconds) and its buckets over all of them.
type persistence struct {
	latencies
	buckets map[float64]float64
	// lostTasks counts the workflow tasks the history service timed out after they had started:
	// a worker took the task and never answered, or the task was recorded as started and its
	// poll never got it (matching gives a sync match's record 1 s; a write that commits after
	// that leaves the task started with no worker). Each costs its workflow the task's timeout.
	lostTasks float64
}

// scrapeTemporal reads the Temporal server's /metrics, summed over its processes (the dev server
// has one, the cluster one per service), in one pass: its persistence histogram, and its timings
// of a task on its way to a worker (serverSeries). The persistence figures stand only if every
// process answered (the error says which did not); the tasks' leave out a process that did not.
func scrapeTemporal(ctx context.Context, urls []string) (persistence, latencies, error) {
	p := persistence{latencies: newLatencies(), buckets: map[float64]float64{}}
	tasks := newLatencies()
	var errs []error
	for _, url := range urls {
		errs = append(errs, benchkit.ScrapeMetrics(ctx, url, func(name string, l map[string]string, v float64) {
			p.visit(name, l, v)
			tasks.visit(name, l, v, "", serverSeries)
		}))
	}
	return p, tasks, errors.Join(errs...)
}

func (p *persistence) visit(name string, l map[string]string, v float64) {
	op := l["service_name"] + " " + l["operation"]
	switch name {
	case "persistence_latency_count":
		p.count[op] += v
	case "persistence_latency_sum":
		p.sum[op] += v
	case "start_to_close_timeout":
		if l["operation"] == "TimerActiveTaskWorkflowTaskTimeout" {
			p.lostTasks += v
		}
	case "persistence_latency_bucket":
		le, err := strconv.ParseFloat(l["le"], 64)
		if l["le"] == "+Inf" {
			le, err = math.Inf(1), nil
		}
		if err == nil {
			p.buckets[le] += v
		}
	}
}

func persistenceBetween(a, b persistence) *figures.Persistence {
	secs := b.at.Sub(a.at).Seconds()
	if secs <= 0 || b.count == nil || a.count == nil {
		return nil
	}
	var calls, total float64
	var ops []figures.OpLatency
	for op, c := range b.count {
		dc, ds := c-a.count[op], b.sum[op]-a.sum[op]
		if dc <= 0 {
			continue
		}
		calls += dc
		total += ds
		ops = append(ops, figures.OpLatency{Op: op, PerSecond: dc / secs, MeanMs: 1000 * ds / dc, Share: ds})
	}
	lost := b.lostTasks - a.lostTasks
	if calls == 0 {
		return &figures.Persistence{WorkflowTasksTimedOut: lost}
	}
	for i := range ops {
		ops[i].Share /= total
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].Share > ops[j].Share })
	out := &figures.Persistence{PerSecond: calls / secs, MeanMs: 1000 * total / calls, InFlight: total / secs,
		TopOps: ops[:min(3, len(ops))], WorkflowTasksTimedOut: lost}
	// p99 from the bucket deltas, linear within the bucket.
	les := make([]float64, 0, len(b.buckets))
	for le := range b.buckets {
		les = append(les, le)
	}
	sort.Float64s(les)
	want, prevLE, prevN := 0.99*calls, 0.0, 0.0
	for _, le := range les {
		n := b.buckets[le] - a.buckets[le]
		if n >= want {
			if math.IsInf(le, 1) {
				out.P99Ms = 1000 * prevLE
			} else if n > prevN {
				out.P99Ms = 1000 * (prevLE + (le-prevLE)*(want-prevN)/(n-prevN))
			} else {
				out.P99Ms = 1000 * le
			}
			break
		}
		prevLE, prevN = le, n
	}
	return out
}

// latencies are latency histograms at one moment, summed over the processes that keep them:
// series → count and sum (seconds).
type latencies struct {
	at         time.Time
	count, sum map[string]float64
}

// seriesOf names the series a sample of a histogram's _sum or _count belongs to (false: not one
// the caller keeps), given the histogram's name without the suffix.
type seriesOf func(histogram string, labels map[string]string) (string, bool)

func newLatencies() latencies {
	return latencies{at: time.Now(), count: map[string]float64{}, sum: map[string]float64{}}
}

// scrapeLatencies reads the histograms series keeps from each of urls' /metrics (see visit). A
// process that does not answer is left out.
func scrapeLatencies(ctx context.Context, urls []string, suffix string, series seriesOf) latencies {
	l := newLatencies()
	for _, url := range urls {
		_ = benchkit.ScrapeMetrics(ctx, url, func(name string, labels map[string]string, v float64) {
			l.visit(name, labels, v, suffix, series)
		})
	}
	return l
}

// visit adds one sample to l if it is the _sum or _count of a histogram series keeps, whose sums
// are in seconds and whose name ends in suffix before them.
func (l latencies) visit(name string, labels map[string]string, v float64, suffix string, series seriesOf) {
	histogram, total := strings.CutSuffix(name, suffix+"_sum")
	if !total {
		var ok bool
		if histogram, ok = strings.CutSuffix(name, suffix+"_count"); !ok {
			return
		}
	}
	key, ok := series(histogram, labels)
	if !ok {
		return
	}
	if total {
		l.sum[key] += v
	} else {
		l.count[key] += v
	}
}

// sdkSeries keeps every temporal_*_latency_seconds histogram of the checkout's /metrics, a series
// per metric and, for the client's requests, per operation: the long requests among them (the
// API's Update-with-Start waits for the update's answer: long_request ExecuteMultiOperation) but
// the workers' polls of their task queues. A poll that finds no task waits up to a minute for one,
// and the histogram counts it when it ends, so the polls that ended in a window carry the idle
// minute before it.
func sdkSeries(histogram string, labels map[string]string) (string, bool) {
	name, ok := strings.CutPrefix(histogram, "temporal_")
	if !ok || taskQueuePoll[labels["operation"]] {
		return "", false
	}
	if op := labels["operation"]; op != "" {
		name += " " + op
	}
	return name, true
}

// taskQueuePoll are the workers' long polls of their task queues.
var taskQueuePoll = map[string]bool{"PollWorkflowTaskQueue": true, "PollActivityTaskQueue": true, "PollNexusTaskQueue": true}

// serverTaskLatencies are the Temporal server's timings of a task on its way to a worker: in the
// history service, a task from its creation to its completion (task_latency_queue), loaded into
// memory (task_latency_load), waiting for a processing slot (task_latency_schedule) and processed
// (task_latency_processing), where a workflow task's transfer task is handed to matching; in the
// matching service, a task written to its backlog (task_write_latency), matched to a poll there
// (asyncmatch_latency) or handed straight to a waiting poll (syncmatch_latency), and dispatched
// from its creation (task_dispatch_latency).
var serverTaskLatencies = map[string]bool{"task_latency_queue": true, "task_latency_load": true,
	"task_latency_schedule": true, "task_latency_processing": true, "task_write_latency": true,
	"asyncmatch_latency": true, "syncmatch_latency": true, "task_dispatch_latency": true}

// serverSeries keeps serverTaskLatencies, a series per service, metric, operation and task type.
func serverSeries(histogram string, labels map[string]string) (string, bool) {
	if !serverTaskLatencies[histogram] {
		return "", false
	}
	parts := []string{labels["service_name"], histogram}
	for _, l := range []string{"operation", "task_type"} {
		if v := labels[l]; v != "" && v != "none" && v != "__unknown__" {
			parts = append(parts, v)
		}
	}
	return strings.Join(parts, " "), true
}

// latenciesBetween is each series over the time between a and b, the most in that state at once
// first.
func latenciesBetween(a, b latencies) []figures.Latency {
	secs := b.at.Sub(a.at).Seconds()
	if secs <= 0 || a.count == nil || b.count == nil {
		return nil
	}
	var out []figures.Latency
	for series, c := range b.count {
		dc, ds := c-a.count[series], b.sum[series]-a.sum[series]
		if dc <= 0 {
			continue
		}
		out = append(out, figures.Latency{Series: series, PerSecond: dc / secs, MeanMs: 1000 * ds / dc, InFlight: ds / secs})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].InFlight != out[j].InFlight {
			return out[i].InFlight > out[j].InFlight
		}
		return out[i].Series < out[j].Series
	})
	return out
}
