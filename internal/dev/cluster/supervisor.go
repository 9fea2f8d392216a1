package cluster

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is one program of the cluster.
type Process struct {
	// Name is unique in the cluster (api-1, temporal-history); it names the log file.
	Name string
	// Service is the docker-compose.yml service this process is a replica or a step of.
	Service string
	Path    string
	Args    []string
	// Env is added to the supervisor's own environment (and wins over it).
	Env []string
	// Job runs to completion before what follows starts; a failure stops the start-up.
	Job bool
	// Listens are the addresses it listens on, all checked free before the cluster starts.
	Listens []string
	// Metrics is the address of its /metrics, one of Listens ("" when it serves none of the
	// product's): the supervisor lists it for Prometheus (TargetsFile) while it runs.
	Metrics string
	// Ready answers nil once the process serves; nil means started is enough.
	Ready func(context.Context) error
}

// Supervisor runs the cluster's processes: in groups, each group ready before the next starts;
// a process that dies afterwards is started again after a pause that doubles each time (1 s to
// 30 s); Stop ends the groups in reverse order.
type Supervisor struct {
	// Dir holds logs/<name>.log and processes.json (each running process's pid).
	Dir string
	// Out receives one line per event (a process that died, its restart).
	Out io.Writer
	// ReadyWithin bounds how long a process may take to become ready (default 2 minutes).
	ReadyWithin time.Duration

	mu       sync.Mutex
	groups   [][]*proc
	stopping bool
	quit     chan struct{} // closed by Stop
	// stateMu makes processes.json's writes one at a time: processes restarted at once (the
	// broker's nodes) each write it, through one temporary file.
	stateMu sync.Mutex

	targets sync.Mutex      // one writer of the TargetsFiles at a time, each from the latest state
	scraped map[string]bool // services with a TargetsFile, written again when they have none left
}

type proc struct {
	Process
	sup  *Supervisor
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when the watcher has seen the last run end
	// exited receives the first run's end; settled is closed once the start is decided, ready
	// saying how. A process that fails to start is not started again: the start-up fails.
	exited  chan error
	settled chan struct{}
	ready   bool
	// removed: Remove stopped it for good; its watcher does not start it again.
	removed bool
}

// CheckFree reports the first address of ps that something already listens on.
func CheckFree(ps []Process) error {
	for _, p := range ps {
		for _, addr := range p.Listens {
			l, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("%s (%s) is in use: stop what listens there, or move the cluster's ports with --ports-from", addr, p.Name)
			}
			l.Close()
		}
	}
	return nil
}

// LogPath is where a process's output goes.
func (s *Supervisor) LogPath(name string) string { return filepath.Join(s.Dir, "logs", name+".log") }

// Run runs jobs one after the other, each to completion.
func (s *Supervisor) Run(ctx context.Context, jobs ...Process) error {
	for _, j := range jobs {
		log, err := s.openLog(j.Name)
		if err != nil {
			return err
		}
		cmd := s.command(j, log)
		err = cmd.Start()
		log.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", j.Name, err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err = <-done:
		case <-ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGTERM)
			<-done
			return ctx.Err()
		}
		if err != nil {
			return fmt.Errorf("%s failed (%v): %s", j.Name, err, s.lastLine(j.Name))
		}
	}
	return nil
}

// Start starts ps at once and waits until every one is ready. A process that exits or is not
// ready in time fails the start with one line naming it; the caller then calls Stop.
func (s *Supervisor) Start(ctx context.Context, ps ...Process) error {
	group := make([]*proc, len(ps))
	for i, p := range ps {
		group[i] = &proc{Process: p, sup: s, done: make(chan struct{}), exited: make(chan error, 1),
			settled: make(chan struct{})}
	}
	s.mu.Lock()
	s.groups = append(s.groups, group)
	quit := s.quitCh()
	s.mu.Unlock()
	var first error
	var started []*proc
	for _, p := range group {
		if err := p.start(); err != nil {
			first = cmp.Or(first, fmt.Errorf("%s: %w", p.Name, err))
			continue
		}
		started = append(started, p)
		go p.watch(quit)
	}
	s.writeState()
	errs := make(chan error, len(started))
	for _, p := range started {
		go func() { errs <- p.waitReady(ctx) }()
	}
	for range started {
		first = cmp.Or(first, <-errs)
	}
	return first
}

// Stop ends every process, the last group first: SIGTERM, then SIGKILL after 20 s.
func (s *Supervisor) Stop() {
	s.mu.Lock()
	if !s.stopping {
		close(s.quitCh())
	}
	s.stopping = true
	groups := slices.Clone(s.groups)
	s.mu.Unlock()
	for _, g := range slices.Backward(groups) {
		var wg sync.WaitGroup
		for _, p := range g {
			wg.Go(p.stop)
		}
		wg.Wait()
	}
	_ = os.Remove(filepath.Join(s.Dir, "processes.json"))
}

// Pid is the process id of the named process's latest run (0 when it never started).
func (s *Supervisor) Pid(name string) int {
	if p := s.find(name); p != nil {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.cmd != nil && p.cmd.Process != nil {
			return p.cmd.Process.Pid
		}
	}
	return 0
}

func (s *Supervisor) find(name string) *proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range s.groups {
		for _, p := range g {
			if p.Name == name {
				return p
			}
		}
	}
	return nil
}

// quitCh is closed when the supervisor stops; s.mu is held.
func (s *Supervisor) quitCh() chan struct{} {
	if s.quit == nil {
		s.quit = make(chan struct{})
	}
	return s.quit
}

func (s *Supervisor) isStopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

func (s *Supervisor) openLog(name string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Join(s.Dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	return os.OpenFile(s.LogPath(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
}

func (s *Supervisor) command(p Process, log *os.File) *exec.Cmd {
	cmd := exec.Command(p.Path, p.Args...)
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.Stdout, cmd.Stderr = log, log
	// A group of its own, so that Ctrl-C reaches the supervisor alone, which stops everything in
	// order; and the process ends with the supervisor however that ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	return cmd
}

// lastLine is the last line of a process's log, shortened: what it said before it failed.
func (s *Supervisor) lastLine(name string) string {
	f, err := os.Open(s.LogPath(name))
	if err != nil {
		return "no log"
	}
	defer f.Close()
	last := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" {
			last = line
		}
	}
	// A long line (a server's wrapped error) says why at its end.
	if len(last) > 400 {
		last = "…" + strings.ToValidUTF8(last[len(last)-400:], "")
	}
	return fmt.Sprintf("%q (%s)", last, s.LogPath(name))
}

// TargetsFile is where a supervisor on dir lists the /metrics of a service's running processes
// (api, worker), in Prometheus's file_sd format: a Prometheus that reads it scrapes the workers a
// release starts, and stops scraping those it stops, without being restarted.
func TargetsFile(dir, service string) string {
	return filepath.Join(dir, "targets", service+".json")
}

// writeState records each running process's pid in processes.json, for operators and tests, and
// each service's /metrics in its TargetsFile.
func (s *Supervisor) writeState() {
	defer s.writeTargets()
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	type entry struct {
		Pid     int      `json:"pid"`
		Service string   `json:"service"`
		Listens []string `json:"listens,omitempty"`
		Log     string   `json:"log"`
	}
	state := map[string]entry{}
	s.mu.Lock()
	groups := slices.Clone(s.groups)
	s.mu.Unlock()
	for _, g := range groups {
		for _, p := range g {
			state[p.Name] = entry{Pid: s.Pid(p.Name), Service: p.Service, Listens: p.Listens, Log: s.LogPath(p.Name)}
		}
	}
	raw, err := json.MarshalIndent(state, "", "  ")
	if err != nil {
		return
	}
	tmp := filepath.Join(s.Dir, ".processes.json")
	if os.WriteFile(tmp, raw, 0o644) == nil {
		_ = os.Rename(tmp, filepath.Join(s.Dir, "processes.json"))
	}
}

// writeTargets writes the TargetsFile of every service whose processes serve /metrics: one group
// per process, labelled with its name.
func (s *Supervisor) writeTargets() {
	type group struct {
		Targets []string          `json:"targets"`
		Labels  map[string]string `json:"labels"`
	}
	s.targets.Lock()
	defer s.targets.Unlock()
	byService := map[string][]group{}
	s.mu.Lock()
	if s.scraped == nil {
		s.scraped = map[string]bool{}
	}
	for _, g := range s.groups {
		for _, p := range g {
			if p.Metrics != "" {
				s.scraped[p.Service] = true
				byService[p.Service] = append(byService[p.Service],
					group{Targets: []string{p.Metrics}, Labels: map[string]string{"process": p.Name}})
			}
		}
	}
	services := slices.Sorted(maps.Keys(s.scraped))
	s.mu.Unlock()
	if len(services) == 0 {
		return
	}
	if os.MkdirAll(filepath.Dir(TargetsFile(s.Dir, "")), 0o755) != nil {
		return
	}
	for _, service := range services {
		groups := byService[service]
		if groups == nil {
			groups = []group{} // none left: an empty list, never a stale one
		}
		slices.SortFunc(groups, func(a, b group) int { return cmp.Compare(a.Labels["process"], b.Labels["process"]) })
		raw, err := json.MarshalIndent(groups, "", "  ")
		if err != nil {
			continue
		}
		// Renamed into place: Prometheus never reads half a file.
		path := TargetsFile(s.Dir, service)
		tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path))
		if os.WriteFile(tmp, raw, 0o644) == nil {
			_ = os.Rename(tmp, path)
		}
	}
}

// errStopping: the supervisor is stopping, so the process is not started again.
var errStopping = errors.New("stopping")

func (p *proc) start() error {
	log, err := p.sup.openLog(p.Name)
	if err != nil {
		return err
	}
	defer log.Close() // the child has its own copy
	// Under the lock that stop takes: a process is either started before stop looks, and then
	// stopped by it, or not started at all.
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sup.isStopping() || p.removed {
		return errStopping
	}
	cmd := p.sup.command(p.Process, log)
	if err := cmd.Start(); err != nil {
		return err
	}
	p.cmd = cmd
	return nil
}

// watch waits for each run to end and starts the process again, until the supervisor stops.
func (p *proc) watch(quit <-chan struct{}) {
	defer close(p.done)
	pause := time.Second
	starting := true
	for {
		p.mu.Lock()
		cmd := p.cmd
		p.mu.Unlock()
		began := time.Now()
		err := cmd.Wait()
		if err == nil {
			err = errors.New("exit status 0")
		}
		if starting {
			p.exited <- err
			<-p.settled
			if !p.ready {
				return
			}
			starting = false
		}
		p.mu.Lock()
		removed := p.removed
		p.mu.Unlock()
		if p.sup.isStopping() || removed {
			return
		}
		if time.Since(began) > time.Minute {
			pause = time.Second
		}
		fmt.Fprintf(p.sup.Out, "%s exited (%v); starting it again in %s (log: %s)\n", p.Name, err, pause, p.sup.LogPath(p.Name))
		select {
		case <-time.After(pause):
		case <-quit:
			return
		}
		pause = min(2*pause, 30*time.Second)
		if err := p.start(); err != nil {
			if !errors.Is(err, errStopping) {
				fmt.Fprintf(p.sup.Out, "%s: %v\n", p.Name, err)
			}
			return
		}
		p.sup.writeState()
	}
}

// waitReady polls the process's probe until it answers, the process exits, or time runs out.
func (p *proc) waitReady(ctx context.Context) (err error) {
	defer func() {
		p.ready = err == nil
		close(p.settled)
	}()
	within := p.sup.ReadyWithin
	if within == 0 {
		within = 2 * time.Minute
	}
	deadline := time.Now().Add(within)
	var last error
	for {
		select {
		case err := <-p.exited:
			p.exited <- err
			return fmt.Errorf("%s exited while starting (%v): %s", p.Name, err, p.sup.lastLine(p.Name))
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if p.Ready == nil {
			return nil
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		last = p.Ready(pctx)
		cancel()
		if last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s is not ready after %s (%v); its log: %s", p.Name, within, last, p.sup.LogPath(p.Name))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (p *proc) stop() {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// Remove stops the named processes (SIGTERM, then SIGKILL after 20 s) and forgets them: they are
// not started again. Names not running are ignored.
func (s *Supervisor) Remove(names ...string) {
	var gone []*proc
	s.mu.Lock()
	for gi, g := range s.groups {
		kept := g[:0:0]
		for _, p := range g {
			if slices.Contains(names, p.Name) {
				gone = append(gone, p)
				continue
			}
			kept = append(kept, p)
		}
		s.groups[gi] = kept
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range gone {
		wg.Go(func() {
			p.mu.Lock()
			p.removed = true
			p.mu.Unlock()
			p.stop()
		})
	}
	wg.Wait()
	s.writeState()
}

// SetEnv changes the environment the named process is started with from its next start on (a
// restart after it dies, or Restart).
func (s *Supervisor) SetEnv(name string, env []string) bool {
	p := s.find(name)
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.Env = slices.Clone(env)
	return true
}

// Running lists the processes the supervisor runs (jobs excluded), in start order.
func (s *Supervisor) Running() []Process {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Process
	for _, g := range s.groups {
		for _, p := range g {
			p.mu.Lock()
			out = append(out, p.Process)
			p.mu.Unlock()
		}
	}
	return out
}

// Restart stops the named process and starts it again at once (with the environment SetEnv last
// gave it), waiting until it is ready.
func (s *Supervisor) Restart(ctx context.Context, name string) error {
	p := s.find(name)
	if p == nil {
		return fmt.Errorf("%s is not running", name)
	}
	p.mu.Lock()
	proc := p.Process
	p.mu.Unlock()
	s.Remove(name)
	return s.Start(ctx, proc)
}
