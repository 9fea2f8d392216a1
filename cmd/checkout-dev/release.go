package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/internal/dev/builds"
	"github.com/marketplace/checkout/internal/dev/cluster"
)

// clusterRun is a running `checkout-dev cluster`'s product side: the build it runs (its workers and
// API replicas), the fleet of earlier builds' workers draining beside it, and releases.
type clusterRun struct {
	plan       cluster.Plan
	sup        *cluster.Supervisor
	tc         client.Client
	store      builds.Store
	fleet      *builds.Fleet
	deployment string
	workers    int

	releasing sync.Mutex // one release at a time

	mu      sync.Mutex // the fields below
	build   string     // the current build
	bin     string     // its kept binary
	current []string   // its workers' names
	slots   map[string]int
	legacy  map[string]bool // by binary: it has no TLS settings
}

// isLegacy says whether bin has no TLS settings (a release before them): its processes reach
// Temporal through the cluster's legacy proxy.
func (r *clusterRun) isLegacy(ctx context.Context, bin string) bool {
	r.mu.Lock()
	legacy, known := r.legacy[bin]
	r.mu.Unlock()
	if known {
		return legacy
	}
	info, err := builds.Describe(ctx, bin)
	legacy = err != nil || !info.TemporalTLS
	r.mu.Lock()
	if r.legacy == nil {
		r.legacy = map[string]bool{}
	}
	r.legacy[bin] = legacy
	r.mu.Unlock()
	return legacy
}

// currentBuild is the deployment's current build ("" when no worker of it ever polled).
func currentBuild(ctx context.Context, tc client.Client, deployment string) (string, error) {
	d, err := tc.WorkerDeploymentClient().GetHandle(deployment).Describe(ctx, client.WorkerDeploymentDescribeOptions{})
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if v := d.Info.RoutingConfig.CurrentVersion; v != nil {
		return v.BuildID, nil
	}
	return "", nil
}

// workerProcess is worker i of a build, in a free metrics slot.
func (r *clusterRun) workerProcess(build string, i int, bin string) cluster.Process {
	legacy := r.isLegacy(context.Background(), bin)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.workerProcessLocked(build, i, bin, legacy)
}

func (r *clusterRun) workerProcessLocked(build string, i int, bin string, legacy bool) cluster.Process {
	if r.slots == nil {
		r.slots = map[string]int{}
	}
	running := map[string]bool{}
	for _, p := range r.sup.Running() {
		running[p.Name] = true
	}
	name := cluster.WorkerName(build, i)
	delete(r.slots, name)
	// A slot is taken by a running worker, or by another worker of this build: a build's workers
	// are given their slots one after the other before any of them starts.
	sameBuild := strings.TrimSuffix(cluster.WorkerName(build, 0), "0")
	used := map[int]bool{}
	for n, slot := range r.slots {
		if running[n] || strings.HasPrefix(n, sameBuild) {
			used[slot] = true
		} else {
			delete(r.slots, n)
		}
	}
	slot := 0
	for used[slot] && slot < cluster.WorkerSlots-1 {
		slot++
	}
	r.slots[name] = slot
	return r.plan.Worker(build, i, bin, slot, legacy)
}

// startBuild starts the workers of build from bin and waits until each polls as that build's
// version. schedules says whether they create or update the scheduled jobs (the current build's
// workers do).
func (r *clusterRun) startBuild(ctx context.Context, build, bin string, schedules bool) ([]string, error) {
	var ps []cluster.Process
	var names []string
	legacy := r.isLegacy(ctx, bin)
	r.mu.Lock()
	for i := 1; i <= r.workers; i++ {
		p := r.workerProcessLocked(build, i, bin, legacy)
		p.Env = append(p.Env, "SCHEDULES_ENABLED="+strconv.FormatBool(schedules))
		p.Ready = versionPolls(r.tc, r.deployment, build)
		ps = append(ps, p)
		names = append(names, p.Name)
	}
	r.mu.Unlock()
	if err := r.sup.Start(ctx, ps...); err != nil {
		r.sup.Remove(names...)
		return nil, err
	}
	return names, nil
}

// versionPolls is ready once workers of build poll every task queue (workflow and activity
// tasks) the deployment's current build polls: only then may it become current.
func versionPolls(tc client.Client, deployment, build string) func(context.Context) error {
	return func(ctx context.Context) error {
		h := tc.WorkerDeploymentClient().GetHandle(deployment)
		v, err := h.DescribeVersion(ctx, client.WorkerDeploymentDescribeVersionOptions{BuildID: build})
		if err != nil {
			return fmt.Errorf("no worker of build %s polls yet: %w", build, err)
		}
		polled := map[client.WorkerDeploymentTaskQueueInfo]bool{}
		for _, q := range v.Info.TaskQueuesInfos {
			polled[q] = true
		}
		if len(polled) == 0 {
			return fmt.Errorf("no worker of build %s polls yet", build)
		}
		current, err := currentBuild(ctx, tc, deployment)
		if err != nil || current == "" || current == build {
			return err
		}
		cv, err := h.DescribeVersion(ctx, client.WorkerDeploymentDescribeVersionOptions{BuildID: current})
		if err != nil {
			return err
		}
		for _, q := range cv.Info.TaskQueuesInfos {
			if !polled[q] {
				return fmt.Errorf("build %s does not poll %s (%v) yet, which %s does", build, q.Name, q.Type, current)
			}
		}
		return nil
	}
}

// setCurrent makes build the deployment's current version, after ramping it through each share of
// ramp for step.
func (r *clusterRun) setCurrent(ctx context.Context, build string, ramp []float32, step time.Duration, say func(string, ...any)) error {
	h := r.tc.WorkerDeploymentClient().GetHandle(r.deployment)
	for _, pct := range ramp {
		if _, err := h.SetRampingVersion(ctx, client.WorkerDeploymentSetRampingVersionOptions{BuildID: build, Percentage: pct}); err != nil {
			return fmt.Errorf("ramp %s to %g%%: %w", build, pct, err)
		}
		say("%s takes %g%% of new runs; next step in %s", build, pct, step)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(step):
		}
	}
	if _, err := h.SetCurrentVersion(ctx, client.WorkerDeploymentSetCurrentVersionOptions{BuildID: build}); err != nil {
		return fmt.Errorf("make %s current: %w", build, err)
	}
	say("%s is current: new runs start on it", build)
	return nil
}

// takeSchedules makes the build's workers keep the scheduled jobs from their next start on, and
// restarts the first so that it writes them now.
func (r *clusterRun) takeSchedules(ctx context.Context, names []string) error {
	for _, p := range r.sup.Running() {
		if slices.Contains(names, p.Name) {
			r.sup.SetEnv(p.Name, append(p.Env, "SCHEDULES_ENABLED=true"))
		}
	}
	return r.sup.Restart(ctx, names[0])
}

// rollAPIs replaces the API replicas, one at a time, with replicas running bin: HAProxy sends
// requests to the others while one restarts.
func (r *clusterRun) rollAPIs(ctx context.Context, bin string, say func(string, ...any)) error {
	legacy := r.isLegacy(ctx, bin)
	for _, p := range r.sup.Running() {
		if p.Service != "api" {
			continue
		}
		var i int
		if _, err := fmt.Sscanf(p.Name, "api-%d", &i); err != nil {
			return fmt.Errorf("API replica %q: %w", p.Name, err)
		}
		r.sup.Remove(p.Name)
		if err := r.sup.Start(ctx, r.plan.API(i, bin, legacy)); err != nil {
			return err
		}
		say("%s runs the new binary", p.Name)
	}
	return nil
}

// releaseRequest is what `checkout-dev release` asks of a running cluster.
type releaseRequest struct {
	Binary  string    `json:"binary"`
	BuildID string    `json:"buildId,omitempty"`
	Ramp    []float32 `json:"ramp,omitempty"`
	Step    string    `json:"step,omitempty"`
}

// release brings a binary into the running cluster: kept as its build's; migrations; its workers
// beside the running ones, ready; current (after the ramp); the scheduled jobs; the API replicas.
// The build that was current drains under the fleet, whose workers stop once Temporal reports it
// drained and the query window has passed. A binary of the current build (its activities or API
// changed) replaces that build's workers and replicas one at a time.
func (r *clusterRun) release(ctx context.Context, req releaseRequest, out io.Writer) error {
	r.releasing.Lock()
	defer r.releasing.Unlock()
	r.mu.Lock()
	build0, current0 := r.build, slices.Clone(r.current)
	r.mu.Unlock()
	say := func(format string, a ...any) {
		line := fmt.Sprintf("release: "+format, a...)
		fmt.Fprintln(out, line)
		fmt.Println(line)
		if f, ok := out.(http.Flusher); ok {
			f.Flush()
		}
	}
	step := 30 * time.Second
	if req.Step != "" {
		d, err := time.ParseDuration(req.Step)
		if err != nil {
			return fmt.Errorf("ramp step %q: %w", req.Step, err)
		}
		step = d
	}
	build := req.BuildID
	if build == "" {
		var err error
		if build, err = builds.IDOf(ctx, req.Binary); err != nil {
			return err
		}
	}
	bin, err := r.store.Keep(build, req.Binary)
	if err != nil {
		return err
	}
	say("build %s kept as %s", build, bin)
	if err := r.sup.Run(ctx, cluster.Process{Name: "migrate", Service: "migrate", Path: bin, Args: []string{"migrate"},
		Env: r.plan.CheckoutEnv, Job: true}); err != nil {
		return err
	}
	say("migrations applied")

	if build == build0 {
		// The same build: its runs stay where they are; its workers take the new binary one by one.
		legacy := r.isLegacy(ctx, bin)
		for i, name := range current0 {
			r.mu.Lock()
			slot := r.slots[name]
			r.mu.Unlock()
			p := r.plan.Worker(build, i+1, bin, slot, legacy)
			p.Env = append(p.Env, "SCHEDULES_ENABLED=true")
			p.Ready = versionPolls(r.tc, r.deployment, build)
			r.sup.Remove(name)
			if err := r.sup.Start(ctx, p); err != nil {
				return err
			}
			say("%s runs the new binary", name)
		}
		r.mu.Lock()
		r.bin = bin
		r.mu.Unlock()
		return r.rollAPIs(ctx, bin, say)
	}

	names, err := r.startBuild(ctx, build, bin, false)
	if err != nil {
		return fmt.Errorf("the workers of %s did not start: %w", build, err)
	}
	say("%d workers of %s poll beside %s's", len(names), build, build0)
	r.fleet.Handover(build, build0, current0)
	if err := r.setCurrent(ctx, build, req.Ramp, step, say); err != nil {
		r.fleet.Handover(build0, build, names) // build0 stays the stack's; the new workers drain
		return err
	}
	r.mu.Lock()
	r.build, r.bin, r.current = build, bin, names
	r.mu.Unlock()
	r.fleet.Drain(current0)
	say("%s drains: its workers keep running until Temporal reports it drained (checkout builds)", build0)
	if err := r.takeSchedules(ctx, names); err != nil {
		return err
	}
	say("the scheduled jobs run on %s", build)
	return r.rollAPIs(ctx, bin, say)
}

// controlSocket is where a running cluster takes releases.
func controlSocket(dir string) string { return filepath.Join(dir, "control.sock") }

// serveControl answers `checkout-dev release` on the cluster's control socket, readable and writable
// by its owner only.
func (r *clusterRun) serveControl(ctx context.Context, dir string) error {
	path := controlSocket(dir)
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /release", func(w http.ResponseWriter, req *http.Request) {
		var rr releaseRequest
		if err := json.NewDecoder(req.Body).Decode(&rr); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		if err := r.release(ctx, rr, w); err != nil {
			fmt.Fprintf(w, "release failed: %v\n", err)
			fmt.Printf("release failed: %v\n", err)
			return
		}
		fmt.Fprintln(w, "release done")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	err = srv.Serve(ln)
	_ = os.Remove(path)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// runRelease is `checkout-dev release`: it asks the running cluster to release a binary.
func runRelease(ctx context.Context, cfg config.Config, args []string) error {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	dir := fs.String("dir", filepath.Join(cfg.Dev.DataDir, "cluster"), "the running cluster's data folder")
	binary := fs.String("binary", "", "the checkout binary to release (default: checkout beside this binary)")
	build := fs.String("build-id", "", "its build (default: what the binary says)")
	ramp := fs.String("ramp", "", "shares of new runs the build takes before it is current, comma-separated (10,50)")
	step := fs.Duration("ramp-step", 30*time.Second, "how long each share of --ramp lasts")
	if err := fs.Parse(args); err != nil {
		return err
	}
	req := releaseRequest{BuildID: *build, Step: step.String()}
	var err error
	if req.Binary, err = productBinary(*binary); err != nil {
		return err
	}
	for _, s := range strings.Split(*ramp, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		pct, err := strconv.ParseFloat(s, 32)
		if err != nil || pct <= 0 || pct >= 100 {
			return fmt.Errorf("--ramp %q: shares between 0 and 100", *ramp)
		}
		req.Ramp = append(req.Ramp, float32(pct))
	}
	raw, err := json.Marshal(req)
	if err != nil {
		return err
	}
	sock := controlSocket(*dir)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://cluster/release", strings.NewReader(string(raw)))
	if err != nil {
		return err
	}
	resp, err := hc.Do(hreq)
	if err != nil {
		return fmt.Errorf("no cluster runs in %s (start it with make cluster): %w", *dir, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("the cluster refused: %s", strings.TrimSpace(string(msg)))
	}
	last := ""
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		last = sc.Text()
		fmt.Println(last)
	}
	if last != "release done" {
		return errors.New("the release did not finish: see the lines above and the cluster's output")
	}
	return nil
}
