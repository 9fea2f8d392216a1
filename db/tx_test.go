package db_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/internal/dev/benchkit"
	"github.com/marketplace/checkout/internal/dev/testenv"
)

// countPiped reads the table's rows and their sum outside any transaction.
func countPiped(t *testing.T, pool *pgxpool.Pool) (n, sum int64) {
	t.Helper()
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*), coalesce(sum(n), 0) FROM piped`).Scan(&n, &sum))
	return n, sum
}

// TestInTx_BeginGoesWithTheFirstStatement_CommitWithTheLastWrites: a transaction of a write, a
// read and two writes takes two round trips, BEGIN with the first, COMMIT with the last, and what
// it wrote is committed; the read saw the transaction's own write.
func TestInTx_BeginGoesWithTheFirstStatement_CommitWithTheLastWrites(t *testing.T) {
	t.Parallel()
	pool, count := pipePool(t)
	ctx := context.Background()
	var seen int64
	require.NoError(t, db.InTx(ctx, pool, func(tx db.DBTX) error {
		if _, err := tx.Exec(ctx, putN, 1); err != nil {
			return err
		}
		var sum int64
		if err := tx.QueryRow(ctx, countN).Scan(&seen, &sum); err != nil {
			return err
		}
		for _, n := range []int{2, 3} {
			if _, err := tx.Exec(ctx, putN, n); err != nil {
				return err
			}
		}
		return nil
	}))
	sent, batches := count.reset()
	assert.Equal(t, 2, sent, "round trips")
	assert.Equal(t, [][]string{{"BEGIN", "PutN", "CountN"}, {"PutN", "PutN", "COMMIT"}}, batches)
	assert.EqualValues(t, 1, seen, "the read sees the transaction's own write")
	n, sum := countPiped(t, pool)
	assert.EqualValues(t, 3, n)
	assert.EqualValues(t, 6, sum)
}

// TestInTx_FnFails_NothingCommitted_ConnectionIdle: when fn fails after its writes went out, they
// are rolled back, and the connection goes back to the pool idle (the pool keeps it: the next
// transaction runs on it).
func TestInTx_FnFails_NothingCommitted_ConnectionIdle(t *testing.T) {
	t.Parallel()
	pool, _ := pipePool(t)
	ctx := context.Background()
	refused := errors.New("refused")
	err := db.InTx(ctx, pool, func(tx db.DBTX) error {
		if _, err := tx.Exec(ctx, putN, 1); err != nil {
			return err
		}
		var n, sum int64
		if err := tx.QueryRow(ctx, countN).Scan(&n, &sum); err != nil {
			return err
		}
		return refused
	})
	require.ErrorIs(t, err, refused)
	n, _ := countPiped(t, pool)
	assert.EqualValues(t, 0, n, "rolled back")
	for _, c := range pool.AcquireAllIdle(ctx) {
		assert.Equal(t, byte('I'), c.Conn().PgConn().TxStatus(), "an idle connection, not one left in a transaction")
		c.Release()
	}
	assert.EqualValues(t, 0, pool.Stat().CanceledAcquireCount())
}

// TestInTx_QueuedWriteFails_ErrorAndRollback: a queued write that fails (a duplicate key) fails
// the statement it went with; the transaction is rolled back, the write before it too.
func TestInTx_QueuedWriteFails_ErrorAndRollback(t *testing.T) {
	t.Parallel()
	pool, _ := pipePool(t)
	ctx := context.Background()
	err := db.InTx(ctx, pool, func(tx db.DBTX) error {
		for _, n := range []int{1, 1} {
			if _, err := tx.Exec(ctx, putN, n); err != nil {
				return err
			}
		}
		return nil
	})
	require.Error(t, err, "the duplicate fails with the COMMIT it went with")
	n, _ := countPiped(t, pool)
	assert.EqualValues(t, 0, n)
	require.NoError(t, db.InTx(ctx, pool, func(tx db.DBTX) error {
		_, err := tx.Exec(ctx, putN, 7)
		return err
	}), "the connection is usable again")
	n, _ = countPiped(t, pool)
	assert.EqualValues(t, 1, n)
}

// TestInTx_StatementFailedFnCarriedOn_NotCommitted: a failed statement whose error fn drops aborts
// the transaction; InTx does not report it committed (the COMMIT is answered ROLLBACK, or the
// statements sent with it are refused in the aborted transaction) and nothing of it stays.
func TestInTx_StatementFailedFnCarriedOn_NotCommitted(t *testing.T) {
	t.Parallel()
	pool, _ := pipePool(t)
	ctx := context.Background()
	fails := func(tx db.DBTX) { // a statement that fails, its error dropped
		var n int64
		_ = tx.QueryRow(ctx, "SELECT 1/0").Scan(&n)
	}
	err := db.InTx(ctx, pool, func(tx db.DBTX) error {
		fails(tx)
		_, err := tx.Exec(ctx, putN, 1)
		return err
	})
	require.Error(t, err)
	n, _ := countPiped(t, pool)
	assert.EqualValues(t, 0, n)
	// With nothing queued, the COMMIT goes alone and is answered ROLLBACK.
	err = db.InTx(ctx, pool, func(tx db.DBTX) error {
		fails(tx)
		return nil
	})
	require.ErrorIs(t, err, pgx.ErrTxCommitRollback)
}

// TestInTx_BeginNeverRan_Error: when the batch that carries the BEGIN fails before it runs (a
// statement PostgreSQL cannot prepare) and fn goes on, InTx says the transaction never began
// instead of reporting a commit.
func TestInTx_BeginNeverRan_Error(t *testing.T) {
	t.Parallel()
	pool, _ := pipePool(t)
	ctx := context.Background()
	err := db.InTx(ctx, pool, func(tx db.DBTX) error {
		var n int64
		_ = tx.QueryRow(ctx, "SELECT count(*) FROM no_such_table").Scan(&n)
		return tx.QueryRow(ctx, countN).Scan(&n, &n)
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "BEGIN did not run")
}

// TestInTx_NothingSent_NoRoundTrip: a transaction fn made no statement in is never begun.
func TestInTx_NothingSent_NoRoundTrip(t *testing.T) {
	t.Parallel()
	pool, count := pipePool(t)
	require.NoError(t, db.InTx(context.Background(), pool, func(db.DBTX) error { return nil }))
	sent, _ := count.reset()
	assert.Zero(t, sent)
}

// BenchmarkTransaction is one transaction of a read and two writes whose answer is their error,
// begun and committed by pgx on their own with the writes piped (BeginFunc and InPipe, as the
// order's steps ran before InTx) or with BEGIN and COMMIT in the pipe's batches (InTx): its
// latency, and its client's CPU per transaction (client-cpu-us/op).
func BenchmarkTransaction(b *testing.B) {
	cfg, err := pgxpool.ParseConfig(testenv.DatabaseURL(b))
	require.NoError(b, err)
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(b, err)
	b.Cleanup(pool.Close)
	ctx := context.Background()
	_, err = pool.Exec(ctx, `CREATE TABLE piped (n int PRIMARY KEY)`)
	require.NoError(b, err)
	n := 0
	work := func(tx db.DBTX) error {
		var rows, sum int64
		if err := tx.QueryRow(ctx, countN).Scan(&rows, &sum); err != nil {
			return err
		}
		for range 2 {
			n++
			if _, err := tx.Exec(ctx, putN, n); err != nil {
				return err
			}
		}
		return nil
	}
	for _, c := range []struct {
		name string
		run  func() error
	}{
		{"begin-func+pipe", func() error {
			return db.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return db.InPipe(ctx, tx, work) })
		}},
		{"in-tx", func() error { return db.InTx(ctx, pool, work) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			_, err := pool.Exec(ctx, `TRUNCATE piped`)
			require.NoError(b, err)
			before := benchkit.SelfJiffies()
			for b.Loop() {
				if err := c.run(); err != nil {
					b.Fatal(err)
				}
			}
			cpu := (benchkit.SelfJiffies() - before) / benchkit.UserHZ
			b.ReportMetric(cpu*1e6/float64(b.N), "client-cpu-us/op")
		})
	}
}
