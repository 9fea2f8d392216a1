package e2e_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/order"
	"github.com/marketplace/checkout/payment"
	"github.com/marketplace/checkout/workflows"
)

// TestPaymentReconciler_LateAuthorizationOfAFailedOrderStillPending_Voided: an order gave up
// before its payment was ever answered (refused out of stock, so its payment row still says
// PENDING and its compensation found nothing at the provider), and the provider authorizes its key
// afterwards — a call that arrived late — without a webhook (a card authorized at once sends
// none). The payment reconciler's scheduled run finds the money held and voids it; a second run
// has nothing left to do.
func TestPaymentReconciler_LateAuthorizationOfAFailedOrderStillPending_Voided(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	cfg := s.ensureSchedules()
	sku := s.proofSKU("LATE-PENDING", 0)
	sh := s.shopper(7031)
	sh.fill(map[int64]int32{sku: 1})
	r := sh.order("k-"+randomHex(8), sh.preview(), "tok_ok")
	require.Equal(t, http.StatusConflict, r.status, r.raw)
	id := r.int("orderId")
	require.NotZero(t, id)
	require.Equal(t, "FAILED", s.waitFinal(sh.token, id, 10*time.Second).str("status"))
	require.Equal(t, "PENDING", s.scalarText(`SELECT status FROM payments WHERE order_id = $1`, id))

	_, err := s.sim.Authorize(s.ctx, payment.AuthorizeRequest{IdempotencyKey: order.PaymentKey(id), OrderID: id,
		AmountMinor: 100_00, Currency: "TRY", PaymentMethodToken: "tok_ok"})
	require.NoError(t, err)

	var res activities.ReconcilePaymentsResult
	s.runSchedule(cfg.ScheduleIDPrefix+workflows.SchedulePaymentReconciler, &res)

	assert.Equal(t, "VOIDED", s.scalarText(`SELECT status FROM paysim.intents WHERE idempotency_key = $1`,
		order.PaymentKey(id)), "no money held for a failed order: %+v", res)
	assert.Equal(t, "VOIDED", s.scalarText(`SELECT status FROM payments WHERE order_id = $1`, id))
	assert.Equal(t, 1, res.Reversed, "%+v", res)
	assert.Equal(t, "FAILED", s.waitFinal(sh.token, id, time.Second).str("status"), "the order stays failed")

	var again activities.ReconcilePaymentsResult
	s.runSchedule(cfg.ScheduleIDPrefix+workflows.SchedulePaymentReconciler, &again)
	assert.Zero(t, again.Checked, "reversed: off the list")
	s.auditClean()
}
