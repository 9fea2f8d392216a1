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
func Traced(pool *pgxpool.Pool) DBTX { return batched{direct: pool, send: traced{pool}.batch} }

type traced struct{ pool *pgxpool.Pool }

// batch sends the settings and the statement, and reads the settings' answer: the batch is left at
// the statement's. It is nil when ctx is not sampled.
func (t traced) batch(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	b := &pgx.Batch{}
	if !queueTraceContext(ctx, b) {
		return nil, nil
	}
	return sendAfter(ctx, t.pool, b, sql, args)
}

// queueTraceContext queues the statement that sets ctx's trace context on b, when its span is
// sampled; it reports whether it did.
func queueTraceContext(ctx context.Context, b *pgx.Batch) bool {
	tp, ts, ok := sampledTraceContext(ctx)
	if !ok {
		return false
	}
	if ts == "" {
		b.Queue("SELECT set_config('"+SettingTraceparent+"', $1, true)", tp)
	} else {
		b.Queue("SELECT set_config('"+SettingTraceparent+"', $1, true), set_config('"+SettingTracestate+"', $2, true)", tp, ts)
	}
	return true
}

// batched runs each statement through send, which sends it in a batch after others and returns
// the batch left at its answer, or nil when it goes on its own, on direct.
type batched struct {
	direct DBTX
	send   func(ctx context.Context, sql string, args []any) (pgx.BatchResults, error)
}

var _ DBTX = batched{}

func (b batched) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	br, err := b.send(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	if br == nil {
		return b.direct.Exec(ctx, sql, args...)
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

func (b batched) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	br, err := b.send(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	if br == nil {
		return b.direct.Query(ctx, sql, args...)
	}
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

func (b batched) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	br, err := b.send(ctx, sql, args)
	if err != nil {
		return errRow{err}
	}
	if br == nil {
		return b.direct.QueryRow(ctx, sql, args...)
	}
	return batchRow{br}
}

// sendAfter queues sql last on b, sends b, and reads the answers of the statements before it:
// the batch is left at sql's answer. The first error closes it.
func sendAfter(ctx context.Context, conn Batcher, b *pgx.Batch, sql string, args []any) (pgx.BatchResults, error) {
	before := b.Len()
	b.Queue(sql, args...)
	br := conn.SendBatch(ctx, b)
	for range before {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return nil, err
		}
	}
	return br, nil
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
	err := r.br.QueryRow().Scan(dest...)
	if cerr := r.br.Close(); err == nil {
		err = cerr
	}
	return err
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
