package order_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/internal/staff"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/order"
)

// TestView_OneBatch_ReadsWhatEachReadAloneReads: the view's reads, sent together, give what each
// store read gives on its own for an order with every part (lines, a line cancellation, its stock,
// its payment, its timeline, a staff action); an order that does not exist is not found.
func TestView_OneBatch_ReadsWhatEachReadAloneReads(t *testing.T) {
	t.Parallel()
	s := newShop(t)
	id := s.confirmed("view-1", 74)
	d := order.DataOf(s.pool)
	_, err := d.InsertLineCancellation(s.ctx, order.NewLineCancellation{RequestID: "view-lc", Reason: "damaged",
		RequestedBy: "seller", OrderID: id, SkuID: 74, Units: 1})
	require.NoError(t, err)
	require.NoError(t, s.orders.StaffActed(s.ctx, order.StaffAction{OrderID: id, Action: order.StaffRetry, Reason: "provider recovered",
		Step: "capture", Actor: staff.Actor{Sub: "900", Role: "support", Name: "Deniz Destek", Via: staff.ViaTemporalUI, IP: "10.0.0.5"},
		WorkflowID: "wf-view-1", RunID: "run", Seq: 0}))

	v, err := s.orders.View(s.ctx, id)
	require.NoError(t, err)

	o, err := d.GetOrder(s.ctx, id)
	require.NoError(t, err)
	assert.Equal(t, o, v.Order)
	items, err := d.OrderItems(s.ctx, id)
	require.NoError(t, err)
	assert.Equal(t, items, v.Items)
	require.Len(t, v.Items, 1)
	lcs, err := d.LineCancellationsOfOrder(s.ctx, id)
	require.NoError(t, err)
	assert.Equal(t, lcs, v.Cancellations)
	require.Len(t, v.Cancellations, 1)
	res, err := inventory.ReservationOf(s.ctx, s.pool, id)
	require.NoError(t, err)
	assert.Equal(t, res.Allocations, v.Reservations)
	require.Len(t, v.Reservations, 1)
	pay, err := d.GetPayment(s.ctx, id)
	require.NoError(t, err)
	require.NotNil(t, v.Payment)
	assert.Equal(t, pay, *v.Payment)
	assert.NotEmpty(t, v.Timeline)
	kinds := make([]string, len(v.Timeline))
	for i, e := range v.Timeline {
		kinds[i] = e.Kind
	}
	assert.Contains(t, kinds, "support_action")
	require.Len(t, v.StaffActions, 1)
	assert.Equal(t, "Deniz Destek", v.StaffActions[0].ActorName)

	_, err = s.orders.View(s.ctx, id+1_000_000)
	assert.True(t, db.NotFound(err), "no such order: %v", err)
}
