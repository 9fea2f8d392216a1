package db

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// InTx runs fn in a transaction on one of pool's connections, through a Pipe (InPipe) that also
// carries the transaction's BEGIN and COMMIT: BEGIN (with ctx's trace context when its span is
// sampled, as Begin sets it) goes in one batch with the transaction's first statement that is
// sent, and COMMIT with the writes still queued when fn returns. A transaction thus takes two
// round trips fewer than Begin, its statements and Commit one by one, and holds its locks one
// round trip less. PostgreSQL runs it as it runs them one by one: a BEGIN in a batch opens the
// transaction block, which the batch's end does not close.
//
// When fn fails, or a statement of the transaction did, it is rolled back and the connection goes
// back to the pool idle; a transaction that fn sent nothing in is never begun. A COMMIT that
// PostgreSQL answers with ROLLBACK (a statement failed and fn carried on) is
// pgx.ErrTxCommitRollback, as pgx's Commit reports it; and should the batch that carried the
// BEGIN have failed before it ran while fn carried on, InTx says so instead of committing.
func InTx(ctx context.Context, pool *pgxpool.Pool, fn func(DBTX) error) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	begin := &pgx.Batch{}
	begin.Queue("BEGIN")
	queueTraceContext(ctx, begin)
	opening := begin.Len()
	p := newPipe(conn, begin)
	if err := fn(p); err != nil {
		rollback(ctx, conn)
		return err
	}
	if !p.sent && p.pending.Len() == opening {
		return nil
	}
	if p.sent && conn.Conn().PgConn().TxStatus() == 'I' {
		// The batch with the BEGIN failed before it ran (a statement PostgreSQL could not
		// prepare) and fn went on: what it sent since ran outside any transaction.
		return errNotBegun
	}
	b := p.pending
	if b == nil {
		b = &pgx.Batch{}
	}
	p.pending = nil
	b.Queue("COMMIT").Exec(func(tag pgconn.CommandTag) error {
		if tag.String() == "ROLLBACK" {
			return pgx.ErrTxCommitRollback
		}
		return nil
	})
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		rollback(ctx, conn)
		return err
	}
	return nil
}

// errNotBegun: fn carried on after the batch that carried its transaction's BEGIN failed.
var errNotBegun = errors.New("db: the transaction's BEGIN did not run, and the statements after it ran on their own")

// rollbackTimeout bounds a ROLLBACK, which runs even when the caller's context has ended.
const rollbackTimeout = 5 * time.Second

// rollback ends the connection's transaction, if one is open or failed. Should the ROLLBACK fail
// or time out, the pool closes the connection instead of reusing it (it is not idle).
func rollback(ctx context.Context, conn *pgxpool.Conn) {
	if conn.Conn().PgConn().TxStatus() == 'I' {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	_, _ = conn.Exec(ctx, "ROLLBACK")
}
