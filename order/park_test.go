package order_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/order"
)

// TestPark_EndedOrder_KeepsItsStatusAndCarriesTheAttention: the saga ends an order's row before it
// gives its stock and money back, so a parked step of that giving back parks an order already
// FAILED: the row keeps its status, carries the attention until the step goes on, and an open
// order parks and resumes as before.
func TestPark_EndedOrder_KeepsItsStatusAndCarriesTheAttention(t *testing.T) {
	t.Parallel()
	s := newShop(t)
	row := func(id int64) (string, bool) {
		var status string
		var parked bool
		require.NoError(t, s.pool.QueryRow(s.ctx, `SELECT status, attention IS NOT NULL FROM orders WHERE id = $1`, id).
			Scan(&status, &parked))
		return status, parked
	}

	ended := s.reserved("park-ended", 71)
	changed, err := s.orders.Transition(s.ctx, ended, order.StatusFailed, problem.HoldExpired, nil)
	require.NoError(t, err)
	require.True(t, changed)
	require.NoError(t, s.orders.Park(s.ctx, ended, "release stock", "database down", nil))
	status, parked := row(ended)
	assert.Equal(t, "FAILED", status, "an ended order is never reopened")
	assert.True(t, parked, "its giving back waits for support")
	require.NoError(t, s.orders.Resume(s.ctx, ended))
	status, parked = row(ended)
	assert.Equal(t, "FAILED", status)
	assert.False(t, parked)

	open := s.reserved("park-open", 72)
	require.NoError(t, s.orders.Park(s.ctx, open, "capture", "provider down", nil))
	status, parked = row(open)
	assert.Equal(t, "NEEDS_ATTENTION", status)
	assert.True(t, parked)
	require.NoError(t, s.orders.Resume(s.ctx, open))
	status, parked = row(open)
	assert.Equal(t, "PENDING_PAYMENT", status)
	assert.False(t, parked)
}
