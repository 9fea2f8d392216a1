package audit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/marketplace/checkout/workflows"
)

// Visibility is the slice of the Temporal client the audit needs: listing workflows by query.
type Visibility interface {
	ListWorkflow(ctx context.Context, request *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error)
}

var _ Visibility = (client.Client)(nil)

// maxOpenWorkflows bounds the listing, so an audit of a huge backlog still ends.
const maxOpenWorkflows = 100_000

type openWorkflow struct {
	id             string
	start          time.Time
	holdOf         int64 // the order id, for a hold child
	orderStatus    string
	needsAttention bool
}

// listOpen lists the running order and hold workflows of the task queue, with the search
// attributes support staff filter on.
func listOpen(ctx context.Context, v Visibility, taskQueue string) ([]openWorkflow, error) {
	if taskQueue == "" {
		return nil, errors.New("no task queue to look at")
	}
	query := fmt.Sprintf("TaskQueue = '%s' AND ExecutionStatus = 'Running' AND WorkflowType IN ('%s', '%s')",
		strings.ReplaceAll(taskQueue, "'", "''"), workflows.OrderWorkflowName, workflows.HoldWorkflowName)
	var out []openWorkflow
	var token []byte
	for {
		resp, err := v.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query,
			PageSize: 1000, NextPageToken: token})
		if err != nil {
			return nil, err
		}
		for _, e := range resp.GetExecutions() {
			w := openWorkflow{id: e.GetExecution().GetWorkflowId(), start: e.GetStartTime().AsTime()}
			if e.GetType().GetName() == workflows.HoldWorkflowName {
				w.holdOf = holdOrderID(w.id)
				if w.holdOf == 0 {
					continue
				}
			}
			attrs := e.GetSearchAttributes().GetIndexedFields()
			decode(attrs, workflows.AttrOrderStatus.GetName(), &w.orderStatus)
			decode(attrs, workflows.AttrNeedsAttention.GetName(), &w.needsAttention)
			out = append(out, w)
		}
		token = resp.GetNextPageToken()
		if len(token) == 0 || len(out) >= maxOpenWorkflows {
			return out, nil
		}
	}
}

// decode reads a search attribute. Search attributes are never encrypted (the server indexes
// them), so the SDK's default converter reads them, whatever codec the product's payloads have.
func decode(attrs map[string]*commonpb.Payload, name string, into any) {
	if p, ok := attrs[name]; ok {
		_ = converter.GetDefaultDataConverter().FromPayload(p, into)
	}
}
