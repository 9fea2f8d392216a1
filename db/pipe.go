package db

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Batcher is a transaction (or a pool) that takes a batch of statements as well as single ones.
type Batcher interface {
	DBTX
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}

// Pipe sends a transaction's statements together. A write whose answer is only whether it failed
// (a store's statement generated as `:exec`, whose function returns its error alone) does not
// wait for its answer: it is queued, and goes with the transaction's next statement whose answer
// is read, or with what InPipe sends at the end, all of them in one round trip, in the order they
// were made. PostgreSQL runs them as it runs them one by one, in the same transaction; only the
// client no longer waits between them. A queued write's error comes back from the call that sent
// it, and has aborted the transaction, as it would have on its own. Any other statement (a
// query, a write whose rows are counted, a statement of no store) is sent at once.
type Pipe struct {
	tx      Batcher
	pending *pgx.Batch
	// now runs a statement that does not wait: sent with the writes waiting, or on its own.
	now batched
	// sent: a batch of the pipe's has gone out (in InTx, its BEGIN has).
	sent bool
}

var _ DBTX = (*Pipe)(nil)

// InPipe runs fn with a Pipe over tx, a transaction (on a pool, the writes queued and the
// statement they go with would make one implicit transaction), and sends what fn left queued
// before it returns. Within another InPipe (tx is its Pipe) fn queues on that one, which sends at
// its own end; on a tx that takes no batches fn runs on tx itself. When fn fails, what it left
// queued is not sent: the transaction is the caller's to roll back.
func InPipe(ctx context.Context, tx DBTX, fn func(DBTX) error) error {
	if p, ok := tx.(*Pipe); ok {
		return fn(p)
	}
	b, ok := tx.(Batcher)
	if !ok {
		return fn(tx)
	}
	p := newPipe(b, nil)
	if err := fn(p); err != nil {
		return err
	}
	if p.pending == nil {
		return nil
	}
	pending := p.pending
	p.pending = nil
	return b.SendBatch(ctx, pending).Close()
}

// newPipe is a Pipe over tx whose first batch starts with pending's statements (nil: none).
func newPipe(tx Batcher, pending *pgx.Batch) *Pipe {
	p := &Pipe{tx: tx, pending: pending}
	p.now = batched{direct: tx, send: p.send}
	return p
}

// waits reports whether sql is a write whose answer nobody reads: a store's `:exec` statement,
// as sqlc names it on the statement's first line.
func waits(sql string) bool {
	first, _, _ := strings.Cut(sql, "\n")
	first = strings.TrimSpace(first)
	return strings.HasPrefix(first, "-- name: ") && strings.HasSuffix(first, " :exec")
}

// send sends sql after the writes waiting, in one batch, and reads the waiting writes' answers;
// nil when none wait (sql then goes on its own).
func (p *Pipe) send(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	if p.pending == nil {
		return nil, nil
	}
	b := p.pending
	p.pending, p.sent = nil, true
	return sendAfter(ctx, p.tx, b, sql, args)
}

func (p *Pipe) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if !waits(sql) {
		return p.now.Exec(ctx, sql, args...)
	}
	if p.pending == nil {
		p.pending = &pgx.Batch{}
	}
	p.pending.Queue(sql, args...)
	return pgconn.CommandTag{}, nil
}

func (p *Pipe) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return p.now.Query(ctx, sql, args...)
}

func (p *Pipe) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return p.now.QueryRow(ctx, sql, args...)
}
