package e2e_test

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"google.golang.org/grpc"

	"github.com/marketplace/checkout/internal/dev/testenv"
)

// A workflow task that Temporal recorded as started but that no worker received is handed out
// again only once the task's timeout has passed. Under saturation that happens by itself: the
// matching service gives its record of a task matched to a waiting poll 1 s, and a write that
// commits after that leaves the task started with the poll never told (docs/benchmarks.md,
// "Workflow tasks lost at saturation"). The drill loses an order's first task on purpose, between
// the server and the worker, and requires the shopper's answer within seconds of the task's
// timeout (WORKFLOW_TASK_TIMEOUT, 5 s), where the SDK's default would keep the shopper 10 s; the
// order then ends as its payment says, its history showing the task that timed out.
func TestOrder_LostWorkflowTask_AnsweredAfterTheTaskTimeoutNotTenSeconds(t *testing.T) {
	t.Parallel()
	var target atomic.Value // the workflow whose first task is lost
	lose, lost := testenv.LoseWorkflowTask(func(id string) bool { return id == target.Load() })
	s := startStack(t, stackOptions{workerDial: []grpc.DialOption{lose}})
	sh := s.shopper(7401)
	sh.fill(map[int64]int32{71: 1})
	pv := sh.preview()

	key := "k-" + randomHex(8)
	target.Store(sh.workflowOf(key))
	began := time.Now()
	r := sh.order(key, pv, "tok_ok")
	waited := time.Since(began)
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	require.EqualValues(t, 1, lost.Load(), "the order's first workflow task, and only it, never reached the worker")
	assert.GreaterOrEqual(t, waited, s.cfg.WorkflowTaskTimeout, "the answer waited for the lost task's timeout")
	assert.Less(t, waited, 9*time.Second, "a lost task costs the order its timeout, not the SDK's 10 s")

	final := s.waitFinal(sh.token, r.int("orderId"), 30*time.Second)
	assert.Equal(t, "CONFIRMED", final.str("status"), final.raw)
	var timedOut int
	for _, e := range s.history(sh.workflowOf(key)).GetEvents() {
		if e.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT {
			timedOut++
		}
	}
	assert.Equal(t, 1, timedOut, "the lost task timed out once, and the next one went to the worker")
}
