package db_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/internal/dev/testenv"
)

type pair struct {
	N    int64
	Name string
}

// TestQueue_ReadsTogether_EachAsAlone: reads queued on one batch hand each its own rows, scanned
// by position into the row type; a read of no row says so without failing the batch; a failing
// read fails the batch.
func TestQueue_ReadsTogether_EachAsAlone(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()

	var many []pair
	var one pair
	var oneFound, noneFound bool
	b := &pgx.Batch{}
	db.QueueRows(b, `SELECT g, 'n' || g FROM generate_series(1, $1::int) g`, []any{3}, func(rows []pair) { many = rows })
	db.QueueRow(b, `SELECT $1::bigint, 'one'`, []any{7}, func(r pair, found bool) { one, oneFound = r, found })
	db.QueueRow(b, `SELECT 1::bigint, 'x' WHERE false`, nil, func(_ pair, found bool) { noneFound = found })
	require.NoError(t, pool.SendBatch(ctx, b).Close())
	assert.Equal(t, []pair{{1, "n1"}, {2, "n2"}, {3, "n3"}}, many)
	assert.Equal(t, pair{7, "one"}, one)
	assert.True(t, oneFound)
	assert.False(t, noneFound, "no row: not found, and no error")

	b = &pgx.Batch{}
	db.QueueRow(b, `SELECT 1::bigint, 'x'`, nil, func(pair, bool) {})
	db.QueueRows(b, `SELECT 1 / 0, 'x'`, nil, func([]pair) { t.Error("a failed read has no rows to hand") })
	assert.ErrorContains(t, pool.SendBatch(ctx, b).Close(), "division by zero")
}
