package paysim_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/payment"
	"github.com/marketplace/checkout/payment/paysim"
)

// TestRecords_OrderIntents_EveryKeyOldestFirst: the simulator's record gives each order every
// intent it holds, under any key, oldest first, as they stand; an order without one is absent.
func TestRecords_OrderIntents_EveryKeyOldestFirst(t *testing.T) {
	t.Parallel()
	f := newFixture(t, paysim.Options{})
	first := request(paysim.TokenOK)
	second := first
	second.Key += "-again"
	other := request(paysim.Token3DS)
	a0, err := f.sim.Authorize(f.ctx, first)
	require.NoError(t, err)
	b, err := f.sim.Authorize(f.ctx, second)
	require.NoError(t, err)
	c, err := f.sim.Authorize(f.ctx, other)
	require.NoError(t, err)
	a, err := f.sim.Capture(f.ctx, ref(a0))
	require.NoError(t, err)

	want := map[int64][]payment.Intent{first.OrderID: {a, b}, other.OrderID: {c}}
	got, err := paysim.NewRecords(f.pool).OrderIntents(f.ctx, []int64{first.OrderID, other.OrderID, 999_999})
	require.NoError(t, err)
	assert.Equal(t, want, got)

	tx, err := f.pool.BeginTx(f.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(f.ctx) }()
	got, err = paysim.NewRecords(f.pool).OrderIntentsIn(f.ctx, tx, []int64{first.OrderID, other.OrderID})
	require.NoError(t, err)
	assert.Equal(t, want, got, "read in the caller's transaction")
}
