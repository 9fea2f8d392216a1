package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/worker"
)

// A new order's first workflow task goes to the task queue's normal queue; the later tasks of an
// order the worker keeps in its cache go to the worker's own sticky queue. Under load the worker
// reads its polls' answers late and out of order, so the sticky queue's backlog it last read can
// be one that is gone. The drill makes that happen on purpose: with the worker's two workflow
// pollers, many cached workflows are signalled at once (a backlog on the sticky queue) while new
// ones start, and each answer from the sticky queue that reports a backlog reaches the worker 300
// ms late; once the sticky queue is empty, two more start. Every workflow of a round must be done
// within the round's 40 s (a round takes a few seconds), not left on the task queue until a long
// poll of the empty sticky queue expires a minute later.
func TestWorkflowPollers_NewWorkflowsArePolledWhileTheStickyQueueIsIdle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	late := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any,
		cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		poll, ok := req.(*workflowservice.PollWorkflowTaskQueueRequest)
		if ok && poll.GetTaskQueue().GetKind() == enumspb.TASK_QUEUE_KIND_STICKY &&
			reply.(*workflowservice.PollWorkflowTaskQueueResponse).GetBacklogCountHint() > 0 {
			time.Sleep(300 * time.Millisecond)
		}
		return err
	})
	c, err := client.Dial(client.Options{HostPort: testenv.TemporalAddress(t),
		ConnectionOptions: client.ConnectionOptions{DialOptions: []grpc.DialOption{late}}})
	require.NoError(t, err)
	t.Cleanup(c.Close)

	cfg := testenv.Config(t, map[string]string{"WORKER_WORKFLOW_POLLERS": "2"})
	opts := worker.Options(worker.Deps{Config: cfg})
	// A private unversioned task queue: the drill is about the pollers, not the deployment.
	opts.DeploymentOptions = sdkworker.DeploymentOptions{}
	queue := fmt.Sprintf("pollers-%d", time.Now().UnixNano())
	w := sdkworker.New(c, queue, opts)
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context) error {
		workflow.GetSignalChannel(ctx, "go").Receive(ctx, nil)
		return nil
	}, workflow.RegisterOptions{Name: "waiter"})
	w.RegisterWorkflowWithOptions(func(workflow.Context) error { return nil }, workflow.RegisterOptions{Name: "quick"})
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)

	start := func(id, kind string) client.WorkflowRun {
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: queue + "-" + id, TaskQueue: queue}, kind)
		require.NoError(t, err)
		return run
	}
	// A round takes a few seconds; 40 s leaves room for a slow machine, not for a stalled queue.
	for round := range 3 {
		drillRound(t, c, start, round)
	}
}

// drillRound is one round of the drill: waiters, their signals and new workflows at once, then two
// new workflows once the sticky queue is empty.
func drillRound(t *testing.T, c client.Client, start func(id, kind string) client.WorkflowRun, round int) {
	ctx := context.Background()
	rctx, cancel := context.WithTimeout(ctx, 40*time.Second)
	defer cancel()
	// Each waiter's first task done, the worker keeps it: its next task goes to the sticky queue.
	var runs []client.WorkflowRun
	for i := range 20 {
		runs = append(runs, start(fmt.Sprintf("%d-waiter-%d", round, i), "waiter"))
	}
	for _, r := range runs {
		require.Eventually(t, func() bool {
			d, err := c.DescribeWorkflow(ctx, r.GetID(), "")
			return err == nil && d.RawResponse.GetPendingWorkflowTask() == nil &&
				d.RawResponse.GetWorkflowExecutionInfo().GetHistoryLength() >= 4
		}, 20*time.Second, 50*time.Millisecond, "round %d: a new workflow waited for a poll", round)
	}
	var signals errgroup.Group
	for _, r := range runs {
		signals.Go(func() error { return c.SignalWorkflow(ctx, r.GetID(), "", "go", nil) })
	}
	// New workflows meanwhile: a poll that takes one from the normal queue is sent again while
	// the sticky queue has a backlog.
	for i := range 5 {
		time.Sleep(50 * time.Millisecond)
		runs = append(runs, start(fmt.Sprintf("%d-new-%d", round, i), "quick"))
	}
	require.NoError(t, signals.Wait())
	for _, r := range runs {
		require.NoError(t, r.Get(rctx, nil), "round %d: %s waited for a poll", round, r.GetID())
	}
	// The sticky queue is empty, and its last answers have reached the worker.
	time.Sleep(time.Second)
	for i := range 2 {
		id := fmt.Sprintf("%d-after-%d", round, i)
		require.NoError(t, start(id, "quick").Get(rctx, nil), "round %d: %s waited for a poll", round, id)
	}
}
