package activities_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/internal/dev/demo"
	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/inventory"
)

// heldOrder is an order waiting for payment with two lines reserved for hold.
func heldOrder(t *testing.T, pool *pgxpool.Pool, engine *inventory.Engine, hold time.Duration) int64 {
	t.Helper()
	ctx := context.Background()
	id, _ := insertOrder(t, pool, "PENDING_PAYMENT", "REQUIRES_ACTION", 0)
	res, err := engine.Reserve(ctx, inventory.ReserveRequest{OrderID: id, Hold: hold, ShipTo: inventory.Location{Lat: 41, Lon: 29},
		Lines: []inventory.Line{{SKUID: 71, Quantity: 1}, {SKUID: 72, Quantity: 1}}})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE orders SET hold_expires_at = $2 WHERE id = $1`, id, res.ExpiresAt)
	require.NoError(t, err)
	return id
}

// refusal is the coded refusal of an extension, as the saga reads it.
func refusal(t *testing.T, err error) *problem.Error {
	t.Helper()
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "%v", err)
	require.True(t, appErr.NonRetryable())
	r := activities.Refusal(err)
	require.NotNil(t, r, "%v", err)
	assert.Equal(t, string(r.Code), appErr.Type(), "the refusal's type is its code")
	return r
}

// expiries are the order's hold and its reservations' expiries, as stored.
func expiries(t *testing.T, pool *pgxpool.Pool, id int64) (order time.Time, rows []time.Time) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, pool.QueryRow(ctx, `SELECT hold_expires_at FROM orders WHERE id = $1`, id).Scan(&order))
	r, err := pool.Query(ctx, `SELECT expires_at FROM stock_reservations WHERE order_id = $1 AND status = 'ACTIVE'`, id)
	require.NoError(t, err)
	defer r.Close()
	for r.Next() {
		var at time.Time
		require.NoError(t, r.Scan(&at))
		rows = append(rows, at)
	}
	return order, rows
}

// TestExtendHold_OnlyInTheLastMinutes_OnceEveryReservationMoves: too early is refused with the
// time it becomes possible; in the window every reservation and the order move by the same amount
// in one go; a second is refused when one is allowed; nothing moves on a refusal.
func TestExtendHold_OnlyInTheLastMinutes_OnceEveryReservationMoves(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	require.NoError(t, demo.Load(ctx, pool))
	engine := inventory.New(pool, nil)
	a := &activities.Orders{Pool: pool, HoldExtension: activities.HoldExtension{By: 5 * time.Minute, Window: 3 * time.Minute, Max: 1}}

	early := heldOrder(t, pool, engine, 10*time.Minute)
	before, _ := expiries(t, pool, early)
	_, err := a.ExtendHold(ctx, early)
	r := refusal(t, err)
	assert.Equal(t, problem.HoldExtensionTooEarly, r.Code)
	d, _ := activities.DetailsOf[activities.HoldDetails](r)
	from := d.ExtendableFrom
	require.NotNil(t, from)
	assert.WithinDuration(t, before.Add(-3*time.Minute), *from, time.Millisecond)
	after, _ := expiries(t, pool, early)
	assert.True(t, before.Equal(after), "a refusal moves nothing")

	id := heldOrder(t, pool, engine, 2*time.Minute)
	before, rows := expiries(t, pool, id)
	require.Len(t, rows, 2)
	ext, err := a.ExtendHold(ctx, id)
	require.NoError(t, err)
	assert.Zero(t, ext.ExtensionsLeft)
	assert.WithinDuration(t, before.Add(5*time.Minute), ext.ExpiresAt, time.Millisecond)
	after, rows = expiries(t, pool, id)
	assert.True(t, ext.ExpiresAt.Equal(after))
	for _, at := range rows {
		assert.True(t, at.Equal(after), "every reservation moved with the order: %s vs %s", at, after)
	}
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM order_events WHERE order_id = $1 AND kind = 'hold extended'`, id).Scan(&n))
	assert.Equal(t, 1, n, "on the order's timeline")

	_, err = a.ExtendHold(ctx, id)
	assert.Equal(t, problem.HoldExtensionUsed, refusal(t, err).Code)
	again, _ := expiries(t, pool, id)
	assert.True(t, after.Equal(again))

	_, err = pool.Exec(ctx, `UPDATE orders SET status = 'CONFIRMED' WHERE id = $1`, early)
	require.NoError(t, err)
	_, err = a.ExtendHold(ctx, early)
	r = refusal(t, err)
	assert.Equal(t, problem.OrderNotPendingPayment, r.Code)
	assert.Equal(t, activities.HoldDetails{Max: 1, Status: "CONFIRMED"}, r.Details)
}

// TestExtendHold_ExpiredHold_RefusedAndReleased: a hold past its expiry (not yet swept) is not
// revived; the hold's expiry then releases it.
func TestExtendHold_ExpiredHold_RefusedAndReleased(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	require.NoError(t, demo.Load(ctx, pool))
	engine := inventory.New(pool, nil)
	a := &activities.Orders{Pool: pool, HoldExtension: activities.HoldExtension{By: 5 * time.Minute, Window: 3 * time.Minute, Max: 1}}
	id := heldOrder(t, pool, engine, 2*time.Minute)
	_, err := pool.Exec(ctx, `UPDATE stock_reservations SET expires_at = now() - interval '1 second' WHERE order_id = $1`, id)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE orders SET hold_expires_at = now() - interval '1 second' WHERE id = $1`, id)
	require.NoError(t, err)

	_, err = a.ExtendHold(ctx, id)
	assert.Equal(t, problem.HoldExpired, refusal(t, err).Code)
	exp, err := engine.ReleaseExpired(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, inventory.Expiry{Released: 2}, exp)
}

// TestExtendHold_RacingTheExpiry_ExactlyOneWins: extensions race the hold's expiry and the
// sweeper on holds that end right now. Each order ends either extended with all its stock held
// to the new time, or released with the extension refused — never extended and released, never
// half of each.
func TestExtendHold_RacingTheExpiry_ExactlyOneWins(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	require.NoError(t, demo.Load(ctx, pool))
	engine := inventory.New(pool, nil)
	a := &activities.Orders{Pool: pool, HoldExtension: activities.HoldExtension{By: time.Minute, Window: time.Minute, Max: 1}}
	outcomes := map[string]int{}
	for i := 0; i < 20; i++ {
		id := heldOrder(t, pool, engine, 200*time.Millisecond)
		var until time.Time
		require.NoError(t, pool.QueryRow(ctx, `SELECT hold_expires_at FROM orders WHERE id = $1`, id).Scan(&until))
		time.Sleep(time.Until(until) - time.Duration(i%5)*time.Millisecond)
		var wg sync.WaitGroup
		var extErr error
		var exp inventory.Expiry
		var releaseErr, sweepErr error
		wg.Add(3)
		go func() { defer wg.Done(); _, extErr = a.ExtendHold(ctx, id) }()
		go func() { defer wg.Done(); exp, releaseErr = engine.ReleaseExpired(ctx, id) }()
		go func() { defer wg.Done(); _, sweepErr = engine.Sweep(ctx, 100, 10) }()
		wg.Wait()
		require.NoError(t, releaseErr)
		require.NoError(t, sweepErr)

		var active, released int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'ACTIVE'),
			count(*) FILTER (WHERE status = 'RELEASED') FROM stock_reservations WHERE order_id = $1`, id).Scan(&active, &released))
		if extErr == nil {
			outcomes["extended"]++
			assert.Equal(t, 2, active, "order %d extended: all its stock is held", id)
			assert.Zero(t, exp.Released, "order %d: extended and released", id)
			_, rows := expiries(t, pool, id)
			for _, at := range rows {
				assert.True(t, at.After(until), "order %d: extended reservations end later", id)
			}
		} else {
			outcomes[string(refusal(t, extErr).Code)]++
			if released < 2 {
				// The expiry ran a moment before the hold ended by the database's clock (the sweeper,
				// a moment later, may have taken a line meanwhile): it said until when, and the
				// hold's timer runs it again then.
				require.NotNil(t, exp.Until, "order %d: neither extended nor held", id)
				time.Sleep(time.Until(*exp.Until))
				exp, releaseErr = engine.ReleaseExpired(ctx, id)
				require.NoError(t, releaseErr)
				released += exp.Released
				active -= exp.Released
			}
			assert.Equal(t, 2, released, "order %d not extended: all its stock goes back", id)
		}
		if active == 2 {
			// Tidy for the next round: give the stock back.
			_, err := engine.Release(ctx, id)
			require.NoError(t, err)
		}
	}
	t.Logf("outcomes: %v", outcomes)
}

// TestReleaseExpired_NotExpiredYet_SaysHowLongByTheDatabasesClock: stock not yet expired by the
// database's clock is kept, and the expiry says until when and how much of it is left by that
// clock, which the hold child waits (its own clock may be ahead of the database's).
func TestReleaseExpired_NotExpiredYet_SaysHowLongByTheDatabasesClock(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	require.NoError(t, demo.Load(ctx, pool))
	engine := inventory.New(pool, nil)
	id := heldOrder(t, pool, engine, 2*time.Minute)

	exp, err := engine.ReleaseExpired(ctx, id)
	require.NoError(t, err)
	assert.Zero(t, exp.Released)
	require.NotNil(t, exp.Until)
	var left float64
	require.NoError(t, pool.QueryRow(ctx, `SELECT EXTRACT(EPOCH FROM $1::timestamptz - now())`, *exp.Until).Scan(&left))
	assert.InDelta(t, left, exp.Left.Seconds(), 2)
	assert.InDelta(t, 120, exp.Left.Seconds(), 10)
}
