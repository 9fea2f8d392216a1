package paysim_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/payment"
	"github.com/marketplace/checkout/payment/paysim"
)

// The rules a real provider enforces, held by the simulator too (docs/payments.md).

func TestRules_TheIntentIsMadeAndNamedBeforeItHoldsMoney(t *testing.T) {
	t.Parallel()
	f := newFixture(t, paysim.Options{})
	req := request(paysim.TokenOK)
	var named string
	var statusWhenNamed string
	req.Created = func(ctx context.Context, id string) error {
		named = id
		return f.pool.QueryRow(ctx, `SELECT status FROM paysim.intents WHERE id = $1`, id).Scan(&statusWhenNamed)
	}
	in, err := f.sim.Authorize(f.ctx, req)
	require.NoError(t, err)
	assert.Equal(t, in.ID, named)
	assert.Equal(t, string(payment.StatusCreated), statusWhenNamed, "named before it was confirmed")
	assert.Equal(t, payment.StatusAuthorized, in.Status)
	assert.WithinDuration(t, time.Now().Add(7*24*time.Hour), in.CaptureBefore, time.Minute)

	// A caller that cannot record the id stops the authorization: nothing is held.
	stopped := request(paysim.TokenOK)
	stopped.Created = func(context.Context, string) error { return assert.AnError }
	_, err = f.sim.Authorize(f.ctx, stopped)
	assert.ErrorIs(t, err, assert.AnError)
	assert.Equal(t, payment.StatusCreated, f.status(stopped.Key))
}

func TestRules_OperationKeysAreRefusedWithOtherParameters(t *testing.T) {
	t.Parallel()
	f := newFixture(t, paysim.Options{})
	a, b := f.authorize(paysim.TokenOK), f.authorize(paysim.TokenOK)
	_, err := f.sim.Capture(f.ctx, ref(a))
	require.NoError(t, err)
	// a's capture key, sent for another intent: refused, b untouched.
	_, err = f.sim.Capture(f.ctx, payment.Ref{Key: a.IdempotencyKey, OrderID: a.OrderID, IntentID: b.ID})
	assert.ErrorIs(t, err, payment.ErrKeyReused)
	assert.Equal(t, payment.StatusAuthorized, f.status(b.IdempotencyKey))

	// One key per operation: capture then refund of one payment never collide.
	refunded, err := f.sim.Refund(f.ctx, ref(a))
	require.NoError(t, err)
	assert.Equal(t, payment.StatusRefunded, refunded.Status)
	assert.Equal(t, 4, f.count(`SELECT count(*) FROM paysim.idempotency_keys WHERE key LIKE $1 || '-%'`, a.IdempotencyKey),
		"a key each: authorize, confirm, capture, refund")
}

func TestRules_AKeyOlderThanTheWindowIsForgotten_TheSameAuthorizeMakesASecondIntent(t *testing.T) {
	t.Parallel()
	f := newFixture(t, paysim.Options{})
	req := request(paysim.TokenOK)
	first, err := f.sim.Authorize(f.ctx, req)
	require.NoError(t, err)
	again, err := f.sim.Authorize(f.ctx, req)
	require.NoError(t, err)
	assert.Equal(t, first.ID, again.ID, "within the window: the same intent")

	_, err = f.pool.Exec(f.ctx, `UPDATE paysim.idempotency_keys SET created_at = now() - interval '25 hours'
		WHERE key LIKE $1 || '-%'`, req.Key)
	require.NoError(t, err)
	late, err := f.sim.Authorize(f.ctx, req)
	require.NoError(t, err)
	assert.NotEqual(t, first.ID, late.ID, "past the window the provider forgot the key: a second authorization")
	assert.Equal(t, 2, f.count(`SELECT count(*) FROM paysim.intents WHERE idempotency_key = $1`, req.Key))
	assert.Equal(t, 24*time.Hour, f.sim.Rules().KeyWindow)
}

func TestRules_SearchByMetadataLags_ReadByIDDoesNot(t *testing.T) {
	t.Parallel()
	f := newFixture(t, paysim.Options{SearchLag: time.Hour})
	in := f.authorize(paysim.TokenOK)
	_, err := f.sim.Lookup(f.ctx, payment.Ref{Key: in.IdempotencyKey, OrderID: in.OrderID})
	assert.ErrorIs(t, err, payment.ErrNotFound, "too young for the search")
	byID, err := f.sim.Lookup(f.ctx, ref(in))
	require.NoError(t, err)
	assert.Equal(t, in.ID, byID.ID)

	_, err = f.pool.Exec(f.ctx, `UPDATE paysim.intents SET created_at = now() - interval '2 hours' WHERE id = $1`, in.ID)
	require.NoError(t, err)
	found, err := f.sim.Lookup(f.ctx, payment.Ref{Key: in.IdempotencyKey, OrderID: in.OrderID})
	require.NoError(t, err)
	assert.Equal(t, in.ID, found.ID, "the search sees it once the lag has passed")
	assert.Equal(t, time.Hour, f.sim.Rules().SearchLag)
}

func TestRules_AnAuthorizationLapses_CaptureRefused_VoidStillWorks(t *testing.T) {
	t.Parallel()
	f := newFixture(t, paysim.Options{})
	in := f.authorize(paysim.TokenOK)
	_, err := f.pool.Exec(f.ctx, `UPDATE paysim.intents SET capture_before = now() - interval '1 second' WHERE id = $1`, in.ID)
	require.NoError(t, err)
	looked, err := f.sim.Lookup(f.ctx, ref(in))
	require.NoError(t, err)
	assert.Equal(t, payment.StatusVoided, looked.Status)
	assert.Equal(t, payment.DeclineAuthorizationExpired, looked.DeclineCode)
	_, err = f.sim.Capture(f.ctx, ref(in))
	assert.ErrorIs(t, err, payment.ErrInvalidState)
	assert.Zero(t, f.count(`SELECT captured_minor FROM paysim.intents WHERE id = $1`, in.ID))
	voided, err := f.sim.Void(f.ctx, ref(in))
	require.NoError(t, err)
	assert.Equal(t, payment.StatusVoided, voided.Status)
}

func TestRules_LostCreate_OnlyTheSearchOrTheSameKeysFindIt(t *testing.T) {
	t.Parallel()
	f := newFixture(t, paysim.Options{})
	req := request(paysim.TokenLostCreate)
	named := false
	req.Created = func(context.Context, string) error { named = true; return nil }
	_, err := f.sim.Authorize(f.ctx, req)
	assert.ErrorIs(t, err, payment.ErrTimeout)
	assert.False(t, named, "the caller never learnt the id")
	searched, err := f.sim.Lookup(f.ctx, req.Ref)
	require.NoError(t, err)
	assert.Equal(t, payment.StatusAuthorized, searched.Status)

	again, err := f.sim.Authorize(f.ctx, req)
	require.NoError(t, err)
	assert.True(t, named)
	assert.Equal(t, searched.ID, again.ID, "the same keys answer the same intent")
	assert.Equal(t, payment.StatusAuthorized, again.Status)
	assert.Equal(t, 1, f.count(`SELECT count(*) FROM paysim.intents WHERE idempotency_key = $1`, req.Key))
}
