package builds

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/marketplace/checkout/internal/dev/cluster"
	"github.com/marketplace/checkout/worker"
	"github.com/marketplace/checkout/workflows"
)

// DrainingEnv is what a worker of a build that only finishes its pinned runs is started with:
// it never makes its build current, leaves the schedules to the current build and runs none of
// the worker's loops (the relays and checks are the current build's).
var DrainingEnv = []string{"TEMPORAL_SET_CURRENT=never", "SCHEDULES_ENABLED=false", "WORKER_LOOPS=false"}

// Fleet runs the workers of every earlier build Temporal still routes runs to (ramping or
// draining: a run pinned to it is open, or Temporal has not yet seen them all closed), beside the
// build the stack runs itself (Current), from the binaries the Store keeps or builds from
// history. A build's workers stop once Temporal reports it drained and QueryWindow has passed
// since (a closed run is still queried, `status` in the UI, by its own build's workers), never
// before.
type Fleet struct {
	Store    Store
	Sup      *cluster.Supervisor
	Temporal client.Client
	// Deployment is the worker deployment the builds are versions of.
	Deployment string
	// Workers is how many workers each earlier build runs.
	Workers int
	// Worker is worker i (from 1) of an earlier build, running bin: its name (the supervisor's, its
	// log file's), the stack's settings and its own listeners. Fleet adds DrainingEnv.
	Worker func(build string, i int, bin string) cluster.Process
	// QueryWindow is how long a drained build's workers keep answering queries of its closed runs.
	QueryWindow time.Duration
	// Out receives a line for each build started or stopped, and each failure.
	Out io.Writer

	mu      sync.Mutex
	current string
	// running are the process names of each earlier build's workers; adopted builds' names
	// were given by the caller.
	running map[string][]string
	failed  map[string]string // the last failure to start a build, said once
}

// SetCurrent says which build the stack runs itself: Fleet leaves it alone.
func (f *Fleet) SetCurrent(build string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.current = build
}

// Handover makes next the build the stack runs itself and hands Fleet the running workers of
// the build it ran until now (previous, started by the stack): Fleet stops them once previous
// has drained. Called before next becomes current in Temporal, so that no reconcile in between
// starts workers of either build a second time; Drain then makes them draining workers.
func (f *Fleet) Handover(next, previous string, names []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.running == nil {
		f.running = map[string][]string{}
	}
	f.current = next
	delete(f.running, next)
	f.running[previous] = slices.Clone(names)
}

// Drain makes the named workers draining workers from their next start on (a restart after they
// die): they no longer make their build current, keep the schedules or run the loops.
func (f *Fleet) Drain(names []string) {
	for _, p := range f.Sup.Running() {
		if slices.Contains(names, p.Name) {
			f.Sup.SetEnv(p.Name, append(p.Env, DrainingEnv...))
		}
	}
}

// Running lists the earlier builds whose workers Fleet runs.
func (f *Fleet) Running() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for b := range f.running {
		out = append(out, b)
	}
	slices.Sort(out)
	return out
}

// Run reconciles every period until ctx ends.
func (f *Fleet) Run(ctx context.Context, period time.Duration) error {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		if err := f.Reconcile(ctx); err != nil && ctx.Err() == nil {
			f.say("builds: %v", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Reconcile starts the workers of each earlier build that needs them and stops those of each
// build drained for QueryWindow.
func (f *Fleet) Reconcile(ctx context.Context) error {
	builds, err := worker.Builds(ctx, f.Temporal, f.Deployment)
	if err != nil {
		return err
	}
	f.mu.Lock()
	current := f.current
	f.mu.Unlock()
	for _, b := range builds {
		if b.BuildID == current || slices.Contains(workflows.RetiredBuilds, b.BuildID) {
			continue
		}
		running := f.isRunning(b.BuildID)
		switch {
		case b.NeedsWorkers() && !running:
			f.start(ctx, b)
		case !b.NeedsWorkers() && running && f.windowPassed(b):
			f.stop(b)
		}
	}
	return nil
}

func (f *Fleet) isRunning(build string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.running[build]
	return ok
}

// windowPassed: the build has been drained for QueryWindow (an inactive build, which never took a
// run, at once).
func (f *Fleet) windowPassed(b worker.Build) bool {
	if b.Role != worker.RoleDrained || b.DrainedSince.IsZero() {
		return b.Role == worker.RoleInactive
	}
	return time.Since(b.DrainedSince) >= f.QueryWindow
}

func (f *Fleet) start(ctx context.Context, b worker.Build) {
	bin, err := f.Store.Ensure(ctx, b.BuildID)
	if err != nil {
		f.failOnce(b.BuildID, fmt.Sprintf("builds: %d open runs of build %s have no worker: %v", b.Open.Count, b.BuildID, err))
		return
	}
	var ps []cluster.Process
	var names []string
	for i := 1; i <= max(f.Workers, 1); i++ {
		p := f.Worker(b.BuildID, i, bin)
		p.Env = append(p.Env, DrainingEnv...)
		if p.Ready == nil {
			p.Ready = cluster.Alive(3 * time.Second)
		}
		names = append(names, p.Name)
		ps = append(ps, p)
	}
	f.say("builds: build %s is %s with %d open runs: its workers %v run beside today's until it drains",
		b.BuildID, b.Role, b.Open.Count, names)
	if err := f.Sup.Start(ctx, ps...); err != nil {
		f.Sup.Remove(names...)
		f.failOnce(b.BuildID, fmt.Sprintf("builds: the workers of build %s did not start: %v", b.BuildID, err))
		return
	}
	f.mu.Lock()
	if f.running == nil {
		f.running = map[string][]string{}
	}
	f.running[b.BuildID] = names
	delete(f.failed, b.BuildID)
	f.mu.Unlock()
}

func (f *Fleet) stop(b worker.Build) {
	f.mu.Lock()
	names := f.running[b.BuildID]
	delete(f.running, b.BuildID)
	f.mu.Unlock()
	f.Sup.Remove(names...)
	since := "never took a run"
	if !b.DrainedSince.IsZero() {
		since = "drained since " + b.DrainedSince.UTC().Format(time.RFC3339)
	}
	f.say("builds: build %s %s: its workers stopped (%v)", b.BuildID, since, names)
}

func (f *Fleet) failOnce(build, msg string) {
	f.mu.Lock()
	if f.failed == nil {
		f.failed = map[string]string{}
	}
	said := f.failed[build] == msg
	f.failed[build] = msg
	f.mu.Unlock()
	if !said {
		f.say("%s", msg)
	}
}

func (f *Fleet) say(format string, a ...any) {
	if f.Out != nil {
		fmt.Fprintf(f.Out, format+"\n", a...)
	}
}
