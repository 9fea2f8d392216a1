// Package worker wires the Temporal worker: it registers the workflows and activities on the task
// queue, prepares the namespace (search attributes) they rely on, and lists the worker's loops.
package worker

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/events"
	"github.com/marketplace/checkout/features"
	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/internal/metrics"
	"github.com/marketplace/checkout/internal/telemetry"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/payment"
	"github.com/marketplace/checkout/workflows"
)

// Deps are what the worker's activities and loops need.
type Deps struct {
	Config    config.Config
	Pool      *pgxpool.Pool
	Inventory *inventory.Engine
	Gateway   payment.Gateway
	Temporal  client.Client
	Metrics   *metrics.Metrics
	Log       *slog.Logger
	// Features are the feature switches, as the process reads them; nil means every one is on.
	Features *features.Switches
	// Broker is the event broker the outbox relay publishes to; the loops need it.
	Broker *events.Broker
	// BuildID and OrderWorkflow override workflows.BuildID and workflows.OrderWorkflow: tests run
	// two builds with different order workflows side by side.
	BuildID       string
	OrderWorkflow func(workflow.Context, workflows.OrderInput) (workflows.OrderState, error)
}

// New returns a worker with every workflow and activity registered; the caller starts it. The
// worker polls as its deployment version (see Version), and every workflow it starts stays pinned
// to that version.
func New(c client.Client, d Deps) sdkworker.Worker {
	if n := d.Config.WorkerTuning.StickyCacheSize; n > 0 {
		// The process's cache, shared by its workers: sized before the first of them starts.
		sdkworker.SetStickyWorkflowCacheSize(n)
	}
	w := sdkworker.New(c, d.Config.TaskQueue, options(d))
	registerWorkflows(w, d.OrderWorkflow)
	w.RegisterActivity(&activities.Inventory{Engine: d.Inventory, Pool: d.Pool, Jobs: jobObserver(d)})
	w.RegisterActivity(&activities.Orders{Pool: d.Pool, MaxOpenPerShopper: d.Config.OrdersMaxOpenPerShopper,
		HoldExtension: activities.HoldExtension{By: d.Config.HoldExtendBy, Window: d.Config.HoldExtendWindow,
			Max: d.Config.HoldExtendMax},
		Saga: activities.SagaOptions{HoldTTL: d.Config.HoldTTL, StepRetryWindow: d.Config.StepRetryWindow,
			Provider: d.Config.PaymentProvider, ParkedEscalateAfter: d.Config.ParkedEscalateAfter,
			ParkedGiveUpAfter: d.Config.ParkedGiveUpAfter}})
	w.RegisterActivity(&activities.Payments{Pool: d.Pool, Gateway: d.Gateway})
	registerJobs(w, c, d)
	return w
}

// options are the worker's options: it polls as its deployment version, pinning what it starts,
// with the telemetry interceptor and the pollers and task slots of the configuration's tuning (each
// 0 left to the SDK's default).
func options(d Deps) sdkworker.Options {
	t := d.Config.WorkerTuning
	return sdkworker.Options{DeploymentOptions: sdkworker.DeploymentOptions{
		UseVersioning: true, Version: Version(d.Config, d.BuildID),
		DefaultVersioningBehavior: workflow.VersioningBehaviorPinned},
		WorkflowTaskPollerBehavior:              workflowPollers(t.WorkflowPollers),
		MaxConcurrentActivityTaskPollers:        t.ActivityPollers,
		MaxConcurrentWorkflowTaskExecutionSize:  t.MaxWorkflowTasks,
		MaxConcurrentActivityExecutionSize:      t.MaxActivities,
		MaxConcurrentLocalActivityExecutionSize: t.MaxLocalActivities,
		// Log lines and spans that name the order, the steps' latency, the histories' size.
		Interceptors: []interceptor.WorkerInterceptor{telemetry.WorkerInterceptor(telemetry.WorkerOptions{
			Metrics: d.Metrics, OrderIDAttr: workflows.AttrOrderID, OrderIDPrefixes: []string{holdPrefix}})}}
}

// workflowPollers is how the worker polls for workflow tasks: up to n polls on the task queue,
// where a new order's first task waits, and up to n on the worker's own sticky queue, where the
// later tasks of the orders it keeps in memory wait; the SDK scales each between leastPolls (or n,
// if less) and n from the server's advice (0: its defaults for the start and the most). With the
// SDK's fixed pollers instead, every poller moves to the sticky queue while the last answer from it
// reported a backlog, and that answer is stale when the backlog has gone meanwhile (answers read
// late under load, sticky tasks moved back to the task queue): new orders then wait with no poll
// open until an empty sticky poll expires, a minute later (docs/benchmarks.md, "Worker tuning").
func workflowPollers(n int) sdkworker.PollerBehavior {
	least := leastPolls
	if n > 0 && n < least {
		least = n
	}
	return sdkworker.NewPollerBehaviorAutoscaling(sdkworker.PollerBehaviorAutoscalingOptions{
		InitialNumberOfPollers: n, MinimumNumberOfPollers: least, MaximumNumberOfPollers: n})
}

// leastPolls is how many polls each workflow queue keeps open however quiet it is. With one, a
// task that arrives while that poll is being answered finds none open, and Temporal's matching
// service writes it to its database and reads it back: about two persistence calls more for every
// order that waits for the shopper or a timer (docs/benchmarks.md, "Why fixed workflow pollers
// stalled, and how the worker polls since"). A second costs an idle long poll.
const leastPolls = 2

// holdPrefix begins the id of every hold workflow, which its order's id ends.
var holdPrefix = strings.TrimSuffix(workflows.HoldWorkflowID(0), "0")

// workflowRegistry is where workflows are registered: a worker, or a replayer that checks a
// history against them.
type workflowRegistry interface {
	RegisterWorkflowWithOptions(w any, options workflow.RegisterOptions)
}

// registerWorkflows registers every workflow of this build under its name: the order saga (order,
// when not nil, in its place), its hold child, the line cancellation and the scheduled jobs.
func registerWorkflows(r workflowRegistry, order func(workflow.Context, workflows.OrderInput) (workflows.OrderState, error)) {
	if order == nil {
		order = workflows.OrderWorkflow
	}
	r.RegisterWorkflowWithOptions(order, workflow.RegisterOptions{Name: workflows.OrderWorkflowName})
	r.RegisterWorkflowWithOptions(workflows.HoldWorkflow, workflow.RegisterOptions{Name: workflows.HoldWorkflowName})
	r.RegisterWorkflowWithOptions(workflows.LineCancelWorkflow, workflow.RegisterOptions{Name: workflows.LineCancelWorkflowName})
	r.RegisterWorkflowWithOptions(workflows.SweeperWorkflow, workflow.RegisterOptions{Name: workflows.SweeperWorkflowName})
	r.RegisterWorkflowWithOptions(workflows.ReconcilerWorkflow, workflow.RegisterOptions{Name: workflows.ReconcilerWorkflowName})
	r.RegisterWorkflowWithOptions(workflows.CartJanitorWorkflow, workflow.RegisterOptions{Name: workflows.CartJanitorWorkflowName})
	r.RegisterWorkflowWithOptions(workflows.PaymentReconcilerWorkflow,
		workflow.RegisterOptions{Name: workflows.PaymentReconcilerWorkflowName})
}

// searchAttributes are the order attributes support staff search by in the UI.
var searchAttributes = map[string]enumspb.IndexedValueType{
	workflows.AttrOrderID.GetName():        enumspb.INDEXED_VALUE_TYPE_INT,
	workflows.AttrCustomerID.GetName():     enumspb.INDEXED_VALUE_TYPE_INT,
	workflows.AttrOrderStatus.GetName():    enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	workflows.AttrPaymentStatus.GetName():  enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	workflows.AttrNeedsAttention.GetName(): enumspb.INDEXED_VALUE_TYPE_BOOL,
	workflows.AttrEscalated.GetName():      enumspb.INDEXED_VALUE_TYPE_BOOL,
}

// SearchAttributeTypes are the order attributes as the Temporal CLI names their types, for a dev
// server that registers them as it starts.
func SearchAttributeTypes() map[string]string {
	names := map[enumspb.IndexedValueType]string{enumspb.INDEXED_VALUE_TYPE_INT: "Int",
		enumspb.INDEXED_VALUE_TYPE_KEYWORD: "Keyword", enumspb.INDEXED_VALUE_TYPE_BOOL: "Bool"}
	out := map[string]string{}
	for name, typ := range searchAttributes {
		out[name] = names[typ]
	}
	return out
}

// EnsureSearchAttributes registers the order search attributes in the namespace; those already
// there are left alone, so every start-up may call it. A call that times out is tried again
// (retryTransient).
func EnsureSearchAttributes(ctx context.Context, c client.Client, namespace string) error {
	return retryTransient(ctx, func() error { return ensureSearchAttributes(ctx, c, namespace) })
}

func ensureSearchAttributes(ctx context.Context, c client.Client, namespace string) error {
	have, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return fmt.Errorf("list search attributes: %w", err)
	}
	missing := map[string]enumspb.IndexedValueType{}
	for name, typ := range searchAttributes {
		if got, ok := have.GetCustomAttributes()[name]; ok {
			if got != typ {
				return fmt.Errorf("search attribute %s exists with type %s, want %s", name, got, typ)
			}
			continue
		}
		missing[name] = typ
	}
	if len(missing) == 0 {
		return nil
	}
	_, err = c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace: namespace, SearchAttributes: missing})
	if err != nil {
		return fmt.Errorf("add search attributes: %w", err)
	}
	return nil
}
