package main

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Two processes' /metrics, read twice a second apart: each series is their sum over the second,
// the client's requests go by operation (the long ones too, but for the task queues' polls), and
// a process that answers with an error is skipped.
func TestSDKBetween_SumsTheProcessesSeriesBySeries(t *testing.T) {
	page := func(tasks, waited, polls, updates, calls float64) string {
		return "# HELP temporal_workflow_task_schedule_to_start_latency_seconds x\n" +
			`temporal_workflow_task_schedule_to_start_latency_seconds_bucket{task_queue="orders",le="1"} 1` + "\n" +
			`temporal_workflow_task_schedule_to_start_latency_seconds_sum{task_queue="orders"} ` + f(waited) + "\n" +
			`temporal_workflow_task_schedule_to_start_latency_seconds_count{task_queue="orders"} ` + f(tasks) + "\n" +
			`temporal_long_request_latency_seconds_sum{operation="PollWorkflowTaskQueue"} ` + f(60*polls) + "\n" +
			`temporal_long_request_latency_seconds_count{operation="PollWorkflowTaskQueue"} ` + f(polls) + "\n" +
			`temporal_long_request_latency_seconds_sum{operation="ExecuteMultiOperation"} ` + f(2*updates) + "\n" +
			`temporal_long_request_latency_seconds_count{operation="ExecuteMultiOperation"} ` + f(updates) + "\n" +
			`temporal_request_latency_seconds_sum{operation="RespondWorkflowTaskCompleted"} ` + f(calls/100) + "\n" +
			`temporal_request_latency_seconds_count{operation="RespondWorkflowTaskCompleted"} ` + f(calls) + "\n" +
			`go_gc_duration_seconds_sum 3` + "\n"
	}
	var second atomic.Bool
	serve := func(first, then string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if second.Load() {
				_, _ = w.Write([]byte(then))
				return
			}
			_, _ = w.Write([]byte(first))
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	gone := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(gone.Close)
	urls := []string{serve(page(10, 1, 5, 5, 100), page(30, 9, 50, 50, 300)), serve(page(0, 0, 0, 0, 0), page(20, 2, 7, 0, 100)), gone.URL}

	a := scrapeLatencies(context.Background(), urls, "_latency_seconds", sdkSeries)
	second.Store(true)
	b := scrapeLatencies(context.Background(), urls, "_latency_seconds", sdkSeries)
	b.at = a.at.Add(time.Second)

	got := latenciesBetween(a, b)
	require.Len(t, got, 3)
	assert.Equal(t, "long_request ExecuteMultiOperation", got[0].Series)
	assert.InDelta(t, 45, got[0].PerSecond, 1e-9) // (50-5), the other process none
	assert.InDelta(t, 90, got[0].InFlight, 1e-9)  // each 2 s
	got = got[1:]
	assert.Equal(t, "workflow_task_schedule_to_start", got[0].Series)
	assert.InDelta(t, 40, got[0].PerSecond, 1e-9) // (30-10) + 20
	assert.InDelta(t, 250, got[0].MeanMs, 1e-9)   // (8 + 2) s over 40
	assert.InDelta(t, 10, got[0].InFlight, 1e-9)
	assert.Equal(t, "request RespondWorkflowTaskCompleted", got[1].Series)
	assert.InDelta(t, 300, got[1].PerSecond, 1e-9)
	assert.InDelta(t, 10, got[1].MeanMs, 1e-9)
}

func f(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

// The server's task timings go by service, metric, operation and task type; its other
// histograms are not kept.
func TestServerSeries(t *testing.T) {
	got, ok := serverSeries("task_latency_queue", map[string]string{"service_name": "history",
		"operation": "TransferActiveTaskWorkflowTask", "task_type": "none", "namespace": "default"})
	assert.True(t, ok)
	assert.Equal(t, "history task_latency_queue TransferActiveTaskWorkflowTask", got)
	got, ok = serverSeries("task_dispatch_latency", map[string]string{"service_name": "matching", "task_type": "Workflow"})
	assert.True(t, ok)
	assert.Equal(t, "matching task_dispatch_latency Workflow", got)
	_, ok = serverSeries("persistence_latency", map[string]string{"service_name": "history"})
	assert.False(t, ok)
}

// One read of a Temporal service's /metrics gives both its persistence calls and its task
// timings.
func TestScrapeTemporal_PersistenceAndTasksInOnePass(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`persistence_latency_sum{service_name="history",operation="UpdateWorkflowExecution"} 2` + "\n" +
			`persistence_latency_count{service_name="history",operation="UpdateWorkflowExecution"} 40` + "\n" +
			`persistence_latency_bucket{service_name="history",operation="UpdateWorkflowExecution",le="+Inf"} 40` + "\n" +
			`task_dispatch_latency_sum{service_name="matching",operation="TaskQueueMgr",task_type="Workflow"} 9` + "\n" +
			`task_dispatch_latency_count{service_name="matching",operation="TaskQueueMgr",task_type="Workflow"} 3` + "\n"))
	}))
	t.Cleanup(srv.Close)

	p, tasks, err := scrapeTemporal(context.Background(), []string{srv.URL})
	require.NoError(t, err)
	assert.Equal(t, map[string]float64{"history UpdateWorkflowExecution": 40}, p.count)
	assert.Equal(t, map[float64]float64{math.Inf(1): 40}, p.buckets)
	assert.Equal(t, map[string]float64{"matching task_dispatch_latency TaskQueueMgr Workflow": 3}, tasks.count)
	assert.Equal(t, map[string]float64{"matching task_dispatch_latency TaskQueueMgr Workflow": 9}, tasks.sum)
}

func TestScrapeTemporal_CountsTheWorkflowTasksTimedOutAfterStarting(t *testing.T) {
	var lost atomic.Int64
	lost.Store(3)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprintf(w, "start_to_close_timeout{service_name=\"history\",operation=\"TimerActiveTaskWorkflowTaskTimeout\",namespace=\"default\"} %d\n"+
			"start_to_close_timeout{service_name=\"history\",operation=\"TimerActiveTaskActivityTimeout\",namespace=\"default\"} 7\n"+
			"schedule_to_start_timeout{service_name=\"history\",operation=\"TimerActiveTaskWorkflowTaskTimeout\",namespace=\"default\"} 5\n", lost.Load())
	}))
	t.Cleanup(srv.Close)

	a, _, err := scrapeTemporal(context.Background(), []string{srv.URL})
	require.NoError(t, err)
	lost.Store(11)
	b, _, err := scrapeTemporal(context.Background(), []string{srv.URL})
	require.NoError(t, err)
	assert.Equal(t, 3.0, a.lostTasks, "workflow tasks only: not activities, not sticky tasks nobody took")
	assert.Equal(t, 8.0, persistenceBetween(a, b).WorkflowTasksTimedOut)
}
