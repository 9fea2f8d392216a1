package main

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"strconv"
)

// The discrete-event engine: a clock, a queue of timed events, hosts whose cores are shared by
// processor sharing, and serial resources (held by a fixed number of requests at a time, a lock by
// one, the others waiting first come first served).
// A request is a list of steps run one after another (continuation passing): a step calls next
// when it is done, at once or at a later event.

// event is a function due at a time; seq breaks ties in the order events were scheduled, so that
// a run is the same for the same seed.
type event struct {
	at  float64
	seq uint64
	fn  func()
}

type events []event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	if e[i].at != e[j].at {
		return e[i].at < e[j].at
	}
	return e[i].seq < e[j].seq
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

// sim is one simulation: its clock, its events and its random numbers (one seeded source).
type sim struct {
	now    float64
	seq    uint64
	queue  events
	rng    *rand.Rand
	pools  map[string]*pool
	locks  map[string][]*serial
	warmup float64 // statistics count from here
}

func newSim(seed uint64) *sim {
	return &sim{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), pools: map[string]*pool{},
		locks: map[string][]*serial{}}
}

func (s *sim) at(t float64, fn func()) {
	s.seq++
	heap.Push(&s.queue, event{at: t, seq: s.seq, fn: fn})
}

// runUntil processes events until the clock passes end.
func (s *sim) runUntil(end float64) {
	for s.queue.Len() > 0 {
		e := heap.Pop(&s.queue).(event)
		if e.at > end {
			s.now = end
			return
		}
		s.now = e.at
		e.fn()
	}
	s.now = end
}

// exp draws an exponential time of the given mean (0 for a mean of 0).
func (s *sim) exp(mean float64) float64 {
	if mean <= 0 {
		return 0
	}
	return s.rng.ExpFloat64() * mean
}

// pool is the hosts of one part of the topology (or the one machine every part shares).
type pool struct {
	name  string
	hosts []*host
}

// host is one machine's cores, shared as the kernel and Go share them: the kernel divides the
// cores among runnable threads, a Go process runs at most as many threads as it has GOMAXPROCS (the
// host's cores) and shares them among its goroutines, and each PostgreSQL backend is a process of
// one thread. So each process (a group of jobs) weighs min(its jobs, its threads); the cores are
// divided among processes by weight (each at most its weight in cores), and a process's share
// evenly among its jobs. With every job its own one-thread process this is plain processor
// sharing: n jobs on c cores each run at min(1, c/n) of a core.
type host struct {
	s       *sim
	cores   float64
	jobs    []*psJob
	procs   map[string]*proc // the processes of more than one job's possible jobs, by name
	singles int              // jobs that are a one-thread process of their own
	last    float64          // when remaining work was last brought up to date
	version uint64           // bumps on each change; a completion event of an older version is stale
	busy    float64          // core-seconds served after warm-up
}

// proc is a process on a host: its threads and how many of its jobs are there.
type proc struct {
	threads float64
	jobs    int
}

type psJob struct {
	proc *proc   // nil: a one-thread process of its own
	left float64 // core-seconds still to serve
	rate float64 // cores it runs on since the last change
	done func()
}

func (s *sim) addPool(name string, hosts int, cores float64) {
	p := &pool{name: name}
	for range hosts {
		p.hosts = append(p.hosts, &host{s: s, cores: cores, procs: map[string]*proc{}})
	}
	s.pools[name] = p
}

// advance serves the jobs for the time since the last change.
func (h *host) advance() {
	dt := h.s.now - h.last
	if dt > 0 && len(h.jobs) > 0 {
		var served float64
		for _, j := range h.jobs {
			j.left -= dt * j.rate
			served += j.rate
		}
		if h.s.now > h.s.warmup {
			h.busy += math.Min(dt, h.s.now-h.s.warmup) * served
		}
	}
	h.last = h.s.now
}

// reschedule shares the cores anew and plans the next completion on h.
func (h *host) reschedule() {
	h.version++
	if len(h.jobs) == 0 {
		return
	}
	total := float64(h.singles)
	for _, p := range h.procs {
		total += math.Min(float64(p.jobs), p.threads)
	}
	scale := math.Min(1, h.cores/total)
	least := math.Inf(1)
	for _, j := range h.jobs {
		if j.proc == nil {
			j.rate = scale
		} else {
			j.rate = math.Min(float64(j.proc.jobs), j.proc.threads) * scale / float64(j.proc.jobs)
		}
		least = math.Min(least, math.Max(j.left, 0)/j.rate)
	}
	v := h.version
	h.s.at(h.s.now+least, func() { h.complete(v) })
}

func (h *host) complete(v uint64) {
	if v != h.version {
		return
	}
	h.advance()
	// The job that was due, and any other within rounding of it.
	least := math.Inf(1)
	for _, j := range h.jobs {
		least = math.Min(least, j.left/j.rate)
	}
	var done []*psJob
	kept := h.jobs[:0]
	for _, j := range h.jobs {
		if j.left/j.rate <= least+1e-12 || j.left <= 1e-12 {
			done = append(done, j)
			if j.proc == nil {
				h.singles--
			} else {
				j.proc.jobs--
			}
		} else {
			kept = append(kept, j)
		}
	}
	clear(h.jobs[len(kept):])
	h.jobs = kept
	h.reschedule()
	for _, j := range done {
		j.done()
	}
}

// serve puts work (core-seconds) on h, in the process named procName of threads threads (empty:
// a one-thread process of its own), and calls done when it is served.
func (h *host) serve(procName string, threads float64, work float64, done func()) {
	if work <= 0 {
		done()
		return
	}
	h.advance()
	j := &psJob{left: work, done: done}
	if procName == "" {
		h.singles++
	} else {
		p := h.procs[procName]
		if p == nil {
			p = &proc{threads: threads}
			h.procs[procName] = p
		}
		p.jobs++
		j.proc = p
	}
	h.jobs = append(h.jobs, j)
	h.reschedule()
}

// serial is a resource held by at most slots requests at a time (a lock: one), the others waiting
// first come first served.
type serial struct {
	s         *sim
	slots     int
	held      int     // slots taken
	last      float64 // when held last changed
	waiting   []func()
	busy      float64 // slot-seconds held after warm-up
	holds     int     // acquisitions after warm-up
	waitTotal float64 // seconds waited by those acquisitions
}

// addLocks adds n resources of the given slots each under name.
func (s *sim) addLocks(name string, n, slots int) {
	for range n {
		s.locks[name] = append(s.locks[name], &serial{s: s, slots: max(slots, 1)})
	}
}

// take changes the slots held by d, counting the slot-seconds held so far.
func (l *serial) take(d int) {
	if from := math.Max(l.last, l.s.warmup); l.s.now > from {
		l.busy += float64(l.held) * (l.s.now - from)
	}
	l.last = l.s.now
	l.held += d
}

func (l *serial) acquire(next func()) {
	asked := l.s.now
	grant := func() {
		l.take(1)
		if l.s.now > l.s.warmup {
			l.holds++
			l.waitTotal += l.s.now - asked
		}
		next()
	}
	if l.held < l.slots {
		grant()
		return
	}
	l.waiting = append(l.waiting, grant)
}

func (l *serial) release() {
	l.take(-1)
	if len(l.waiting) > 0 {
		grant := l.waiting[0]
		l.waiting = l.waiting[1:]
		grant()
	}
}

// occupancy is the share of l's slots held over measure seconds after warm-up (0–1).
func (l *serial) occupancy(measure float64) float64 {
	l.take(0)
	return l.busy / (float64(l.slots) * measure)
}

// gauge is how many requests are inside some steps, averaged over the time after warm-up.
type gauge struct {
	s    *sim
	n    int
	last float64 // when n last changed
	area float64 // request-seconds inside after warm-up
}

func (g *gauge) add(d int) {
	if from := math.Max(g.last, g.s.warmup); g.s.now > from {
		g.area += float64(g.n) * (g.s.now - from)
	}
	g.last = g.s.now
	g.n += d
}

// within runs inner counted by g.
func within(g *gauge, inner ...step) step {
	return func(next func()) {
		g.add(1)
		run(inner, func() {
			g.add(-1)
			next()
		})
	}
}

// step is one piece of a request: it calls next when it is done.
type step func(next func())

// run runs steps one after another, then done.
func run(steps []step, done func()) {
	var from func(i int)
	from = func(i int) {
		if i == len(steps) {
			done()
			return
		}
		steps[i](func() { from(i + 1) })
	}
	from(0)
}

// cpu is a step of work on one host of the pool, picked at random, in one of procs processes of
// the part on that host, picked at random (procs 0: a process of its own, as a PostgreSQL backend
// is): exponentially distributed core-seconds of the given mean.
func (s *sim) cpu(poolName, part string, procs int, mean float64) step {
	names := make([]string, procs)
	for i := range names {
		names[i] = part + "/" + strconv.Itoa(i)
	}
	p := s.pools[poolName]
	return func(next func()) {
		h := p.hosts[s.rng.IntN(len(p.hosts))]
		name := ""
		if procs > 0 {
			name = names[s.rng.IntN(procs)]
		}
		h.serve(name, h.cores, s.exp(mean), next)
	}
}

// wait is a step of fixed latency that takes no CPU (a commit's flush, a round trip).
func (s *sim) wait(d float64) step {
	return func(next func()) {
		if d <= 0 {
			next()
			return
		}
		s.at(s.now+d, next)
	}
}

// holding runs inner while holding lock l.
func holding(l *serial, inner ...step) step {
	return func(next func()) {
		l.acquire(func() {
			run(inner, func() {
				l.release()
				next()
			})
		})
	}
}
