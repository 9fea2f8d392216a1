package db

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// The trace context of a change reaches the events it writes through two settings local to its
// transaction, which a trigger copies into each outbox row (migrations/00032). They are set only
// when the change's span is sampled, in the same round trip as the transaction's first
// statement: unsampled work pays nothing.
const (
	SettingTraceparent = "checkout.traceparent"
	SettingTracestate  = "checkout.tracestate"
)

// sampledTraceContext is ctx's W3C trace context when its span is sampled.
func sampledTraceContext(ctx context.Context) (traceparent, tracestate string, ok bool) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsSampled() {
		return "", "", false
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"], c["tracestate"], c["traceparent"] != ""
}

// setTraceContextSQL is the statement that sets the settings, with literals (a BEGIN query
// takes no parameters): a traceparent is hex digits and dashes; a tracestate that a literal could
// not hold as it is is left out.
func setTraceContextSQL(traceparent, tracestate string) string {
	q := "SELECT set_config('" + SettingTraceparent + "', '" + traceparent + "', true)"
	if tracestate != "" && !strings.ContainsAny(tracestate, `'\`) {
		q += ", set_config('" + SettingTracestate + "', '" + tracestate + "', true)"
	}
	return q
}

// TxOptions are the options of a read-write transaction begun with ctx: when ctx's span is
// sampled, its BEGIN also sets the trace context (one round trip, the simple protocol's).
func TxOptions(ctx context.Context) pgx.TxOptions {
	tp, ts, ok := sampledTraceContext(ctx)
	if !ok || strings.ContainsAny(tp, `'\`) {
		return pgx.TxOptions{}
	}
	return pgx.TxOptions{BeginQuery: "BEGIN; " + setTraceContextSQL(tp, ts)}
}

// Begin begins a transaction on pool that carries ctx's trace context to the events it writes.
func Begin(ctx context.Context, pool *pgxpool.Pool) (pgx.Tx, error) {
	return pool.BeginTx(ctx, TxOptions(ctx))
}

// BeginFunc is pgx.BeginFunc with Begin's transaction.
func BeginFunc(ctx context.Context, pool *pgxpool.Pool, fn func(pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, pool, TxOptions(ctx), fn)
}

// Traced is pool for single statements outside a transaction that carry ctx's trace context to
// the events they write: with a sampled span, the statement goes in one batch after the settings
// (one round trip and one implicit transaction, to which the settings are local); otherwise it
// goes to the pool as it is.
func Traced(pool *pgxpool.Pool) DBTX { return traced{pool} }

type traced struct{ pool *pgxpool.Pool }

var _ DBTX = traced{}

// batch sends the settings and the statement, or returns nil when ctx is not sampled.
func (t traced) batch(ctx context.Context, sql string, args []any) pgx.BatchResults {
	tp, ts, ok := sampledTraceContext(ctx)
	if !ok {
		return nil
	}
	b := &pgx.Batch{}
	if ts == "" {
		b.Queue("SELECT set_config('"+SettingTraceparent+"', $1, true)", tp)
	} else {
		b.Queue("SELECT set_config('"+SettingTraceparent+"', $1, true), set_config('"+SettingTracestate+"', $2, true)", tp, ts)
	}
	b.Queue(sql, args...)
	br := t.pool.SendBatch(ctx, b)
	return br
}

func (t traced) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	br := t.batch(ctx, sql, args)
	if br == nil {
		return t.pool.Exec(ctx, sql, args...)
	}
	if _, err := br.Exec(); err != nil {
		br.Close()
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

func (t traced) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	br := t.batch(ctx, sql, args)
	if br == nil {
		return t.pool.Query(ctx, sql, args...)
	}
	if _, err := br.Exec(); err != nil {
		br.Close()
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

func (t traced) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	br := t.batch(ctx, sql, args)
	if br == nil {
		return t.pool.QueryRow(ctx, sql, args...)
	}
	return batchRow{br}
}

// batchRows are a batch's rows; closing them closes the batch (and gives its connection back).
type batchRows struct {
	pgx.Rows
	br     pgx.BatchResults
	closed bool
	err    error
}

func (r *batchRows) Close() {
	r.Rows.Close()
	if !r.closed {
		r.closed = true
		r.err = r.br.Close()
	}
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

type batchRow struct{ br pgx.BatchResults }

func (r batchRow) Scan(dest ...any) error {
	if _, err := r.br.Exec(); err != nil {
		r.br.Close()
		return err
	}
	err := r.br.QueryRow().Scan(dest...)
	if cerr := r.br.Close(); err == nil {
		err = cerr
	}
	return err
}
