package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	sdklog "go.temporal.io/sdk/log"
)

func logLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		out = append(out, m)
	}
	return out
}

func TestLogHandler_NamesTheOrderTheWorkflowAndTheTrace(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(LogHandler(slog.NewJSONHandler(&buf, nil)))
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0xab}, SpanID: trace.SpanID{0xcd},
		TraceFlags: trace.FlagsSampled})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	ctx = WithWorkflow(WithOrder(ctx, 98213), "order-u7-k1", "run-1")

	log.InfoContext(ctx, "http request", "route", "/api/v1/orders/:orderId")
	log.InfoContext(ctx, "given twice", "order_id", int64(5))
	log.Info("no context")
	lines := logLines(t, &buf)
	require.Len(t, lines, 3)
	assert.Equal(t, map[string]any{"time": lines[0]["time"], "level": "INFO", "msg": "http request",
		"route": "/api/v1/orders/:orderId", "order_id": float64(98213), "workflow_id": "order-u7-k1", "run_id": "run-1",
		"trace_id": sc.TraceID().String(), "span_id": sc.SpanID().String()}, lines[0])
	assert.Equal(t, float64(5), lines[1]["order_id"], "a key the line gives itself is kept, not repeated")
	assert.NotContains(t, lines[2], "trace_id")
}

func TestLogHandler_RenamesTemporalKeys(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	logger := sdklog.NewStructuredLogger(slog.New(LogHandler(slog.NewJSONHandler(&buf, nil))))
	sdklog.With(logger, "WorkflowID", "order-u7-k1", "RunID", "run-1", "TraceID", trace.TraceID{0xab}).
		Warn("order needs attention", "order_id", 98213)
	sdklog.With(logger, "WorkflowID", "order-u7-k1", "order_id", 98213).Warn("named twice", "order_id", 98213)
	raw := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, raw, 2)
	assert.Equal(t, 1, strings.Count(raw[1], `"order_id"`), "a line names its order once: %s", raw[1])
	line := logLines(t, &buf)[0]
	assert.Equal(t, "order-u7-k1", line["workflow_id"])
	assert.Equal(t, "run-1", line["run_id"])
	assert.Equal(t, trace.TraceID{0xab}.String(), line["trace_id"])
	assert.NotContains(t, line, "WorkflowID")
}
