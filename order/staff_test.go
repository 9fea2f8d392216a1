package order_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/staff"
	"github.com/marketplace/checkout/order"
)

// TestStaffActed_RecordedOnceWithThePerson_AndNeverChanged: a staff action is written once (a
// repeat of its step writes nothing), its row and the order's timeline entry name the person, and
// the table refuses any change or removal of what it recorded.
func TestStaffActed_RecordedOnceWithThePerson_AndNeverChanged(t *testing.T) {
	t.Parallel()
	s := newShop(t)
	id := s.reserved("staff-1", 73)
	who := staff.Actor{Sub: "900", Role: "support", Name: "Deniz Destek", Via: staff.ViaTemporalUI, IP: "10.0.0.5"}
	a := order.StaffAction{OrderID: id, Action: order.StaffRetry, Reason: "provider recovered", Step: "capture", Actor: who,
		WorkflowID: "order-u7-staff-1", RunID: "run-1", Seq: 0}
	require.NoError(t, s.orders.StaffActed(s.ctx, a))
	require.NoError(t, s.orders.StaffActed(s.ctx, a), "the same action again")

	var n int
	var sub, role, name, via, ip, reason, step string
	require.NoError(t, s.pool.QueryRow(s.ctx, `SELECT count(*) OVER (), actor_sub, actor_role, actor_name, actor_via,
		actor_ip, reason, step FROM staff_actions WHERE order_id = $1`, id).Scan(&n, &sub, &role, &name, &via, &ip, &reason, &step))
	assert.Equal(t, 1, n, "written once")
	assert.Equal(t, []string{"900", "support", "Deniz Destek", "temporal-ui", "10.0.0.5", "provider recovered", "capture"},
		[]string{sub, role, name, via, ip, reason, step})
	var entries int
	var entry string
	require.NoError(t, s.pool.QueryRow(s.ctx, `SELECT count(*) OVER (), detail::text FROM order_events
		WHERE order_id = $1 AND kind = 'support_action'`, id).Scan(&entries, &entry))
	assert.Equal(t, 1, entries, "one timeline entry")
	assert.Contains(t, entry, `"actor": {"ip": "10.0.0.5", "sub": "900", "via": "temporal-ui", "name": "Deniz Destek", "role": "support"}`)

	a.Seq = 1
	require.NoError(t, s.orders.StaffActed(s.ctx, a), "the run's next action")
	assert.Equal(t, int64(2), s.count(`SELECT count(*) FROM staff_actions WHERE order_id = $1`, id))

	for _, change := range []string{
		`UPDATE staff_actions SET actor_name = 'someone else' WHERE order_id = $1`,
		`DELETE FROM staff_actions WHERE order_id = $1`,
	} {
		_, err := s.pool.Exec(s.ctx, change, id)
		assert.ErrorContains(t, err, "append-only", change)
	}
	_, err := s.pool.Exec(s.ctx, `TRUNCATE staff_actions`)
	assert.ErrorContains(t, err, "append-only")
	assert.Equal(t, int64(2), s.count(`SELECT count(*) FROM staff_actions WHERE order_id = $1`, id))
}

func (s *shop) count(sql string, args ...any) int64 {
	s.t.Helper()
	var n int64
	require.NoError(s.t, s.pool.QueryRow(s.ctx, sql, args...).Scan(&n))
	return n
}
