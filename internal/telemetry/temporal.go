package telemetry

import (
	"context"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/trace"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/marketplace/checkout/internal/metrics"
)

// TemporalInterceptor is Temporal's OpenTelemetry interceptor over the process's tracer: set on
// the client, it carries the trace from the API's start or update into the workflow, its
// activities, child workflows and signals, and back out. Nil when tracing is off.
func (t *Tracing) TemporalInterceptor() (interceptor.ClientInterceptor, error) {
	if !t.On() {
		return nil, nil
	}
	return temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{
		Tracer: t.provider.Tracer("go.temporal.io/sdk"), TextMapPropagator: Propagator,
		// Queries are support's reads in the UI; their spans would bury the order's.
		DisableQueryTracing: true,
	})
}

// TemporalMetrics is the Temporal SDK's metrics handler over reg, the process's Prometheus
// registry, so that /metrics carries the SDK's own series (temporal_workflow_task_*,
// temporal_activity_*, temporal_sticky_cache_*, temporal_num_pollers, temporal_request_*, …):
// counters end in _total, latencies are histograms in seconds.
func TemporalMetrics(reg prometheus.Registerer) (client.MetricsHandler, error) {
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(),
		otelprom.WithoutTargetInfo())
	if err != nil {
		return nil, err
	}
	latency := sdkmetric.NewView(sdkmetric.Instrument{Kind: sdkmetric.InstrumentKindHistogram, Unit: "s"},
		sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: TemporalLatencyBuckets}})
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter), sdkmetric.WithView(latency))
	return temporalotel.NewMetricsHandler(temporalotel.MetricsHandlerOptions{
		Meter: provider.Meter("go.temporal.io/sdk"), UseMonotonicCounters: true,
		OnError: func(error) {},
	}), nil
}

// TemporalLatencyBuckets are the SDK's latency histograms' buckets, in seconds: from a local
// activity's millisecond to the minute a starved task queue makes a task wait.
var TemporalLatencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}

// WorkerOptions are what the worker's interceptor needs from the product.
type WorkerOptions struct {
	Metrics *metrics.Metrics
	// OrderIDAttr is the search attribute an order's workflow names its order by.
	OrderIDAttr temporal.SearchAttributeKeyInt64
	// OrderIDPrefixes are workflow id prefixes followed by the order id (hold-<id>).
	OrderIDPrefixes []string
}

// orderHeader carries the order a workflow serves to its activities.
const orderHeader = "checkout-order-id"

// WorkerInterceptor names the order in the workflow's and activities' log lines and spans, times
// each step (activity) with its trace as exemplar, and records the size of each workflow's
// history as it handles a signal and as it ends. Everything it records in a workflow is recorded
// only when the workflow is not replaying.
func WorkerInterceptor(o WorkerOptions) interceptor.WorkerInterceptor {
	return &workerInterceptor{o: o}
}

type workerInterceptor struct {
	interceptor.WorkerInterceptorBase
	o WorkerOptions
}

func (w *workerInterceptor) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	a := &activityInbound{o: w.o}
	a.Next = next
	return a
}

func (w *workerInterceptor) InterceptWorkflow(ctx workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	i := &workflowInbound{o: w.o}
	i.Next = next
	return i
}

type activityInbound struct {
	interceptor.ActivityInboundInterceptorBase
	o WorkerOptions
}

func (a *activityInbound) Init(outbound interceptor.ActivityOutboundInterceptor) error {
	o := &activityOutbound{}
	o.Next = outbound
	return a.Next.Init(o)
}

func (a *activityInbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	info := activity.GetInfo(ctx)
	ctx = WithWorkflow(ctx, info.WorkflowExecution.ID, info.WorkflowExecution.RunID)
	order := orderFromHeader(interceptor.Header(ctx))
	if order == 0 {
		order = orderFromArgs(in.Args)
	}
	if order == 0 {
		order = orderFromID(info.WorkflowExecution.ID, a.o.OrderIDPrefixes)
	}
	span := trace.SpanFromContext(ctx)
	if order != 0 {
		ctx = WithOrder(ctx, order)
		span.SetAttributes(attribute.Int64("order.id", order))
	}
	start := time.Now()
	res, err := a.Next.ExecuteActivity(ctx, in)
	if a.o.Metrics != nil {
		kind, result := "regular", "ok"
		if info.IsLocalActivity {
			kind = "local"
		}
		if err != nil {
			result = "error"
		}
		observe(a.o.Metrics.SagaStepDuration.WithLabelValues(info.ActivityType.Name, kind, result),
			time.Since(start).Seconds(), span.SpanContext())
	}
	return res, err
}

type activityOutbound struct {
	interceptor.ActivityOutboundInterceptorBase
}

func (a *activityOutbound) GetLogger(ctx context.Context) log.Logger {
	l := a.Next.GetLogger(ctx)
	if order := OrderOf(ctx); order != 0 {
		l = log.With(l, KeyOrderID, order)
	}
	return l
}

type workflowInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	o WorkerOptions
}

func (w *workflowInbound) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	o := &workflowOutbound{o: w.o}
	o.Next = outbound
	return w.Next.Init(o)
}

func (w *workflowInbound) ExecuteWorkflow(ctx workflow.Context, in *interceptor.ExecuteWorkflowInput) (any, error) {
	res, err := w.Next.ExecuteWorkflow(ctx, in)
	w.recordHistory(ctx)
	return res, err
}

func (w *workflowInbound) HandleSignal(ctx workflow.Context, in *interceptor.HandleSignalInput) error {
	err := w.Next.HandleSignal(ctx, in)
	w.recordHistory(ctx)
	return err
}

// recordHistory observes the run's history length and size, unless the workflow is replaying
// (what it saw then was recorded when it first happened).
func (w *workflowInbound) recordHistory(ctx workflow.Context) {
	if w.o.Metrics == nil || workflow.IsReplaying(ctx) {
		return
	}
	info := workflow.GetInfo(ctx)
	typ := info.WorkflowType.Name
	w.o.Metrics.WorkflowHistoryEvents.WithLabelValues(typ).Observe(float64(info.GetCurrentHistoryLength()))
	w.o.Metrics.WorkflowHistoryBytes.WithLabelValues(typ).Observe(float64(info.GetCurrentHistorySize()))
}

type workflowOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
	o WorkerOptions
}

// order is the order the workflow serves, as far as it has said: its order search attribute, or
// its id (hold-<id>); 0 before either.
func (w *workflowOutbound) order(ctx workflow.Context) int64 {
	if id, ok := w.Next.GetTypedSearchAttributes(ctx).GetInt64(w.o.OrderIDAttr); ok && id != 0 {
		return id
	}
	return orderFromID(workflow.GetInfo(ctx).WorkflowExecution.ID, w.o.OrderIDPrefixes)
}

func (w *workflowOutbound) GetLogger(ctx workflow.Context) log.Logger {
	run := workflow.GetInfo(ctx).WorkflowExecution
	l := log.With(w.Next.GetLogger(ctx), KeyWorkflowID, run.ID, KeyRunID, run.RunID)
	if order := w.order(ctx); order != 0 {
		l = log.With(l, KeyOrderID, order)
	}
	return l
}

func (w *workflowOutbound) ExecuteActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	w.tell(ctx)
	return w.Next.ExecuteActivity(ctx, activityType, args...)
}

func (w *workflowOutbound) ExecuteLocalActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	w.tell(ctx)
	return w.Next.ExecuteLocalActivity(ctx, activityType, args...)
}

// tell puts the order in the header of the call being made, for the activity's log lines.
func (w *workflowOutbound) tell(ctx workflow.Context) {
	order := w.order(ctx)
	if order == 0 {
		return
	}
	header := interceptor.WorkflowHeader(ctx)
	if header == nil {
		return
	}
	if p, err := converter.GetDefaultDataConverter().ToPayload(order); err == nil {
		header[orderHeader] = p
	}
}

func orderFromHeader(h map[string]*commonpb.Payload) int64 {
	p, ok := h[orderHeader]
	if !ok {
		return 0
	}
	var order int64
	if err := converter.GetDefaultDataConverter().FromPayload(p, &order); err != nil {
		return 0
	}
	return order
}

// orderFromArgs finds an OrderID field (int64) in the activity's first struct argument.
func orderFromArgs(args []any) int64 {
	for _, a := range args {
		v := reflect.ValueOf(a)
		if v.Kind() == reflect.Pointer {
			if v.IsNil() {
				continue
			}
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			continue
		}
		if f := v.FieldByName("OrderID"); f.IsValid() && f.CanInt() {
			return f.Int()
		}
	}
	return 0
}

func orderFromID(workflowID string, prefixes []string) int64 {
	for _, p := range prefixes {
		if rest, ok := strings.CutPrefix(workflowID, p); ok {
			if id, err := strconv.ParseInt(rest, 10, 64); err == nil {
				return id
			}
		}
	}
	return 0
}

// observe records v in o with the trace as exemplar when the trace is kept.
func observe(o prometheus.Observer, v float64, sc trace.SpanContext) {
	if eo, ok := o.(prometheus.ExemplarObserver); ok && sc.IsSampled() {
		eo.ObserveWithExemplar(v, prometheus.Labels{"trace_id": sc.TraceID().String()})
		return
	}
	o.Observe(v)
}

// Observe records v in o with the trace of ctx as exemplar, when that trace is kept.
func Observe(ctx context.Context, o prometheus.Observer, v float64) {
	observe(o, v, trace.SpanContextFromContext(ctx))
}
