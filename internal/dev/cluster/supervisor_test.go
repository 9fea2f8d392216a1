package cluster_test

import (
	"bytes"
	"context"
	"errors"
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
	"github.com/marketplace/checkout/internal/dev/testenv"
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
