package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/dev/cluster"
	"github.com/marketplace/checkout/internal/dev/devprometheus"
	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/internal/metrics"
)

// syncBuffer is the supervisor's output, read while it writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func sh(name, script string) cluster.Process {
	return cluster.Process{Name: name, Path: "/bin/sh", Args: []string{"-c", script}}
}

func alive(pid int) bool { return pid > 0 && syscall.Kill(pid, 0) == nil }

// TestSupervisor_ADeadProcessIsStartedAgain_StopEndsEveryOne: a process killed after start-up runs
// again with a new pid, the restart is reported, and Stop ends every process.
func TestSupervisor_ADeadProcessIsStartedAgain_StopEndsEveryOne(t *testing.T) {
	t.Parallel()
	testenv.SkipIfShort(t, "processes of its own to supervise")
	var out syncBuffer
	s := &cluster.Supervisor{Dir: t.TempDir(), Out: &out}
	defer s.Stop()
	require.NoError(t, s.Start(context.Background(), sh("a", "exec sleep 60"), sh("b", "exec sleep 60")))
	first, other := s.Pid("a"), s.Pid("b")
	require.True(t, alive(first))
	require.NoError(t, syscall.Kill(first, syscall.SIGKILL))

	require.Eventually(t, func() bool { p := s.Pid("a"); return p != first && alive(p) }, 10*time.Second, 50*time.Millisecond)
	assert.Contains(t, out.String(), "a exited (signal: killed); starting it again in 1s")
	assert.Equal(t, other, s.Pid("b"), "the others run on")
	state, err := os.ReadFile(filepath.Join(s.Dir, "processes.json"))
	require.NoError(t, err)
	assert.Contains(t, string(state), `"a"`)

	second := s.Pid("a")
	s.Stop()
	assert.False(t, alive(second))
	assert.False(t, alive(other))
}

// TestSupervisor_AProcessThatExitsWhileStarting_FailsTheStartWithOneLine: the error names the
// process and quotes the last line of its log.
func TestSupervisor_AProcessThatExitsWhileStarting_FailsTheStartWithOneLine(t *testing.T) {
	t.Parallel()
	testenv.SkipIfShort(t, "processes of its own to supervise")
	s := &cluster.Supervisor{Dir: t.TempDir(), Out: &syncBuffer{}}
	defer s.Stop()
	p := sh("temporal-history", "echo starting; echo 'numHistoryShards mismatch'; exit 3")
	p.Ready = func(context.Context) error { return errors.New("not yet") }
	err := s.Start(context.Background(), p)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `temporal-history exited while starting (exit status 3): "numHistoryShards mismatch"`)
	assert.NotContains(t, err.Error(), "\n")
}

// TestSupervisor_NotReadyInTime_FailsTheStart: a process that runs but never serves is given up on
// after ReadyWithin, never waited for without end.
func TestSupervisor_NotReadyInTime_FailsTheStart(t *testing.T) {
	t.Parallel()
	testenv.SkipIfShort(t, "processes of its own to supervise")
	s := &cluster.Supervisor{Dir: t.TempDir(), Out: &syncBuffer{}, ReadyWithin: time.Second}
	defer s.Stop()
	p := sh("temporal-frontend", "exec sleep 60")
	p.Ready = func(context.Context) error { return errors.New("connection refused") }
	began := time.Now()
	err := s.Start(context.Background(), p)
	require.Error(t, err)
	assert.Less(t, time.Since(began), 10*time.Second)
	assert.True(t, strings.HasPrefix(err.Error(), "temporal-frontend is not ready after 1s (connection refused)"), err.Error())
}

// TestSupervisor_AFailingJob_StopsWithItsLastLine.
func TestSupervisor_AFailingJob_StopsWithItsLastLine(t *testing.T) {
	t.Parallel()
	testenv.SkipIfShort(t, "processes of its own to supervise")
	s := &cluster.Supervisor{Dir: t.TempDir(), Out: &syncBuffer{}}
	err := s.Run(context.Background(), sh("migrate", "exit 0"), sh("temporal-schema-1", "echo 'connection refused' >&2; exit 1"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `temporal-schema-1 failed (exit status 1): "connection refused"`)
}

// TestSupervisor_TargetsFiles_PrometheusScrapesAReleasesWorkersAsTheyStartAndStop: Prometheus, as
// the cluster starts it, scrapes the /metrics the supervisor lists; a worker started later (a
// release's) is scraped without a restart of Prometheus, and one removed (a drained build's) is no
// longer scraped, so it never shows as a target that is down.
func TestSupervisor_TargetsFiles_PrometheusScrapesAReleasesWorkersAsTheyStartAndStop(t *testing.T) {
	t.Parallel()
	testenv.SkipIfShort(t, "a Prometheus server and processes of its own")
	serve := func() string {
		srv := httptest.NewServer(metrics.New().Handler())
		t.Cleanup(srv.Close)
		return strings.TrimPrefix(srv.URL, "http://")
	}
	process := func(name, service string) cluster.Process {
		p := sh(name, "exec sleep 120")
		p.Service, p.Metrics = service, serve()
		return p
	}
	dir := t.TempDir()
	s := &cluster.Supervisor{Dir: dir, Out: &syncBuffer{}}
	defer s.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, s.Start(ctx, process("worker-saga-6-1", "worker"), process("api-1", "api"), sh("jaeger", "exec sleep 120")))

	prom, err := devprometheus.Start(ctx, devprometheus.Options{Dir: filepath.Join(dir, "prometheus"), Interval: time.Second,
		TargetFiles: cluster.ScrapeFiles(dir)})
	require.NoError(t, err)
	t.Cleanup(prom.Stop)

	// up is each scraped process's health, by job and by the process the supervisor names.
	up := func() map[string]string {
		resp, err := http.Get(prom.URL + "/api/v1/targets?state=active")
		require.NoError(t, err)
		defer resp.Body.Close()
		var body struct {
			Data struct {
				ActiveTargets []struct {
					Labels map[string]string
					Health string
				}
			}
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		out := map[string]string{}
		for _, target := range body.Data.ActiveTargets {
			out[target.Labels["job"]+"/"+target.Labels["process"]] = target.Health
		}
		return out
	}
	eventually := func(want map[string]string, msg string) {
		t.Helper()
		assert.Eventually(t, func() bool { return assert.ObjectsAreEqual(want, up()) }, time.Minute, 250*time.Millisecond, msg)
		assert.Equal(t, want, up(), msg)
	}
	eventually(map[string]string{"checkout-worker/worker-saga-6-1": "up", "checkout-api/api-1": "up"},
		"the processes the cluster started with")

	require.NoError(t, s.Start(ctx, process("worker-saga-7-1", "worker")))
	eventually(map[string]string{"checkout-worker/worker-saga-6-1": "up", "checkout-worker/worker-saga-7-1": "up",
		"checkout-api/api-1": "up"}, "a release's worker, scraped once it starts")

	s.Remove("worker-saga-6-1")
	eventually(map[string]string{"checkout-worker/worker-saga-7-1": "up", "checkout-api/api-1": "up"},
		"the drained build's worker, no longer scraped")
}

// TestSupervisor_ProcessesRestartedAtOnce_StateNamesEveryNewPid: processes killed together are
// started again together, each writing processes.json; the file ends naming every new pid.
func TestSupervisor_ProcessesRestartedAtOnce_StateNamesEveryNewPid(t *testing.T) {
	t.Parallel()
	testenv.SkipIfShort(t, "processes of its own to supervise")
	dir := t.TempDir()
	sup := &cluster.Supervisor{Dir: dir, Out: io.Discard}
	t.Cleanup(sup.Stop)
	var ps []cluster.Process
	for i := range 8 {
		ps = append(ps, cluster.Process{Name: fmt.Sprintf("sleeper-%d", i), Service: "sleeper", Path: "/bin/sleep", Args: []string{"600"}})
	}
	require.NoError(t, sup.Start(context.Background(), ps...))
	state := func() map[string]int {
		raw, err := os.ReadFile(filepath.Join(dir, "processes.json"))
		require.NoError(t, err)
		var s map[string]struct{ Pid int }
		require.NoError(t, json.Unmarshal(raw, &s))
		out := map[string]int{}
		for k, v := range s {
			out[k] = v.Pid
		}
		return out
	}
	before := state()
	for _, p := range ps {
		require.NoError(t, syscall.Kill(before[p.Name], syscall.SIGKILL))
	}
	require.Eventually(t, func() bool {
		now := state()
		for _, p := range ps {
			if now[p.Name] == before[p.Name] || now[p.Name] != sup.Pid(p.Name) {
				return false
			}
		}
		return true
	}, 20*time.Second, 50*time.Millisecond, "processes.json names every restarted process's new pid")
}
