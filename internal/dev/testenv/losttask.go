package testenv

import (
	"context"
	"sync/atomic"

	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// LoseWorkflowTask is a dial option for a worker's Temporal client that loses one workflow task
// on its way to the worker: the first poll answer carrying a task of a workflow that match
// accepts reaches the worker empty, while the server has recorded the task as started. No worker
// holds the task until its timeout, as when the matching service's record of a task outlasts its
// deadline and commits anyway. lost says whether it has happened.
func LoseWorkflowTask(match func(workflowID string) bool) (option grpc.DialOption, lost *atomic.Bool) {
	lost = &atomic.Bool{}
	option = grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any,
		cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		resp, ok := reply.(*workflowservice.PollWorkflowTaskQueueResponse)
		if ok && err == nil && len(resp.GetTaskToken()) > 0 && match(resp.GetWorkflowExecution().GetWorkflowId()) &&
			lost.CompareAndSwap(false, true) {
			proto.Reset(resp) // an empty poll to the worker
		}
		return err
	})
	return option, lost
}
