package activities_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/order"
	"github.com/marketplace/checkout/payment/paysim"
)

// TestCaptureFinish_OneTransaction_RepeatChangesNothing: an order authorized without its mirror
// (AuthorizeForCapture) is captured, mirrored, answered and confirmed by one step; a repeat after
// a lost answer captures nothing more, records no second answer and finds the order confirmed.
func TestCaptureFinish_OneTransaction_RepeatChangesNothing(t *testing.T) {
	t.Parallel()
	pays, pool, _ := simPayments(t, paysim.Options{})
	ctx := context.Background()
	id, _ := insertOrder(t, pool, "PENDING_PAYMENT", "PENDING", 0)
	var user int64
	var key, hash string
	require.NoError(t, pool.QueryRow(ctx, `SELECT user_id, idempotency_key, request_hash FROM orders WHERE id = $1`, id).
		Scan(&user, &key, &hash))

	auth, err := pays.AuthorizeForCapture(ctx, activities.AuthorizeInput{OrderID: id, AmountMinor: 1000, Currency: "TRY",
		Token: paysim.TokenOK})
	require.NoError(t, err)
	assert.Equal(t, "AUTHORIZED", string(auth.Status))
	assert.Equal(t, "PENDING", scalar[string](t, pool, `SELECT status FROM payments WHERE order_id = $1`, id),
		"the authorization's mirror rides with the capture")
	assert.NotNil(t, scalar[*string](t, pool, `SELECT intent_id FROM payments WHERE order_id = $1`, id),
		"the intent's id is recorded before it holds money")

	answer := &activities.RecordOutcomeInput{UserID: user, IdempotencyKey: key, RequestHash: hash, OrderID: id,
		Outcome: map[string]any{"outcome": "CREATED", "orderId": id}}
	for range 2 {
		done, err := pays.CaptureFinish(ctx, activities.CaptureFinishInput{OrderID: id, Answer: answer})
		require.NoError(t, err)
		assert.Equal(t, "CAPTURED", string(done.Payment.Status))
		assert.Equal(t, order.StatusConfirmed, done.Finished.Status)
	}
	assert.Equal(t, "CAPTURED", scalar[string](t, pool, `SELECT status FROM payments WHERE order_id = $1`, id))
	assert.Equal(t, int64(1000), scalar[int64](t, pool, `SELECT captured_minor FROM payments WHERE order_id = $1`, id))
	assert.Equal(t, "CONFIRMED", scalar[string](t, pool, `SELECT status FROM orders WHERE id = $1`, id))
	assert.Equal(t, int64(1), scalar[int64](t, pool,
		`SELECT count(*) FROM idempotency_records WHERE user_id = $1 AND idempotency_key = $2`, user, key))
	assert.Equal(t, int64(1), scalar[int64](t, pool,
		`SELECT count(*) FROM order_events WHERE order_id = $1 AND kind = 'status'`, id), "one end, one entry")
}
