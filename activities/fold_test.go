package activities_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/internal/problem"
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

// TestFinishAnswered_RefusalRecordedOnlyByTheEndItRidesIn: the saga's refusal of an order it
// failed as it was placed is recorded in the transaction that ends the order, and never for an
// order another actor ended first (a reset run's order that is CONFIRMED is sold, not refused); the
// answer that placed the order is recorded either way.
func TestFinishAnswered_RefusalRecordedOnlyByTheEndItRidesIn(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	orders := &activities.Orders{Pool: pool}
	recorded := func(id int64) int64 {
		return scalar[int64](t, pool, `SELECT count(*) FROM idempotency_records r JOIN orders o
			ON o.user_id = r.user_id AND o.idempotency_key = r.idempotency_key WHERE o.id = $1`, id)
	}
	answerOf := func(id int64, outcome string) *activities.RecordOutcomeInput {
		in := activities.RecordOutcomeInput{OrderID: id, Outcome: map[string]any{"outcome": outcome, "orderId": id}}
		require.NoError(t, pool.QueryRow(ctx, `SELECT user_id, idempotency_key, request_hash FROM orders WHERE id = $1`, id).
			Scan(&in.UserID, &in.IdempotencyKey, &in.RequestHash))
		return &in
	}
	declined := activities.TransitionInput{To: order.StatusFailed, Code: problem.PaymentDeclined}

	open, _ := insertOrder(t, pool, "PENDING_PAYMENT", "DECLINED", 0)
	in := activities.FinishInput{TransitionInput: declined, Refusal: answerOf(open, "PAYMENT_DECLINED")}
	in.OrderID = open
	for range 2 { // a repeat after a lost answer records nothing more
		done, err := orders.FinishAnswered(ctx, in)
		require.NoError(t, err)
		assert.Equal(t, order.StatusFailed, done.Status)
	}
	assert.Equal(t, int64(1), recorded(open), "refused with the order's end")

	sold, _ := insertOrder(t, pool, "CONFIRMED", "CAPTURED", 0)
	in = activities.FinishInput{TransitionInput: declined, Refusal: answerOf(sold, "PAYMENT_DECLINED")}
	in.OrderID = sold
	done, err := orders.FinishAnswered(ctx, in)
	require.NoError(t, err)
	assert.Equal(t, activities.Finished{Status: order.StatusConfirmed}, done, "the row's word")
	assert.Zero(t, recorded(sold), "a sold order is never recorded as refused")

	placed, _ := insertOrder(t, pool, "CANCELLED", "VOIDED", 0)
	in = activities.FinishInput{TransitionInput: declined, Answer: answerOf(placed, "CREATED")}
	in.OrderID = placed
	_, err = orders.FinishAnswered(ctx, in)
	require.NoError(t, err)
	assert.Equal(t, int64(1), recorded(placed), "the answer that placed the order is recorded whoever ended it")
}
