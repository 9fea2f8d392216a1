package activities_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/payment"
	"github.com/marketplace/checkout/payment/paysim"
)

// The saga's payment steps against the simulator taught a real provider's rules: per-operation
// keys kept for a window, a lagging search by metadata, authorizations that lapse.

func simPayments(t *testing.T, opts paysim.Options) (*activities.Payments, *pgxpool.Pool, *paysim.Sim) {
	t.Helper()
	pool := testenv.Pool(t)
	opts.Log = slog.New(slog.NewJSONHandler(io.Discard, nil))
	sim := paysim.New(pool, opts)
	t.Cleanup(sim.Close)
	return &activities.Payments{Pool: pool, Gateway: sim}, pool, sim
}

func scalar[T any](t *testing.T, pool *pgxpool.Pool, sql string, args ...any) T {
	t.Helper()
	var v T
	require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&v))
	return v
}

func codeOf(t *testing.T, err error) string {
	t.Helper()
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	return appErr.Type()
}

func TestAuthorize_IntentRecordedBeforeItHoldsMoney_ALostConfirmIsFoundByID(t *testing.T) {
	t.Parallel()
	pays, pool, _ := simPayments(t, paysim.Options{SearchLag: time.Hour})
	ctx := context.Background()
	id, _ := insertOrder(t, pool, "PENDING_PAYMENT", "PENDING", 0)
	in := activities.AuthorizeInput{OrderID: id, AmountMinor: 1000, Currency: "TRY", Token: paysim.TokenTimeout}
	_, err := pays.Authorize(ctx, in)
	assert.Equal(t, string(problem.PaymentOutcomeUnknown), codeOf(t, err))
	recorded := scalar[*string](t, pool, `SELECT intent_id FROM payments WHERE order_id = $1`, id)
	require.NotNil(t, recorded, "the id was recorded before the confirm whose answer was lost")

	// The search lags an hour, but the order asks by id: the answer is there at once.
	res, err := pays.ResolvePayment(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, activities.PaymentResult{Status: "AUTHORIZED", IntentID: *recorded}, res)
}

func TestAuthorize_LostCreateUnderSearchLag_AuthorizedAgainUnderTheSameKeys_OneIntent(t *testing.T) {
	t.Parallel()
	pays, pool, _ := simPayments(t, paysim.Options{SearchLag: time.Hour})
	ctx := context.Background()
	id, _ := insertOrder(t, pool, "PENDING_PAYMENT", "PENDING", 0)
	in := activities.AuthorizeInput{OrderID: id, AmountMinor: 1000, Currency: "TRY", Token: paysim.TokenLostCreate}
	_, err := pays.Authorize(ctx, in)
	assert.Equal(t, string(problem.PaymentOutcomeUnknown), codeOf(t, err))
	assert.Nil(t, scalar[*string](t, pool, `SELECT intent_id FROM payments WHERE order_id = $1`, id))

	// The search cannot see it yet; the provider keeps the keys: authorizing again is safe.
	res, err := pays.ResolvePayment(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, payment.StatusNotFound, res.Status)
	// Its compensation must not take "not found" for "nothing held" while the search lags.
	_, err = pays.Reverse(ctx, id)
	assert.Equal(t, string(problem.PaymentProviderUnavailable), codeOf(t, err), "retried until the search can tell")

	again, err := pays.Authorize(ctx, in)
	require.NoError(t, err)
	assert.Equal(t, payment.StatusAuthorized, again.Status)
	assert.Equal(t, 1, scalar[int](t, pool, `SELECT count(*) FROM paysim.intents WHERE order_id = $1`, id))
	assert.Equal(t, again.IntentID, *scalar[*string](t, pool, `SELECT intent_id FROM payments WHERE order_id = $1`, id))
}

func TestResolvePayment_PastTheKeyWindowAndWithinTheSearchLag_StaysUnknown(t *testing.T) {
	t.Parallel()
	pays, pool, _ := simPayments(t, paysim.Options{SearchLag: 3 * time.Hour, KeyWindow: 2 * time.Hour})
	ctx := context.Background()
	id, _ := insertOrder(t, pool, "PENDING_PAYMENT", "UNKNOWN", 0)
	_, err := pool.Exec(ctx, `UPDATE payments SET authorize_attempted_at = now() - interval '90 minutes' WHERE order_id = $1`, id)
	require.NoError(t, err)
	res, err := pays.ResolvePayment(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, payment.StatusUnknown, res.Status,
		"neither the search nor the keys can tell: the order waits, it does not authorize again")
}

func TestAuthorize_PastTheProvidersKeyWindow_FoundBySearch_NeverAuthorizedTwice(t *testing.T) {
	t.Parallel()
	pays, pool, _ := simPayments(t, paysim.Options{})
	ctx := context.Background()
	id, _ := insertOrder(t, pool, "PENDING_PAYMENT", "PENDING", 0)
	in := activities.AuthorizeInput{OrderID: id, AmountMinor: 1000, Currency: "TRY", Token: paysim.TokenLostCreate}
	_, err := pays.Authorize(ctx, in)
	require.Error(t, err)
	// A day later: the provider forgot the keys, and the order never learnt the intent's id.
	_, err = pool.Exec(ctx, `UPDATE payments SET authorize_attempted_at = now() - interval '25 hours' WHERE order_id = $1`, id)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE paysim.idempotency_keys SET created_at = now() - interval '25 hours'
		 WHERE intent_id IN (SELECT id FROM paysim.intents WHERE order_id = $1)`, id)
	require.NoError(t, err)

	res, err := pays.Authorize(ctx, in)
	require.NoError(t, err)
	assert.Equal(t, payment.StatusAuthorized, res.Status, "the intent found by its metadata")
	assert.Equal(t, 1, scalar[int](t, pool, `SELECT count(*) FROM paysim.intents WHERE order_id = $1`, id),
		"the forgotten keys were not sent again: they would have made a second authorization")
}

func TestCapture_AuthorizationLapsedAtTheProvider_RefusedAsExpired_NothingCaptured(t *testing.T) {
	t.Parallel()
	pays, pool, _ := simPayments(t, paysim.Options{})
	ctx := context.Background()
	id, _ := insertOrder(t, pool, "PENDING_PAYMENT", "PENDING", 0)
	res, err := pays.Authorize(ctx, activities.AuthorizeInput{OrderID: id, AmountMinor: 1000, Currency: "TRY", Token: paysim.TokenOK})
	require.NoError(t, err)
	require.Equal(t, payment.StatusAuthorized, res.Status)
	assert.True(t, scalar[bool](t, pool, `SELECT capture_before > now() + interval '6 days' FROM payments WHERE order_id = $1`, id),
		"the provider's deadline is mirrored")

	// Known to the order: not even sent.
	_, err = pool.Exec(ctx, `UPDATE payments SET capture_before = now() + interval '5 minutes' WHERE order_id = $1`, id)
	require.NoError(t, err)
	_, err = pays.Capture(ctx, id)
	assert.Equal(t, string(problem.PaymentAuthorizationExpired), codeOf(t, err))

	// Lapsed at the provider without the order knowing: the provider's refusal is read as such.
	_, err = pool.Exec(ctx, `UPDATE payments SET capture_before = NULL WHERE order_id = $1`, id)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE paysim.intents SET capture_before = now() - interval '1 second' WHERE order_id = $1`, id)
	require.NoError(t, err)
	_, err = pays.Capture(ctx, id)
	assert.Equal(t, string(problem.PaymentAuthorizationExpired), codeOf(t, err))
	assert.Zero(t, scalar[int64](t, pool, `SELECT captured_minor FROM paysim.intents WHERE order_id = $1`, id))
	assert.Equal(t, "VOIDED", scalar[string](t, pool, `SELECT status FROM payments WHERE order_id = $1`, id))
}
