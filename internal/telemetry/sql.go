package telemetry

import (
	"strings"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
)

// PGXTracer traces every statement of a pgx pool as a span named by its sqlc query name (the
// `-- name:` line sqlc writes above it), else by its first word: the statement's text, its row
// count and duration, never its parameters. Nil when tracing is off.
func (t *Tracing) PGXTracer() pgx.QueryTracer {
	if !t.On() {
		return nil
	}
	return otelpgx.NewTracer(otelpgx.WithTracerProvider(t.provider),
		otelpgx.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelpgx.WithSpanNameFunc(StatementName))
}

// StatementName is a statement's sqlc query name, or its first word.
func StatementName(stmt string) string {
	stmt = strings.TrimSpace(stmt)
	if rest, ok := strings.CutPrefix(stmt, "-- name:"); ok {
		if f := strings.Fields(rest); len(f) > 0 {
			return f[0]
		}
	}
	if f := strings.Fields(stmt); len(f) > 0 {
		return strings.ToUpper(f[0])
	}
	return "SQL"
}
