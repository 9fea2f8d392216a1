package e2e_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
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
	var lost atomic.Int32
	lose := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any,
		cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		resp, ok := reply.(*workflowservice.PollWorkflowTaskQueueResponse)
		if id, _ := target.Load().(string); ok && err == nil && id != "" &&
			resp.GetWorkflowExecution().GetWorkflowId() == id && lost.CompareAndSwap(0, 1) {
			proto.Reset(resp) // recorded as started by the server; an empty poll to the worker
		}
		return err
	})
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
	require.Equal(t, int32(1), lost.Load(), "the order's first workflow task never reached the worker")
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
