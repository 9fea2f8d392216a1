package e2e_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/workflows"
)

func (sh *shopper) extendHold(orderID int64, key string) reply {
	var headers []string
	if key != "" {
		headers = []string{"Idempotency-Key", key}
	}
	return sh.s.call(http.MethodPost, fmt.Sprintf("/api/v1/orders/%d/extend-hold", orderID), sh.token, headers, nil)
}

func holdOf(t *testing.T, r reply, field string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, r.str(field))
	require.NoError(t, err, r.raw)
	return at
}

// TestOrder_HoldExtendedInItsLastSeconds_SurvivesItsFirstExpiryAndIsConfirmed: the shopper on the
// 3-D Secure page asks for more time. Too early it is refused with the time it becomes possible;
// in the hold's last moments every reservation and the order move; a repeat with the same key gets
// the same answer, another is refused. Past the first expiry the sweeper leaves the stock alone,
// the order still waits, and the shopper's approval confirms it.
func TestOrder_HoldExtendedInItsLastSeconds_SurvivesItsFirstExpiryAndIsConfirmed(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{hold: 8 * time.Second,
		env: map[string]string{"HOLD_EXTEND_BY": "8s", "HOLD_EXTEND_WINDOW": "4s", "HOLD_EXTEND_MAX": "1"}})
	sh := s.shopper(7051)
	sh.fill(map[int64]int32{71: 1, 88: 2})
	key := "k-" + randomHex(8)
	r := sh.order(key, sh.preview(), "tok_3ds")
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	id := r.int("orderId")
	first := holdOf(t, r, "holdExpiresAt")

	early := sh.extendHold(id, "")
	require.Equal(t, http.StatusConflict, early.status, early.raw)
	assert.Equal(t, "HOLD_EXTENSION_TOO_EARLY", early.str("code"))
	assert.WithinDuration(t, first.Add(-4*time.Second), holdOf(t, early, "extendableFrom"), time.Second)

	time.Sleep(time.Until(first.Add(-2 * time.Second)))
	ext := sh.extendHold(id, "x-1")
	require.Equal(t, http.StatusOK, ext.status, ext.raw)
	extended := holdOf(t, ext, "holdExpiresAt")
	assert.WithinDuration(t, first.Add(8*time.Second), extended, time.Millisecond)
	again := sh.extendHold(id, "x-1")
	require.Equal(t, http.StatusOK, again.status, "a repeat of the same request: %s", again.raw)
	assert.True(t, extended.Equal(holdOf(t, again, "holdExpiresAt")))
	other := sh.extendHold(id, "")
	require.Equal(t, http.StatusConflict, other.status, other.raw)
	assert.Equal(t, "HOLD_EXTENSION_USED", other.str("code"))

	// Past the first expiry: the sweeper finds nothing of this order's, which still waits.
	time.Sleep(time.Until(first.Add(1500 * time.Millisecond)))
	swept, err := s.deps.Inventory.Sweep(s.ctx, 100, 10)
	require.NoError(t, err)
	assert.NotContains(t, swept.Orders, id)
	assert.Equal(t, int64(2), s.scalar(`SELECT count(*) FROM stock_reservations WHERE order_id = $1 AND status = 'ACTIVE'
		AND expires_at = $2`, id, extended))
	view := s.call(http.MethodGet, fmt.Sprintf("/api/v1/orders/%d", id), sh.token, nil, nil)
	require.Equal(t, http.StatusOK, view.status)
	assert.Equal(t, "PENDING_PAYMENT", view.str("status"))
	assert.True(t, extended.Equal(holdOf(t, view, "holdExpiresAt")), "the shopper's view shows the new expiry")
	assert.Equal(t, int64(1), view.int("holdExtensions"))
	page, err := http.NewRequestWithContext(s.ctx, http.MethodGet, r.str("payment", "redirectUrl"), nil)
	require.NoError(t, err)
	assert.Contains(t, s.do(page).raw, extended.UTC().Format("15:04:05 UTC"), "the 3-D Secure page shows the new end of the hold")

	require.Equal(t, http.StatusOK, s.answer3DS(r.str("payment", "redirectUrl"), "approve").status)
	final := s.waitFinal(sh.token, id, 30*time.Second)
	assert.Equal(t, "CONFIRMED", final.str("status"), final.raw)
	assert.Equal(t, int64(2), s.scalar(`SELECT count(*) FROM stock_reservations WHERE order_id = $1 AND status = 'CONFIRMED'`, id))
	s.recordHistory("hold-extended", sh.workflowOf(key))
	s.recordHistory("hold-extended-hold", workflows.HoldWorkflowID(id))
}
