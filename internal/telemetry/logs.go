package telemetry

import (
	"context"
	"fmt"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// The keys every log line about an order uses.
const (
	KeyOrderID    = "order_id"
	KeyWorkflowID = "workflow_id"
	KeyRunID      = "run_id"
	KeyTraceID    = "trace_id"
	KeySpanID     = "span_id"
)

// temporalKeys are the keys Temporal's logger and its tracing interceptor tag lines with, as the
// product names them.
var temporalKeys = map[string]string{
	"WorkflowID": KeyWorkflowID, "RunID": KeyRunID, "TraceID": KeyTraceID, "SpanID": KeySpanID,
	"WorkflowType": "workflow_type", "ActivityID": "activity_id", "ActivityType": "activity_type",
	"TaskQueue": "task_queue", "Namespace": "namespace", "Attempt": "attempt",
}

// productKeys are the keys a line carries once, whoever adds them.
var productKeys = map[string]bool{KeyOrderID: true, KeyWorkflowID: true, KeyRunID: true, KeyTraceID: true, KeySpanID: true}

type orderKey struct{}

// ids are what a context knows of the order it serves.
type ids struct {
	order             int64
	workflowID, runID string
}

// WithOrder notes in ctx the order it serves: every line logged with ctx names it.
func WithOrder(ctx context.Context, orderID int64) context.Context {
	v := idsOf(ctx)
	v.order = orderID
	return context.WithValue(ctx, orderKey{}, v)
}

// WithWorkflow notes in ctx the workflow run it serves.
func WithWorkflow(ctx context.Context, workflowID, runID string) context.Context {
	v := idsOf(ctx)
	v.workflowID, v.runID = workflowID, runID
	return context.WithValue(ctx, orderKey{}, v)
}

// OrderOf is the order ctx serves (0 when none).
func OrderOf(ctx context.Context) int64 { return idsOf(ctx).order }

func idsOf(ctx context.Context) ids {
	v, _ := ctx.Value(orderKey{}).(ids)
	return v
}

// LogHandler is the product's slog handler around h (JSON): each line logged with a context
// carries the order, workflow and run that context serves and its trace and span ids, and the
// keys Temporal's logger uses are renamed to the product's (WorkflowID → workflow_id, …).
func LogHandler(h slog.Handler) slog.Handler { return &logHandler{next: h} }

type logHandler struct {
	next slog.Handler
	// has are the product's keys already given through WithAttrs.
	has map[string]bool
}

func (h *logHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *logHandler) Handle(ctx context.Context, r slog.Record) error {
	if ctx == nil {
		return h.next.Handle(ctx, r)
	}
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	seen := map[string]bool{}
	r.Attrs(func(a slog.Attr) bool {
		a = rename(a)
		if productKeys[a.Key] && (seen[a.Key] || h.has[a.Key]) {
			return true // named already: once is enough
		}
		seen[a.Key] = true
		out.AddAttrs(a)
		return true
	})
	add := func(key string, v slog.Value) {
		if !seen[key] && !h.has[key] {
			out.AddAttrs(slog.Attr{Key: key, Value: v})
		}
	}
	v := idsOf(ctx)
	if v.order != 0 {
		add(KeyOrderID, slog.Int64Value(v.order))
	}
	if v.workflowID != "" {
		add(KeyWorkflowID, slog.StringValue(v.workflowID))
		add(KeyRunID, slog.StringValue(v.runID))
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		add(KeyTraceID, slog.StringValue(sc.TraceID().String()))
		add(KeySpanID, slog.StringValue(sc.SpanID().String()))
	}
	return h.next.Handle(ctx, out)
}

func (h *logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	has := make(map[string]bool, len(h.has)+len(attrs))
	for k := range h.has {
		has[k] = true
	}
	renamed := make([]slog.Attr, 0, len(attrs))
	for _, a := range attrs {
		a = rename(a)
		if productKeys[a.Key] && has[a.Key] {
			continue // Temporal's tag and the interceptor's name the same id: once is enough
		}
		renamed = append(renamed, a)
		has[a.Key] = true
	}
	return &logHandler{next: h.next.WithAttrs(renamed), has: has}
}

func (h *logHandler) WithGroup(name string) slog.Handler {
	return &logHandler{next: h.next.WithGroup(name), has: h.has}
}

// rename gives a Temporal key the product's name, and ids their text.
func rename(a slog.Attr) slog.Attr {
	key, ok := temporalKeys[a.Key]
	if !ok {
		return a
	}
	a.Key = key
	switch v := a.Value.Any().(type) {
	case trace.TraceID:
		a.Value = slog.StringValue(v.String())
	case trace.SpanID:
		a.Value = slog.StringValue(v.String())
	case fmt.Stringer:
		a.Value = slog.StringValue(v.String())
	}
	return a
}
