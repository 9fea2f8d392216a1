package activities_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/order"
	"github.com/marketplace/checkout/payment"
	"github.com/marketplace/checkout/payment/paysim"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// fakeProvider answers Lookup from a table of intents by key; every other call is unused here.
type fakeProvider struct {
	payment.Gateway
	mu      sync.Mutex
	intents map[string]payment.Intent
	down    bool
	asked   []string
}

func (f *fakeProvider) Rules() payment.Rules { return payment.Rules{} }

func (f *fakeProvider) Lookup(_ context.Context, ref payment.Ref) (payment.Intent, error) {
	key := ref.Key
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, key)
	if f.down {
		return payment.Intent{}, payment.ErrUnavailable
	}
	in, ok := f.intents[key]
	if !ok {
		return payment.Intent{}, payment.ErrNotFound
	}
	return in, nil
}

// fakeSignaler records the signals; a workflow id in fail makes its signal fail, one in gone has
// ended.
type fakeSignaler struct {
	mu   sync.Mutex
	got  map[string]string // workflow id → status
	fail map[string]bool
	gone map[string]bool
	// beforeAnswer, when set, runs as Running is asked, before it answers.
	beforeAnswer func(workflowID string)
}

func (f *fakeSignaler) Running(_ context.Context, workflowID string) (bool, error) {
	if f.beforeAnswer != nil {
		f.beforeAnswer(workflowID)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.gone[workflowID], nil
}

func (f *fakeProvider) Void(_ context.Context, ref payment.Ref) (payment.Intent, error) {
	key := ref.Key
	f.mu.Lock()
	defer f.mu.Unlock()
	in, ok := f.intents[key]
	if !ok {
		return payment.Intent{}, payment.ErrNotFound
	}
	in.Status = payment.StatusVoided
	f.intents[key] = in
	return in, nil
}

func (f *fakeSignaler) PaymentResolved(_ context.Context, workflowID string, _ int64, res activities.PaymentResult) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail[workflowID] {
		return errors.New("temporal unavailable")
	}
	f.got[workflowID] = string(res.Status)
	return nil
}

type jobsRecorder struct {
	checked  int
	resolved map[string]int
	err      error
}

func (j *jobsRecorder) SweepDone(int, time.Duration, error) {}
func (j *jobsRecorder) ReconcileDone(int, error)            {}
func (j *jobsRecorder) LineCancelsFinished(int, int)        {}
func (j *jobsRecorder) PaymentReconcileDone(checked int, resolved map[string]int, err error) {
	j.checked, j.resolved, j.err = checked, resolved, err
}

// insertOrder writes an order and its payments row as the saga would have left them.
func insertOrder(t *testing.T, pool *pgxpool.Pool, orderStatus, paymentStatus string, paymentAge time.Duration) (int64, string) {
	t.Helper()
	ctx := context.Background()
	var addr int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO addresses (user_id, city, line1, lat, lon)
		VALUES (7, 'Istanbul', 'Test 1', 41, 29) RETURNING id`).Scan(&addr))
	key := "k-" + fmt.Sprint(time.Now().UnixNano())
	var id int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO orders (user_id, idempotency_key, request_hash, workflow_id, status,
		address_id, price_version, total_minor, currency) VALUES (7, $1, 'h', 'order-u7-' || $1, $2, $3, 'pv', 1000, 'TRY')
		RETURNING id`, key, orderStatus, addr).Scan(&id))
	_, err := pool.Exec(ctx, `INSERT INTO payments (order_id, idempotency_key, provider, status, amount_minor, currency,
		created_at, updated_at) VALUES ($1, $2, 'paysim', $3, 1000, 'TRY', now() - $4::interval, now() - $4::interval)`,
		id, order.PaymentKey(id), paymentStatus, fmt.Sprintf("%d seconds", int(paymentAge.Seconds())))
	require.NoError(t, err)
	return id, "order-u7-" + key
}

func TestReconcilePayments_ResolvesUnknownOutcomesOfOpenOrders_ReversesLateMoneyOfClosedOnes(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()

	type row struct {
		name          string
		orderStatus   string
		paymentStatus string
		age           time.Duration
		provider      payment.Status // "" means the provider never saw the key
		signalFails   bool

		wantAsked    bool
		wantSignal   string // "" means no signal
		wantRow      string
		wantResolved bool
		wantReversed bool
	}
	rows := []row{
		{name: "unknown, provider authorized", orderStatus: "PENDING_PAYMENT", paymentStatus: "UNKNOWN",
			provider: payment.StatusAuthorized, wantAsked: true, wantSignal: "AUTHORIZED", wantRow: "AUTHORIZED", wantResolved: true},
		{name: "unknown, provider never saw it", orderStatus: "PENDING_PAYMENT", paymentStatus: "UNKNOWN",
			wantAsked: true, wantRow: "UNKNOWN"},
		{name: "pending for two minutes, provider declined", orderStatus: "PENDING_PAYMENT", paymentStatus: "PENDING",
			age: 2 * time.Minute, provider: payment.StatusDeclined, wantAsked: true, wantSignal: "DECLINED", wantRow: "DECLINED",
			wantResolved: true},
		{name: "pending just now", orderStatus: "PENDING_PAYMENT", paymentStatus: "PENDING", provider: payment.StatusAuthorized,
			wantRow: "PENDING"},
		{name: "awaiting 3-D Secure, its webhook lost, provider authorized", orderStatus: "PENDING_PAYMENT",
			paymentStatus: "REQUIRES_ACTION", age: time.Hour, provider: payment.StatusAuthorized, wantAsked: true,
			wantSignal: "AUTHORIZED", wantRow: "AUTHORIZED", wantResolved: true},
		{name: "awaiting 3-D Secure, shopper has not answered", orderStatus: "PENDING_PAYMENT",
			paymentStatus: "REQUIRES_ACTION", age: time.Hour, provider: payment.StatusRequiresAction, wantAsked: true,
			wantRow: "REQUIRES_ACTION"},
		{name: "unknown of a failed order, the provider authorized it after the order gave up", orderStatus: "FAILED",
			paymentStatus: "UNKNOWN", provider: payment.StatusAuthorized, wantAsked: true, wantRow: "VOIDED", wantReversed: true},
		{name: "a cancelled order's 3-D Secure, approved after the order gave up", orderStatus: "CANCELLED",
			paymentStatus: "REQUIRES_ACTION", provider: payment.StatusAuthorized, wantAsked: true, wantRow: "VOIDED",
			wantReversed: true},
		{name: "unknown of a parked order, provider captured", orderStatus: "NEEDS_ATTENTION", paymentStatus: "UNKNOWN",
			provider: payment.StatusCaptured, wantAsked: true, wantSignal: "CAPTURED", wantRow: "CAPTURED", wantResolved: true},
		{name: "unknown, the signal fails", orderStatus: "PENDING_PAYMENT", paymentStatus: "UNKNOWN",
			provider: payment.StatusAuthorized, signalFails: true, wantAsked: true, wantRow: "UNKNOWN"},
	}

	provider := &fakeProvider{intents: map[string]payment.Intent{}}
	sig := &fakeSignaler{got: map[string]string{}, fail: map[string]bool{}}
	ids := make([]int64, len(rows))
	wfs := make([]string, len(rows))
	for i, r := range rows {
		ids[i], wfs[i] = insertOrder(t, pool, r.orderStatus, r.paymentStatus, r.age)
		if r.provider != "" {
			provider.intents[order.PaymentKey(ids[i])] = payment.Intent{ID: fmt.Sprintf("pi_%d", i),
				Status: r.provider, AmountMinor: 1000, Currency: "TRY"}
		}
		sig.fail[wfs[i]] = r.signalFails
	}
	obs := &jobsRecorder{}
	rec := &activities.PaymentReconciler{Pool: pool, Gateway: provider, Signaler: sig, Observer: obs}
	// A batch of two: the run pages through all of them.
	res, err := rec.ReconcilePayments(ctx, activities.ReconcilePaymentsInput{BatchSize: 2})
	require.NoError(t, err)

	for i, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			assert.Equal(t, r.wantAsked, slices.Contains(provider.asked, order.PaymentKey(ids[i])), "asked the provider")
			assert.Equal(t, r.wantSignal, sig.got[wfs[i]], "signal to the order")
			var status string
			require.NoError(t, pool.QueryRow(ctx, `SELECT status FROM payments WHERE order_id = $1`, ids[i]).Scan(&status))
			assert.Equal(t, r.wantRow, status, "payments row")
			if r.wantReversed {
				assert.Equal(t, payment.StatusVoided, provider.intents[order.PaymentKey(ids[i])].Status, "money given back")
			}
		})
	}
	assert.Equal(t, 9, res.Checked)
	assert.Equal(t, 4, res.Resolved)
	assert.Equal(t, 2, res.Reversed)
	assert.Equal(t, 1, res.NotFound)
	assert.Equal(t, 1, res.Failed)
	assert.Equal(t, []activities.StatusCount{{Status: "AUTHORIZED", Count: 2}, {Status: "CAPTURED", Count: 1},
		{Status: "DECLINED", Count: 1}}, res.ByStatus)
	assert.Equal(t, 9, obs.checked, "figures reach the metrics")
	assert.Equal(t, map[string]int{"AUTHORIZED": 2, "CAPTURED": 1, "DECLINED": 1}, obs.resolved)

	// A second run finds only what is still unknown, and changes nothing already resolved.
	provider.asked = nil
	sig.fail = map[string]bool{}
	again, err := rec.ReconcilePayments(ctx, activities.ReconcilePaymentsInput{BatchSize: 2})
	require.NoError(t, err)
	assert.Equal(t, 3, again.Checked, "the never-seen payment, the one whose signal failed, the unanswered 3-D Secure")
	assert.Equal(t, 1, again.Resolved)
	assert.ElementsMatch(t, []string{order.PaymentKey(ids[1]), order.PaymentKey(ids[5]), order.PaymentKey(ids[9])}, provider.asked)
}

func TestReconcilePayments_ProviderDown_RunFailsAndRowsStayUnknown(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	id, _ := insertOrder(t, pool, "PENDING_PAYMENT", "UNKNOWN", 0)
	obs := &jobsRecorder{}
	rec := &activities.PaymentReconciler{Pool: pool, Gateway: &fakeProvider{down: true},
		Signaler: &fakeSignaler{got: map[string]string{}}, Observer: obs}

	res, err := rec.ReconcilePayments(ctx, activities.ReconcilePaymentsInput{})
	require.Error(t, err)
	assert.Equal(t, 1, res.Failed)
	assert.Error(t, obs.err, "the failed run is counted as failed")
	var status string
	require.NoError(t, pool.QueryRow(ctx, `SELECT status FROM payments WHERE order_id = $1`, id).Scan(&status))
	assert.Equal(t, "UNKNOWN", status)
}

// TestReconcilePayments_OrderWhoseWorkflowIsGone_Ended: support terminated an order's workflow
// while it waited for 3-D Secure; the reconciler ends the order: stock back, FAILED, payment voided.
func TestReconcilePayments_OrderWhoseWorkflowIsGone_Ended(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	id, wf := insertOrder(t, pool, "PENDING_PAYMENT", "REQUIRES_ACTION", time.Hour)
	provider := &fakeProvider{intents: map[string]payment.Intent{order.PaymentKey(id): {ID: "pi_1",
		Status: payment.StatusRequiresAction, AmountMinor: 1000, Currency: "TRY"}}}
	sig := &fakeSignaler{got: map[string]string{}, fail: map[string]bool{}, gone: map[string]bool{wf: true}}
	rec := &activities.PaymentReconciler{Pool: pool, Gateway: provider, Signaler: sig}

	res, err := rec.ReconcilePayments(ctx, activities.ReconcilePaymentsInput{})
	require.NoError(t, err)
	assert.Equal(t, 1, res.Orphaned)
	var status, code, pay string
	require.NoError(t, pool.QueryRow(ctx, `SELECT o.status, o.failure_code, p.status FROM orders o JOIN payments p
		ON p.order_id = o.id WHERE o.id = $1`, id).Scan(&status, &code, &pay))
	assert.Equal(t, "FAILED", status)
	assert.Equal(t, string(problem.Orphaned), code)
	assert.Equal(t, "VOIDED", pay)
	assert.Equal(t, payment.StatusVoided, provider.intents[order.PaymentKey(id)].Status, "nothing left authorized")
	assert.Empty(t, sig.got, "no workflow to tell")

	again, err := rec.ReconcilePayments(ctx, activities.ReconcilePaymentsInput{})
	require.NoError(t, err)
	assert.Zero(t, again.Checked, "a closed order is not looked at again")
}

func TestReconcilePayments_OpenOrderPastItsHold_EndedOnlyWhenItsWorkflowIsGone(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	// Paid at once, then its workflow was terminated while a step retried: AUTHORIZED, no hold
	// child, its hold three minutes past.
	gone, goneWF := insertOrder(t, pool, "PENDING_PAYMENT", "AUTHORIZED", time.Hour)
	// The same, but its workflow still runs (a step retrying): left to it.
	alive, _ := insertOrder(t, pool, "PENDING_PAYMENT", "AUTHORIZED", time.Hour)
	// Within its hold: not looked at.
	fresh, freshWF := insertOrder(t, pool, "PENDING_PAYMENT", "AUTHORIZED", time.Hour)
	_, err := pool.Exec(ctx, `UPDATE orders SET hold_expires_at = now() - interval '3 minutes' WHERE id = ANY($1)`,
		[]int64{gone, alive})
	require.NoError(t, err)
	// Its workflow stopped between confirm and capture: one unit already confirmed (sold).
	for _, q := range []string{
		`INSERT INTO warehouses (id, code, name, city, lat, lon) VALUES (1, 'IST', 'Istanbul', 'Istanbul', 41, 29)`,
		`INSERT INTO sellers (id, name) VALUES (42, 'Seller 42')`,
		`INSERT INTO skus (id, seller_id, code, title, price_minor, currency, max_per_order) VALUES (77, 42, 'S-77', 'Radio', 1000, 'TRY', 5)`,
		`INSERT INTO inventory (sku_id, warehouse_id, on_hand, reserved) VALUES (77, 1, 9, 0)`,
	} {
		_, err = pool.Exec(ctx, q)
		require.NoError(t, err)
	}
	_, err = pool.Exec(ctx, `INSERT INTO stock_reservations (order_id, sku_id, warehouse_id, quantity, status, expires_at)
		VALUES ($1, 77, 1, 1, 'CONFIRMED', now() - interval '3 minutes')`, gone)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE orders SET hold_expires_at = now() + interval '10 minutes' WHERE id = $1`, fresh)
	require.NoError(t, err)
	provider := &fakeProvider{intents: map[string]payment.Intent{}}
	for _, id := range []int64{gone, alive, fresh} {
		provider.intents[order.PaymentKey(id)] = payment.Intent{ID: fmt.Sprint("pi_", id),
			Status: payment.StatusAuthorized, AmountMinor: 1000, Currency: "TRY"}
	}
	sig := &fakeSignaler{got: map[string]string{}, fail: map[string]bool{}, gone: map[string]bool{goneWF: true, freshWF: true}}
	rec := &activities.PaymentReconciler{Pool: pool, Gateway: provider, Signaler: sig}

	res, err := rec.ReconcilePayments(ctx, activities.ReconcilePaymentsInput{})
	require.NoError(t, err)
	assert.Equal(t, 2, res.Checked, "the two past their hold")
	assert.Equal(t, 1, res.Orphaned)
	status := func(id int64) (st, pay string) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT o.status, p.status FROM orders o JOIN payments p ON p.order_id = o.id
			WHERE o.id = $1`, id).Scan(&st, &pay))
		return st, pay
	}
	st, pay := status(gone)
	assert.Equal(t, "FAILED", st)
	assert.Equal(t, "VOIDED", pay)
	var onHand, reserved int
	var resv string
	require.NoError(t, pool.QueryRow(ctx, `SELECT i.on_hand, i.reserved, r.status FROM inventory i
		JOIN stock_reservations r ON r.sku_id = i.sku_id AND r.warehouse_id = i.warehouse_id WHERE r.order_id = $1`,
		gone).Scan(&onHand, &reserved, &resv))
	assert.Equal(t, "RELEASED", resv, "the stock it had confirmed goes back on the shelf")
	assert.Equal(t, 10, onHand)
	assert.Zero(t, reserved)
	assert.Equal(t, payment.StatusVoided, provider.intents[order.PaymentKey(gone)].Status, "nothing left authorized")
	st, pay = status(alive)
	assert.Equal(t, "PENDING_PAYMENT", st)
	assert.Equal(t, "AUTHORIZED", pay)
	st, _ = status(fresh)
	assert.Equal(t, "PENDING_PAYMENT", st, "within its hold: its workflow is not even asked about")
	assert.NotContains(t, provider.asked, order.PaymentKey(alive), "a running order's payment is its own business")
	assert.Empty(t, sig.got)
}

func TestReconcilePayments_OrderConfirmedByItsWorkflowMeanwhile_LeftAlone(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	// Read open and past its hold (a capture that retried through an outage); its workflow then
	// confirms it and closes before the reconciler asks whether it runs.
	id, wf := insertOrder(t, pool, "PENDING_PAYMENT", "AUTHORIZED", time.Hour)
	_, err := pool.Exec(ctx, `UPDATE orders SET hold_expires_at = now() - interval '3 minutes' WHERE id = $1`, id)
	require.NoError(t, err)
	provider := &fakeProvider{intents: map[string]payment.Intent{order.PaymentKey(id): {ID: "pi_1",
		Status: payment.StatusCaptured, AmountMinor: 1000, Currency: "TRY"}}}
	sig := &fakeSignaler{got: map[string]string{}, fail: map[string]bool{}, gone: map[string]bool{wf: true}}
	sig.beforeAnswer = func(string) {
		_, err := pool.Exec(ctx, `UPDATE orders SET status = 'CONFIRMED' WHERE id = $1`, id)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `UPDATE payments SET status = 'CAPTURED' WHERE order_id = $1`, id)
		require.NoError(t, err)
	}
	rec := &activities.PaymentReconciler{Pool: pool, Gateway: provider, Signaler: sig}

	res, err := rec.ReconcilePayments(ctx, activities.ReconcilePaymentsInput{})
	require.NoError(t, err)
	assert.Zero(t, res.Orphaned)
	var status, pay string
	require.NoError(t, pool.QueryRow(ctx, `SELECT o.status, p.status FROM orders o JOIN payments p ON p.order_id = o.id
		WHERE o.id = $1`, id).Scan(&status, &pay))
	assert.Equal(t, "CONFIRMED", status)
	assert.Equal(t, "CAPTURED", pay)
	assert.Equal(t, payment.StatusCaptured, provider.intents[order.PaymentKey(id)].Status, "a confirmed order's money is kept")
}

func TestReconcilePayments_OrphanEndedButNotYetReversed_ReversedNextRun(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	// An earlier run ended the order and stopped before reversing its payment.
	id, _ := insertOrder(t, pool, "FAILED", "AUTHORIZED", time.Hour)
	_, err := pool.Exec(ctx, `UPDATE orders SET failure_code = $2 WHERE id = $1`, id, string(problem.Orphaned))
	require.NoError(t, err)
	// Another order failed for its own reasons (its workflow reversed what the provider held then),
	// and an authorization arrived afterwards: it is reversed as a late payment.
	other, _ := insertOrder(t, pool, "FAILED", "AUTHORIZED", time.Hour)
	provider := &fakeProvider{intents: map[string]payment.Intent{}}
	for _, o := range []int64{id, other} {
		provider.intents[order.PaymentKey(o)] = payment.Intent{ID: fmt.Sprint("pi_", o), Status: payment.StatusAuthorized,
			AmountMinor: 1000, Currency: "TRY"}
	}
	rec := &activities.PaymentReconciler{Pool: pool, Gateway: provider,
		Signaler: &fakeSignaler{got: map[string]string{}, fail: map[string]bool{}}}

	res, err := rec.ReconcilePayments(ctx, activities.ReconcilePaymentsInput{})
	require.NoError(t, err)
	assert.Equal(t, 1, res.Orphaned)
	assert.Equal(t, 1, res.Reversed)
	assert.Equal(t, payment.StatusVoided, provider.intents[order.PaymentKey(id)].Status)
	assert.Equal(t, payment.StatusVoided, provider.intents[order.PaymentKey(other)].Status, "late money reversed")

	again, err := rec.ReconcilePayments(ctx, activities.ReconcilePaymentsInput{})
	require.NoError(t, err)
	assert.Zero(t, again.Checked, "reversed: not looked at again")
}

func TestReconcilePayments_ClosedLongAgo_NotLookedAt(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	id, _ := insertOrder(t, pool, "FAILED", "UNKNOWN", 0)
	_, err := pool.Exec(ctx, `UPDATE orders SET updated_at = now() - interval '2 days' WHERE id = $1`, id)
	require.NoError(t, err)
	provider := &fakeProvider{intents: map[string]payment.Intent{}}
	rec := &activities.PaymentReconciler{Pool: pool, Gateway: provider,
		Signaler: &fakeSignaler{got: map[string]string{}, fail: map[string]bool{}}}
	res, err := rec.ReconcilePayments(ctx, activities.ReconcilePaymentsInput{})
	require.NoError(t, err)
	assert.Zero(t, res.Checked, "past the late window (a day)")
}

func TestReconcilePayments_ForgetsPaymentMethodTokensLeftAfterADay(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO payment_method_tokens (user_id, idempotency_key, request_hash, token, created_at)
		VALUES (7, 'old', 'h', 'tok_ok', now() - interval '25 hours'), (7, 'new', 'h', 'tok_ok', now())`)
	require.NoError(t, err)
	rec := &activities.PaymentReconciler{Pool: pool, Gateway: &fakeProvider{intents: map[string]payment.Intent{}},
		Signaler: &fakeSignaler{got: map[string]string{}, fail: map[string]bool{}}}
	res, err := rec.ReconcilePayments(ctx, activities.ReconcilePaymentsInput{})
	require.NoError(t, err)
	assert.Equal(t, 1, res.TokensForgotten)
	var left []string
	rows, err := pool.Query(ctx, `SELECT idempotency_key FROM payment_method_tokens ORDER BY 1`)
	require.NoError(t, err)
	for rows.Next() {
		var k string
		require.NoError(t, rows.Scan(&k))
		left = append(left, k)
	}
	require.NoError(t, rows.Err())
	assert.Equal(t, []string{"new"}, left, "a token younger than a day is still needed by its order")
}

// TestAuthorize_RepeatedAfterItsAnswerWasLost_ProviderAnswersWithoutTheToken: the provider
// answered and the answer was recorded (so the card token is forgotten), but the worker died before
// the order heard it. The repeated step asks the provider for the intent instead of authorizing.
func TestAuthorize_RepeatedAfterItsAnswerWasLost_ProviderAnswersWithoutTheToken(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	id, _ := insertOrder(t, pool, "PENDING_PAYMENT", "AUTHORIZED", 0)
	provider := &fakeProvider{intents: map[string]payment.Intent{order.PaymentKey(id): {ID: "pi_1",
		IdempotencyKey: order.PaymentKey(id), OrderID: id, Status: payment.StatusAuthorized, AmountMinor: 1000, Currency: "TRY"}}}
	pays := &activities.Payments{Pool: pool, Gateway: provider}
	res, err := pays.Authorize(ctx, activities.AuthorizeInput{OrderID: id, AmountMinor: 1000, Currency: "TRY"})
	require.NoError(t, err)
	assert.Equal(t, activities.PaymentResult{Status: "AUTHORIZED", IntentID: "pi_1"}, res)

	other, _ := insertOrder(t, pool, "PENDING_PAYMENT", "PENDING", 0)
	_, err = pays.Authorize(ctx, activities.AuthorizeInput{OrderID: other, AmountMinor: 1000, Currency: "TRY"})
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	assert.Equal(t, string(problem.PaymentMethodGone), appErr.Type(), "no token and no intent: nothing to authorize with")
}

// TestReconcilePayments_ClosedOrderWhosePaymentTheProviderNeverSaw_SettledOnce: orders that
// failed or were cancelled before their authorization reached the provider — ended as ORPHANED
// (their workflow terminated before it authorized), refused out of stock, cancelled — so their
// payment rows still say PENDING (or UNKNOWN). A run finds nothing held under the key of each one
// ended long ago and settles its payment: the next run leaves it alone. Those ended a moment ago
// are asked about again, since a call of their order may still reach the provider, and are
// settled once that time (DefaultSettleAfter) is over.
func TestReconcilePayments_ClosedOrderWhosePaymentTheProviderNeverSaw_SettledOnce(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	sim := paysim.New(pool, paysim.Options{Log: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	t.Cleanup(sim.Close)
	kinds := []struct{ status, payment, code string }{
		{"FAILED", "PENDING", string(problem.Orphaned)},
		{"FAILED", "PENDING", "OUT_OF_STOCK"},
		{"CANCELLED", "UNKNOWN", ""},
	}
	var long, recent []int64
	for _, k := range kinds {
		for _, ended := range []*[]int64{&long, &recent} {
			id, _ := insertOrder(t, pool, k.status, k.payment, time.Hour)
			_, err := pool.Exec(ctx, `UPDATE orders SET failure_code = NULLIF($2, '') WHERE id = $1`, id, k.code)
			require.NoError(t, err)
			*ended = append(*ended, id)
		}
	}
	_, err := pool.Exec(ctx, `UPDATE orders SET updated_at = now() - interval '30 minutes' WHERE id = ANY($1)`, long)
	require.NoError(t, err)
	rec := &activities.PaymentReconciler{Pool: pool, Gateway: sim}
	settled := func(id int64) bool {
		var at *time.Time
		require.NoError(t, pool.QueryRow(ctx, `SELECT nothing_held_at FROM payments WHERE order_id = $1`, id).Scan(&at))
		return at != nil
	}

	first, err := rec.ReconcilePayments(ctx, activities.ReconcilePaymentsInput{})
	require.NoError(t, err)
	assert.Equal(t, 6, first.Checked, "%+v", first)
	assert.Equal(t, 6, first.NotFound)
	assert.Equal(t, 3, first.NothingHeld)
	assert.Zero(t, first.Orphaned+first.Reversed, "nothing to reverse")
	for i := range kinds {
		assert.True(t, settled(long[i]), kinds[i])
		assert.False(t, settled(recent[i]), "%v ended a moment ago: a call of the order may still reach the provider", kinds[i])
	}

	second, err := rec.ReconcilePayments(ctx, activities.ReconcilePaymentsInput{})
	require.NoError(t, err)
	assert.Equal(t, 3, second.Checked, "settled: only those ended a moment ago are asked about again: %+v", second)
	assert.Zero(t, second.NothingHeld)

	_, err = pool.Exec(ctx, `UPDATE orders SET updated_at = now() - $2::interval WHERE id = ANY($1)`, recent,
		activities.DefaultSettleAfter+time.Minute)
	require.NoError(t, err)
	third, err := rec.ReconcilePayments(ctx, activities.ReconcilePaymentsInput{})
	require.NoError(t, err)
	assert.Equal(t, 3, third.NothingHeld, "%+v", third)
	last, err := rec.ReconcilePayments(ctx, activities.ReconcilePaymentsInput{})
	require.NoError(t, err)
	assert.Zero(t, last.Checked, "all settled: off the list")
	var pending int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM payments WHERE status IN ('PENDING', 'UNKNOWN')`).Scan(&pending))
	assert.Equal(t, int64(6), pending, "each row keeps what the provider last said")

	// The provider answers one of them after all (its webhook records the authorization): it is
	// back on the list and reversed.
	_, err = sim.Authorize(ctx, payment.AuthorizeRequest{Ref: payment.Ref{Key: order.PaymentKey(long[1]), OrderID: long[1]},
		AmountMinor: 1000, Currency: "TRY", PaymentMethodToken: "tok_ok"})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE payments SET status = 'AUTHORIZED' WHERE order_id = $1`, long[1])
	require.NoError(t, err)
	late, err := rec.ReconcilePayments(ctx, activities.ReconcilePaymentsInput{})
	require.NoError(t, err)
	assert.Equal(t, 1, late.Reversed, "%+v", late)
	i, err := sim.Lookup(ctx, payment.Ref{Key: order.PaymentKey(long[1]), OrderID: long[1]})
	require.NoError(t, err)
	assert.Equal(t, payment.StatusVoided, i.Status)
}
