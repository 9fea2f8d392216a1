package db_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/internal/dev/testenv"
)

// roundTrips counts what a pool sends and waits for: each statement on its own (BEGIN and COMMIT
// included) and each batch, with the statements of each batch.
type roundTrips struct {
	mu      sync.Mutex
	sent    int
	batches [][]string
}

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	r.sent++
	r.mu.Unlock()
	return ctx
}
func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.mu.Lock()
	r.sent++
	r.batches = append(r.batches, nil)
	r.mu.Unlock()
	return ctx
}
func (r *roundTrips) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	name, _, _ := strings.Cut(strings.TrimPrefix(d.SQL, "-- name: "), " ")
	r.mu.Lock()
	r.batches[len(r.batches)-1] = append(r.batches[len(r.batches)-1], name)
	r.mu.Unlock()
}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (r *roundTrips) reset() (sent int, batches [][]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sent, batches = r.sent, r.batches
	r.sent, r.batches = 0, nil
	return sent, batches
}

// pipePool is a pool on a fresh database with a table to write, each round trip counted.
func pipePool(t *testing.T) (*pgxpool.Pool, *roundTrips) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testenv.DatabaseURL(t))
	require.NoError(t, err)
	count := &roundTrips{}
	cfg.ConnConfig.Tracer = count
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(context.Background(), `CREATE TABLE piped (n int PRIMARY KEY)`)
	require.NoError(t, err)
	count.reset()
	return pool, count
}

// Statements as a store generates them, named on their first line.
const (
	putN   = "-- name: PutN :exec\nINSERT INTO piped (n) VALUES ($1)"
	bumpN  = "-- name: BumpN :execrows\nUPDATE piped SET n = n + 100 WHERE n < $1"
	countN = "-- name: CountN :one\nSELECT count(*), coalesce(sum(n), 0) FROM piped"
)

// TestPipe_WritesGoWithTheNextRead_InOrder: writes whose answer is their error wait, and go in
// one round trip with the next statement whose answer is read, which sees them; a write whose
// rows are counted goes at once with its count; what is left goes when InPipe ends, before the
// commit, and a nested InPipe leaves it to the outer one.
func TestPipe_WritesGoWithTheNextRead_InOrder(t *testing.T) {
	t.Parallel()
	pool, count := pipePool(t)
	ctx := context.Background()

	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		count.reset() // BEGIN
		return db.InPipe(ctx, tx, func(p db.DBTX) error {
			for n := 1; n <= 3; n++ {
				_, err := p.Exec(ctx, putN, n)
				require.NoError(t, err)
			}
			sent, _ := count.reset()
			assert.Zero(t, sent, "the writes wait")

			var rows, sum int64
			require.NoError(t, p.QueryRow(ctx, countN).Scan(&rows, &sum))
			assert.Equal(t, []int64{3, 6}, []int64{rows, sum}, "the read sees the writes before it")
			sent, batches := count.reset()
			assert.Equal(t, 1, sent, "one round trip")
			assert.Equal(t, [][]string{{"PutN", "PutN", "PutN", "CountN"}}, batches)

			tag, err := p.Exec(ctx, bumpN, 3)
			require.NoError(t, err)
			assert.Equal(t, int64(2), tag.RowsAffected(), "a counted write goes at once")

			return db.InPipe(ctx, p, func(inner db.DBTX) error {
				_, err := inner.Exec(ctx, putN, 7)
				require.NoError(t, err)
				_, err = inner.Exec(ctx, putN, 8)
				return err
			})
		})
	})
	require.NoError(t, err)
	sent, batches := count.reset()
	assert.Equal(t, [][]string{{"PutN", "PutN"}}, batches, "the nested pipe's writes went when the outer one ended")
	assert.Equal(t, 3, sent, "the bump, the last writes, COMMIT")

	var rows, sum int64
	require.NoError(t, pool.QueryRow(ctx, countN).Scan(&rows, &sum))
	assert.Equal(t, []int64{5, 3 + 101 + 102 + 7 + 8}, []int64{rows, sum}, "everything committed")
}

// TestPipe_FailedWrite_FailsTheCallThatSentIt: a waiting write that fails comes back as the error
// of the call that sent it (a read, or the end of InPipe) and aborts the transaction; a failing
// fn sends nothing it left waiting.
func TestPipe_FailedWrite_FailsTheCallThatSentIt(t *testing.T) {
	t.Parallel()
	pool, count := pipePool(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, putN, 1)
	require.NoError(t, err)

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return db.InPipe(ctx, tx, func(p db.DBTX) error {
			_, err := p.Exec(ctx, putN, 1) // a duplicate: fails when sent
			require.NoError(t, err, "not sent yet")
			var rows, sum int64
			err = p.QueryRow(ctx, countN).Scan(&rows, &sum)
			assert.ErrorContains(t, err, "duplicate key", "the read that sent it fails")
			return err
		})
	})
	require.Error(t, err)

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return db.InPipe(ctx, tx, func(p db.DBTX) error {
			_, err := p.Exec(ctx, putN, 2)
			require.NoError(t, err)
			_, err = p.Exec(ctx, putN, 1)
			return err
		})
	})
	assert.ErrorContains(t, err, "duplicate key", "sent as InPipe ends")

	count.reset()
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return db.InPipe(ctx, tx, func(p db.DBTX) error {
			_, err := p.Exec(ctx, putN, 3)
			require.NoError(t, err)
			return assert.AnError
		})
	})
	require.ErrorIs(t, err, assert.AnError)
	_, batches := count.reset()
	assert.Empty(t, batches, "a failed fn's writes are not sent")

	var rows, sum int64
	require.NoError(t, pool.QueryRow(ctx, countN).Scan(&rows, &sum))
	assert.Equal(t, []int64{1, 1}, []int64{rows, sum}, "nothing of the failed transactions committed")
}
