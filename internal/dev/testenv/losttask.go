package testenv

import (
	"context"
	"sync"
	"sync/atomic"

	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// LoseWorkflowTask is a dial option for a worker's Temporal client that loses workflow tasks on
// their way to the worker: the first poll answer carrying a task of each workflow that match
// accepts reaches the worker empty, while the server has recorded the task as started. No worker
// holds the task until its timeout, as when the matching service's record of a task outlasts its
// deadline and commits anyway; the task the server schedules after it goes through. lost counts
// the tasks lost.
func LoseWorkflowTask(match func(workflowID string) bool) (option grpc.DialOption, lost *atomic.Int32) {
	lost = &atomic.Int32{}
	var seen sync.Map // workflow ids whose first task was lost
	option = grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any,
		cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		resp, ok := reply.(*workflowservice.PollWorkflowTaskQueueResponse)
		if !ok || err != nil || len(resp.GetTaskToken()) == 0 {
			return err
		}
		if id := resp.GetWorkflowExecution().GetWorkflowId(); match(id) {
			if _, done := seen.LoadOrStore(id, true); !done {
				proto.Reset(resp) // an empty poll to the worker
				lost.Add(1)
			}
		}
		return err
	})
	return option, lost
}
