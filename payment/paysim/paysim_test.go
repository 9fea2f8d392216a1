package paysim_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/payment"
	"github.com/marketplace/checkout/payment/paysim"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const baseURL = "https://shop.example"

var secret = []byte("whsec-test-secret-0123456789")

type fixture struct {
	t    *testing.T
	ctx  context.Context
	pool *pgxpool.Pool
	sim  *paysim.Sim
}

func newFixture(t *testing.T, opts paysim.Options) *fixture {
	t.Helper()
	pool := testenv.Pool(t)
	if opts.PublicBaseURL == "" {
		opts.PublicBaseURL = baseURL
	}
	if opts.WebhookSecret == nil {
		opts.WebhookSecret = secret
	}
	sim := paysim.New(pool, opts)
	t.Cleanup(sim.Close) // before the pool closes
	return &fixture{t: t, ctx: context.Background(), pool: pool, sim: sim}
}

var keys atomic.Int64

// authorize authorizes a fresh key of 1249.90 TRY with token.
func (f *fixture) authorize(token string) payment.Intent {
	f.t.Helper()
	in, err := f.sim.Authorize(f.ctx, request(token))
	require.NoError(f.t, err)
	return in
}

func request(token string) payment.AuthorizeRequest {
	n := keys.Add(1)
	return payment.AuthorizeRequest{Ref: payment.Ref{Key: fmt.Sprintf("order-%d-pay", n), OrderID: 1000 + n},
		AmountMinor: 124990, Currency: "TRY", PaymentMethodToken: token}
}

// ref names an intent as the order that recorded its id does.
func ref(in payment.Intent) payment.Ref {
	return payment.Ref{Key: in.IdempotencyKey, OrderID: in.OrderID, IntentID: in.ID}
}

func (f *fixture) count(sql string, args ...any) int {
	f.t.Helper()
	var n int
	require.NoError(f.t, f.pool.QueryRow(f.ctx, sql, args...).Scan(&n))
	return n
}

func (f *fixture) status(key string) payment.Status {
	f.t.Helper()
	var st string
	require.NoError(f.t, f.pool.QueryRow(f.ctx, `SELECT status FROM paysim.intents WHERE idempotency_key = $1`, key).Scan(&st))
	return payment.Status(st)
}

func TestAuthorizeByToken(t *testing.T) {
	f := newFixture(t, paysim.Options{})
	tests := []struct {
		token       string
		status      payment.Status
		declineCode string
		redirect    bool
	}{
		{token: paysim.TokenOK, status: payment.StatusAuthorized},
		{token: paysim.Token3DS, status: payment.StatusRequiresAction, redirect: true},
		{token: paysim.TokenDecline, status: payment.StatusDeclined, declineCode: "card_declined"},
		{token: "tok_unknown", status: payment.StatusDeclined, declineCode: "invalid_token"},
		{token: "", status: payment.StatusDeclined, declineCode: "invalid_token"},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("token %q", tc.token), func(t *testing.T) {
			req := request(tc.token)
			in, err := f.sim.Authorize(f.ctx, req)
			require.NoError(t, err, "a decline is an intent, not an error")
			assert.Regexp(t, `^pi_[0-9a-f]{24}$`, in.ID)
			assert.Equal(t, tc.status, in.Status)
			assert.Equal(t, tc.declineCode, in.DeclineCode)
			assert.Equal(t, req.Key, in.IdempotencyKey)
			assert.Equal(t, req.OrderID, in.OrderID)
			assert.Equal(t, int64(124990), in.AmountMinor)
			assert.Equal(t, "TRY", in.Currency)
			assert.Zero(t, in.CapturedMinor)
			if tc.redirect {
				assert.Equal(t, baseURL+"/paysim/3ds/"+in.ID, in.RedirectURL)
			} else {
				assert.Empty(t, in.RedirectURL)
			}
			looked, err := f.sim.Lookup(f.ctx, req.Ref)
			require.NoError(t, err)
			assert.Equal(t, in, looked)
		})
	}
}

func TestAuthorizeSameKeyAgainReturnsTheSameIntent(t *testing.T) {
	f := newFixture(t, paysim.Options{})
	req := request(paysim.TokenOK)
	first, err := f.sim.Authorize(f.ctx, req)
	require.NoError(t, err)
	again, err := f.sim.Authorize(f.ctx, req)
	require.NoError(t, err)
	assert.Equal(t, first, again)
	assert.Equal(t, 1, f.count(`SELECT count(*) FROM paysim.intents`))
}

func TestAuthorizeSameKeyConcurrentlyMakesOneAuthorization(t *testing.T) {
	f := newFixture(t, paysim.Options{})
	req := request(paysim.Token3DS)
	ids := make([]string, 10)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			in, err := f.sim.Authorize(f.ctx, req)
			assert.NoError(t, err)
			ids[i] = in.ID
		})
	}
	wg.Wait()
	for _, id := range ids {
		assert.Equal(t, ids[0], id)
	}
	assert.Equal(t, 1, f.count(`SELECT count(*) FROM paysim.intents`))
}

func TestAuthorizeSameKeyWithOtherParametersIsKeyReused(t *testing.T) {
	f := newFixture(t, paysim.Options{})
	tests := []struct {
		name   string
		change func(*payment.AuthorizeRequest)
	}{
		{"different amount", func(r *payment.AuthorizeRequest) { r.AmountMinor++ }},
		{"different token", func(r *payment.AuthorizeRequest) { r.PaymentMethodToken = paysim.Token3DS }},
		{"different currency", func(r *payment.AuthorizeRequest) { r.Currency = "EUR" }},
		{"different order", func(r *payment.AuthorizeRequest) { r.OrderID++ }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := request(paysim.TokenOK)
			first, err := f.sim.Authorize(f.ctx, req)
			require.NoError(t, err)
			tc.change(&req)
			_, err = f.sim.Authorize(f.ctx, req)
			assert.ErrorIs(t, err, payment.ErrKeyReused)
			still, err := f.sim.Lookup(f.ctx, req.Ref)
			require.NoError(t, err)
			assert.Equal(t, first, still)
		})
	}
}

func TestAuthorizeRejectsMalformedRequests(t *testing.T) {
	f := newFixture(t, paysim.Options{})
	tests := []struct {
		name   string
		change func(*payment.AuthorizeRequest)
	}{
		{"empty key", func(r *payment.AuthorizeRequest) { r.Key = "" }},
		{"zero amount", func(r *payment.AuthorizeRequest) { r.AmountMinor = 0 }},
		{"negative amount", func(r *payment.AuthorizeRequest) { r.AmountMinor = -1 }},
		{"lower-case currency", func(r *payment.AuthorizeRequest) { r.Currency = "try" }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := request(paysim.TokenOK)
			tc.change(&req)
			_, err := f.sim.Authorize(f.ctx, req)
			assert.ErrorIs(t, err, payment.ErrInvalidRequest)
		})
	}
	assert.Zero(t, f.count(`SELECT count(*) FROM paysim.intents`))
}

func TestTimeoutTokenAuthorizesButTheCallerOnlySeesTimeout(t *testing.T) {
	f := newFixture(t, paysim.Options{})
	req := request(paysim.TokenTimeout)
	in, err := f.sim.Authorize(f.ctx, req)
	require.ErrorIs(t, err, payment.ErrTimeout)
	assert.Zero(t, in, "an unknown outcome carries no intent")

	looked, err := f.sim.Lookup(f.ctx, req.Ref)
	require.NoError(t, err)
	assert.Equal(t, payment.StatusAuthorized, looked.Status)

	again, err := f.sim.Authorize(f.ctx, req)
	require.NoError(t, err, "asking again with the key answers")
	assert.Equal(t, looked, again)
	assert.Equal(t, 1, f.count(`SELECT count(*) FROM paysim.intents`))
}

func TestLookupOfAnUnknownKeyIsNotFound(t *testing.T) {
	f := newFixture(t, paysim.Options{})
	_, err := f.sim.Lookup(f.ctx, payment.Ref{Key: "never-seen"})
	assert.ErrorIs(t, err, payment.ErrNotFound)
}

func TestCaptureTwiceCapturesOnce(t *testing.T) {
	f := newFixture(t, paysim.Options{})
	in := f.authorize(paysim.TokenOK)
	first, err := f.sim.Capture(f.ctx, ref(in))
	require.NoError(t, err)
	again, err := f.sim.Capture(f.ctx, ref(in))
	require.NoError(t, err)
	assert.Equal(t, payment.StatusCaptured, again.Status)
	assert.Equal(t, in.AmountMinor, again.CapturedMinor, "not twice the amount")
	assert.Equal(t, first, again)
}

func TestRefundAfterCaptureGivesTheWholeCaptureBack(t *testing.T) {
	f := newFixture(t, paysim.Options{})
	in := f.authorize(paysim.TokenOK)
	_, err := f.sim.Capture(f.ctx, ref(in))
	require.NoError(t, err)
	refunded, err := f.sim.Refund(f.ctx, ref(in))
	require.NoError(t, err)
	assert.Equal(t, payment.StatusRefunded, refunded.Status)
	assert.Equal(t, in.AmountMinor, refunded.CapturedMinor)
	assert.Equal(t, in.AmountMinor, refunded.RefundedMinor)
	again, err := f.sim.Refund(f.ctx, ref(in))
	require.NoError(t, err)
	assert.Equal(t, refunded, again)
}

// TestStateMachine runs each operation from each state: where it leads, or the error.
func TestRefundPart_SameKeyTwice_MovesMoneyOnce(t *testing.T) {
	f := newFixture(t, paysim.Options{})
	in := f.authorize(paysim.TokenOK)
	_, err := f.sim.Capture(f.ctx, ref(in))
	require.NoError(t, err)

	refund := payment.PartialRefund{IdempotencyKey: in.IdempotencyKey + "-line-1", AmountMinor: 24990}
	first, err := f.sim.RefundPart(f.ctx, ref(in), refund)
	require.NoError(t, err)
	again, err := f.sim.RefundPart(f.ctx, ref(in), refund)
	require.NoError(t, err)

	assert.Equal(t, int64(24990), first.RefundedMinor)
	assert.Equal(t, int64(24990), again.RefundedMinor, "a repeat of the refund key gives nothing more back")
	assert.Equal(t, payment.StatusCaptured, again.Status, "part of the capture is still kept")
	_, err = f.sim.RefundPart(f.ctx, ref(in), payment.PartialRefund{IdempotencyKey: refund.IdempotencyKey, AmountMinor: 100})
	assert.ErrorIs(t, err, payment.ErrKeyReused)
}

func TestRefundPart_ConcurrentSameKey_OneRefund(t *testing.T) {
	f := newFixture(t, paysim.Options{})
	in := f.authorize(paysim.TokenOK)
	_, err := f.sim.Capture(f.ctx, ref(in))
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := f.sim.RefundPart(f.ctx, ref(in), payment.PartialRefund{IdempotencyKey: "r-concurrent", AmountMinor: 1000})
			assert.NoError(t, err)
		}()
	}
	wg.Wait()
	after, err := f.sim.Lookup(f.ctx, ref(in))
	require.NoError(t, err)
	assert.Equal(t, int64(1000), after.RefundedMinor)
	assert.Equal(t, 1, f.count(`SELECT count(*) FROM paysim.refunds WHERE refund_key = 'r-concurrent'`))
}

func TestRefundPart_ReachingTheCapture_Refunded_BeyondIt_Refused(t *testing.T) {
	f := newFixture(t, paysim.Options{})
	in := f.authorize(paysim.TokenOK)
	_, err := f.sim.Capture(f.ctx, ref(in))
	require.NoError(t, err)

	_, err = f.sim.RefundPart(f.ctx, ref(in), payment.PartialRefund{IdempotencyKey: "a", AmountMinor: 100000})
	require.NoError(t, err)
	_, err = f.sim.RefundPart(f.ctx, ref(in), payment.PartialRefund{IdempotencyKey: "b", AmountMinor: 25000})
	assert.ErrorIs(t, err, payment.ErrInvalidRequest, "more than is left of the capture")
	last, err := f.sim.RefundPart(f.ctx, ref(in), payment.PartialRefund{IdempotencyKey: "c", AmountMinor: 24990})
	require.NoError(t, err)
	assert.Equal(t, payment.StatusRefunded, last.Status)
	assert.Equal(t, last.CapturedMinor, last.RefundedMinor)
	_, err = f.sim.RefundPart(f.ctx, ref(in), payment.PartialRefund{IdempotencyKey: "d", AmountMinor: 1})
	assert.ErrorIs(t, err, payment.ErrInvalidState, "nothing captured is left")
	assert.Equal(t, 2, f.count(`SELECT count(*) FROM paysim.refunds WHERE intent_id = $1`, in.ID), "refused refunds leave no row")
}

func TestRefundPart_NotCaptured_Refused(t *testing.T) {
	f := newFixture(t, paysim.Options{})
	in := f.authorize(paysim.TokenOK)
	_, err := f.sim.RefundPart(f.ctx, ref(in), payment.PartialRefund{IdempotencyKey: "x", AmountMinor: 100})
	assert.ErrorIs(t, err, payment.ErrInvalidState)
	_, err = f.sim.RefundPart(f.ctx, payment.Ref{Key: "no-such-intent"}, payment.PartialRefund{IdempotencyKey: "y", AmountMinor: 100})
	assert.ErrorIs(t, err, payment.ErrNotFound)
}

func TestStateMachine(t *testing.T) {
	f := newFixture(t, paysim.Options{})
	captured := func() payment.Intent {
		in := f.authorize(paysim.TokenOK)
		in, err := f.sim.Capture(f.ctx, ref(in))
		require.NoError(t, err)
		return in
	}
	// Ways to bring a fresh intent into each state.
	into := map[payment.Status]func() payment.Intent{
		payment.StatusRequiresAction: func() payment.Intent { return f.authorize(paysim.Token3DS) },
		payment.StatusAuthorized:     func() payment.Intent { return f.authorize(paysim.TokenOK) },
		payment.StatusDeclined:       func() payment.Intent { return f.authorize(paysim.TokenDecline) },
		payment.StatusCaptured:       captured,
		payment.StatusVoided: func() payment.Intent {
			in := f.authorize(paysim.TokenOK)
			in, err := f.sim.Void(f.ctx, ref(in))
			require.NoError(t, err)
			return in
		},
		payment.StatusRefunded: func() payment.Intent {
			in, err := f.sim.Refund(f.ctx, ref(captured()))
			require.NoError(t, err)
			return in
		},
	}
	ops := map[string]func(context.Context, payment.Ref) (payment.Intent, error){
		"capture": f.sim.Capture, "void": f.sim.Void, "refund": f.sim.Refund,
	}
	tests := []struct {
		from payment.Status
		op   string
		to   payment.Status // the status after the call
		err  error
	}{
		{payment.StatusAuthorized, "capture", payment.StatusCaptured, nil},
		{payment.StatusCaptured, "capture", payment.StatusCaptured, nil},
		{payment.StatusRequiresAction, "capture", payment.StatusRequiresAction, payment.ErrInvalidState},
		{payment.StatusVoided, "capture", payment.StatusVoided, payment.ErrInvalidState},
		{payment.StatusDeclined, "capture", payment.StatusDeclined, payment.ErrInvalidState},
		{payment.StatusRefunded, "capture", payment.StatusRefunded, payment.ErrInvalidState},

		{payment.StatusRequiresAction, "void", payment.StatusVoided, nil},
		{payment.StatusAuthorized, "void", payment.StatusVoided, nil},
		{payment.StatusVoided, "void", payment.StatusVoided, nil},
		{payment.StatusDeclined, "void", payment.StatusDeclined, nil},
		{payment.StatusCaptured, "void", payment.StatusCaptured, payment.ErrInvalidState},
		{payment.StatusRefunded, "void", payment.StatusRefunded, payment.ErrInvalidState},

		{payment.StatusCaptured, "refund", payment.StatusRefunded, nil},
		{payment.StatusRefunded, "refund", payment.StatusRefunded, nil},
		{payment.StatusAuthorized, "refund", payment.StatusAuthorized, payment.ErrInvalidState},
		{payment.StatusRequiresAction, "refund", payment.StatusRequiresAction, payment.ErrInvalidState},
		{payment.StatusVoided, "refund", payment.StatusVoided, payment.ErrInvalidState},
		{payment.StatusDeclined, "refund", payment.StatusDeclined, payment.ErrInvalidState},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s of %s", tc.op, tc.from), func(t *testing.T) {
			in := into[tc.from]()
			require.Equal(t, tc.from, in.Status)
			got, err := ops[tc.op](f.ctx, ref(in))
			if tc.err != nil {
				assert.ErrorIs(t, err, tc.err)
			} else {
				require.NoError(t, err)
				assert.Equal(t, tc.to, got.Status)
			}
			assert.Equal(t, tc.to, f.status(in.IdempotencyKey))
		})
	}
	for name, op := range ops {
		t.Run(name+" of an unknown key", func(t *testing.T) {
			_, err := op(f.ctx, payment.Ref{Key: "never-seen"})
			assert.ErrorIs(t, err, payment.ErrNotFound)
		})
	}
}

// receiver is the merchant's webhook endpoint in tests: it checks each signature and records
// the events; answer decides the status code of the n-th request (from 1).
type receiver struct {
	srv    *httptest.Server
	mu     sync.Mutex
	events []payment.WebhookEvent
	calls  atomic.Int32
	bad    atomic.Int32
}

func newReceiver(t *testing.T, answer func(n int32) int) *receiver {
	t.Helper()
	r := &receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		n := r.calls.Add(1)
		body, _ := io.ReadAll(req.Body)
		if req.Header.Get("Content-Type") != "application/json" ||
			payment.Verify(secret, body, req.Header.Get(payment.SignatureHeader), time.Now(), 0) != nil {
			r.bad.Add(1)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var ev payment.WebhookEvent
		if err := json.Unmarshal(body, &ev); err != nil {
			r.bad.Add(1)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		code := http.StatusOK
		if answer != nil {
			code = answer(n)
		}
		if code/100 == 2 {
			r.mu.Lock()
			r.events = append(r.events, ev)
			r.mu.Unlock()
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) received() []payment.WebhookEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]payment.WebhookEvent(nil), r.events...)
}

func TestVoidRacingApproveHasOneWinner(t *testing.T) {
	f := newFixture(t, paysim.Options{})
	for round := range 5 {
		in := f.authorize(paysim.Token3DS)
		var approved, refused, voidErrs atomic.Int32
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Go(func() {
				<-start
				if i%2 == 0 {
					if _, err := f.sim.Void(f.ctx, ref(in)); err != nil {
						voidErrs.Add(1)
					}
					return
				}
				_, err := f.sim.Approve(f.ctx, in.ID)
				switch {
				case err == nil:
					approved.Add(1)
				case assert.ErrorIs(t, err, payment.ErrInvalidState):
					refused.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		// Either the void won (no approval at all) or one approval won and the voids then
		// released that authorization. Never two approvals, never a kept authorization.
		t.Logf("round %d: %d approval(s) won", round, approved.Load())
		assert.LessOrEqual(t, approved.Load(), int32(1), "round %d", round)
		assert.Equal(t, int32(10), approved.Load()+refused.Load())
		assert.Zero(t, voidErrs.Load())
		assert.Equal(t, payment.StatusVoided, f.status(in.IdempotencyKey))
		assert.Equal(t, int(approved.Load()), f.count(`SELECT count(*) FROM paysim.webhook_events WHERE intent_id = $1`, in.ID),
			"a webhook only for a winning approval")
	}
}

func TestApproveRacingDeclineHasOneWinner(t *testing.T) {
	f := newFixture(t, paysim.Options{})
	in := f.authorize(paysim.Token3DS)
	var won atomic.Int32
	var winner atomic.Value
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			<-start
			answer, status := f.sim.Approve, payment.StatusAuthorized
			if i%2 == 0 {
				answer, status = f.sim.Decline, payment.StatusDeclined
			}
			if _, err := answer(f.ctx, in.ID); err == nil {
				won.Add(1)
				winner.Store(status)
			} else {
				assert.ErrorIs(t, err, payment.ErrInvalidState)
			}
		})
	}
	close(start)
	wg.Wait()
	require.Equal(t, int32(1), won.Load())
	assert.Equal(t, winner.Load(), f.status(in.IdempotencyKey))
	assert.Equal(t, 1, f.count(`SELECT count(*) FROM paysim.webhook_events WHERE intent_id = $1`, in.ID))
}

func TestProviderDownRefusesEveryCallAndChangesNothing(t *testing.T) {
	f := newFixture(t, paysim.Options{})
	authorized := f.authorize(paysim.TokenOK)
	pending := f.authorize(paysim.Token3DS)
	snapshot := func() string {
		var s string
		require.NoError(t, f.pool.QueryRow(f.ctx,
			`SELECT coalesce(string_agg(id || ':' || status || ':' || captured_minor, ',' ORDER BY id), '') FROM paysim.intents`).Scan(&s))
		return s
	}
	before := snapshot()

	downUntil := time.Now().Add(2 * time.Second)
	require.NoError(t, f.sim.SetFaults(f.ctx, paysim.Faults{DownUntil: downUntil}))
	stored, err := f.sim.Faults(f.ctx)
	require.NoError(t, err)
	assert.WithinDuration(t, downUntil, stored.DownUntil, time.Millisecond)

	calls := map[string]func() error{
		"authorize": func() error { _, err := f.sim.Authorize(f.ctx, request(paysim.TokenOK)); return err },
		"capture":   func() error { _, err := f.sim.Capture(f.ctx, ref(authorized)); return err },
		"void":      func() error { _, err := f.sim.Void(f.ctx, ref(pending)); return err },
		"refund":    func() error { _, err := f.sim.Refund(f.ctx, ref(authorized)); return err },
		"lookup":    func() error { _, err := f.sim.Lookup(f.ctx, ref(authorized)); return err },
	}
	for name, call := range calls {
		assert.ErrorIs(t, call(), payment.ErrUnavailable, name)
	}
	assert.Equal(t, before, snapshot(), "nothing changed while down")

	time.Sleep(time.Until(downUntil) + 10*time.Millisecond)
	captured, err := f.sim.Capture(f.ctx, ref(authorized))
	require.NoError(t, err, "up again once down_until has passed")
	assert.Equal(t, payment.StatusCaptured, captured.Status)
	_, err = f.sim.Authorize(f.ctx, request(paysim.TokenOK))
	assert.NoError(t, err)
}

// TestMoneyDown_LookupsAnswerMovesRefused: while the provider cannot move money it still tells
// what an intent is, and every call that would move money is refused and moves nothing.
func TestMoneyDown_LookupsAnswerMovesRefused(t *testing.T) {
	f := newFixture(t, paysim.Options{})
	authorized := f.authorize(paysim.TokenOK)
	captured := f.authorize(paysim.TokenOK)
	_, err := f.sim.Capture(f.ctx, ref(captured))
	require.NoError(t, err)
	require.NoError(t, f.sim.SetFaults(f.ctx, paysim.Faults{MoneyDownUntil: time.Now().Add(time.Hour)}))
	read, err := f.sim.Faults(f.ctx)
	require.NoError(t, err)
	assert.False(t, read.MoneyDownUntil.IsZero(), "the switch reads back")
	assert.True(t, read.DownUntil.IsZero())

	got, err := f.sim.Lookup(f.ctx, ref(authorized))
	require.NoError(t, err, "lookups still answer")
	assert.Equal(t, payment.StatusAuthorized, got.Status)
	intents := f.count(`SELECT count(*) FROM paysim.intents`)
	_, err = f.sim.Authorize(f.ctx, request(paysim.TokenOK))
	assert.ErrorIs(t, err, payment.ErrUnavailable)
	_, err = f.sim.Capture(f.ctx, ref(authorized))
	assert.ErrorIs(t, err, payment.ErrUnavailable)
	_, err = f.sim.Void(f.ctx, ref(authorized))
	assert.ErrorIs(t, err, payment.ErrUnavailable)
	_, err = f.sim.Refund(f.ctx, ref(captured))
	assert.ErrorIs(t, err, payment.ErrUnavailable)
	assert.Equal(t, intents, f.count(`SELECT count(*) FROM paysim.intents`), "no intent made")
	assert.Equal(t, payment.StatusAuthorized, f.status(authorized.IdempotencyKey), "nothing moved")
	assert.Equal(t, payment.StatusCaptured, f.status(captured.IdempotencyKey))

	require.NoError(t, f.sim.SetFaults(f.ctx, paysim.Faults{}))
	_, err = f.sim.Capture(f.ctx, ref(authorized))
	assert.NoError(t, err, "moves money again once cleared")
}

func TestFaultRowIsSharedBetweenProcesses(t *testing.T) {
	f := newFixture(t, paysim.Options{})
	other := paysim.New(f.pool, paysim.Options{}) // the worker's Sim, beside the API's
	key := ref(f.authorize(paysim.TokenOK))
	_, err := other.Lookup(f.ctx, key) // caches "no faults"
	require.NoError(t, err)

	require.NoError(t, f.sim.SetFaults(f.ctx, paysim.Faults{DownUntil: time.Now().Add(time.Hour)}))
	assert.Eventually(t, func() bool {
		_, err := other.Lookup(f.ctx, key)
		return err != nil
	}, 2*time.Second, 20*time.Millisecond, "the other process sees the switch after its cache expires")

	require.NoError(t, f.sim.SetFaults(f.ctx, paysim.Faults{}))
	assert.Eventually(t, func() bool {
		_, err := other.Lookup(f.ctx, key)
		return err == nil
	}, 2*time.Second, 20*time.Millisecond)
}

func TestInjectedFailureRateRefusesBeforeDoingAnything(t *testing.T) {
	var roll atomic.Value
	roll.Store(0.1)
	f := newFixture(t, paysim.Options{Rand: func() float64 { return roll.Load().(float64) }})
	require.NoError(t, f.sim.SetFaults(f.ctx, paysim.Faults{FailureRate: 0.5}))

	req := request(paysim.TokenOK)
	_, err := f.sim.Authorize(f.ctx, req)
	assert.ErrorIs(t, err, payment.ErrUnavailable)
	_, err = f.sim.Lookup(f.ctx, req.Ref)
	assert.ErrorIs(t, err, payment.ErrUnavailable)
	assert.Zero(t, f.count(`SELECT count(*) FROM paysim.intents`))

	roll.Store(0.9)
	_, err = f.sim.Authorize(f.ctx, req)
	assert.NoError(t, err)
}

func TestOptionsFailureRateIsTheDefaultTheRowOverrides(t *testing.T) {
	f := newFixture(t, paysim.Options{FailureRate: 1, Rand: func() float64 { return 0.5 }})
	_, err := f.sim.Authorize(f.ctx, request(paysim.TokenOK))
	assert.ErrorIs(t, err, payment.ErrUnavailable, "the process default applies")

	require.NoError(t, f.sim.SetFaults(f.ctx, paysim.Faults{FailureRate: 0.25}))
	_, err = f.sim.Authorize(f.ctx, request(paysim.TokenOK))
	assert.NoError(t, err, "the row overrides the default")
}

func TestInjectedLatencyDelaysCallsAndRespectsTheContext(t *testing.T) {
	f := newFixture(t, paysim.Options{})
	in := f.authorize(paysim.TokenOK)
	require.NoError(t, f.sim.SetFaults(f.ctx, paysim.Faults{Latency: 80 * time.Millisecond}))

	start := time.Now()
	_, err := f.sim.Lookup(f.ctx, ref(in))
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), 80*time.Millisecond)

	ctx, cancel := context.WithTimeout(f.ctx, 10*time.Millisecond)
	defer cancel()
	_, err = f.sim.Capture(ctx, ref(in))
	assert.ErrorIs(t, err, payment.ErrTimeout, "a caller whose deadline passes cannot know the outcome")
	assert.Equal(t, payment.StatusAuthorized, f.status(in.IdempotencyKey))
}

func TestSetFaultsRejectsNonsense(t *testing.T) {
	f := newFixture(t, paysim.Options{})
	for _, bad := range []paysim.Faults{{FailureRate: 1.5}, {FailureRate: -0.1}, {Latency: -time.Second}} {
		assert.Error(t, f.sim.SetFaults(f.ctx, bad))
	}
}
