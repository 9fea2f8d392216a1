package paysim_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/payment"
	"github.com/marketplace/checkout/payment/paysim"
)

// threeDS serves the simulator's routes the way the API does.
func threeDS(f *fixture) *echo.Echo {
	e := echo.New()
	f.sim.Routes(e)
	return e
}

func get(e *echo.Echo, path string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec
}

func post(e *echo.Echo, path, result string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(url.Values{"result": {result}}.Encode()))
	req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationForm)
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	return rec
}

func pathOf(t *testing.T, in payment.Intent) string {
	t.Helper()
	u, err := url.Parse(in.RedirectURL)
	require.NoError(t, err)
	return u.Path
}

func TestThreeDSPageShowsTheAmountAndBothButtons(t *testing.T) {
	f := newFixture(t, paysim.Options{})
	e := threeDS(f)
	in := f.authorize(paysim.Token3DS)

	rec := get(e, pathOf(t, in))
	require.Equal(t, http.StatusOK, rec.Code)
	assert.Contains(t, rec.Header().Get("Content-Type"), "text/html")
	body := rec.Body.String()
	assert.Contains(t, body, "1249.90 TRY")
	assert.Contains(t, body, `<form method="post">`)
	assert.Contains(t, body, `name="result" value="approve"`)
	assert.Contains(t, body, `name="result" value="decline"`)
	assert.Contains(t, body, ">Approve<")
	assert.Contains(t, body, ">Decline<")
	assert.NotContains(t, body, "http", "no external assets")
}

func TestThreeDSPageOfAnAnsweredIntentHasNoButtons(t *testing.T) {
	f := newFixture(t, paysim.Options{})
	e := threeDS(f)
	in := f.authorize(paysim.Token3DS)
	_, err := f.sim.Approve(f.ctx, in.ID)
	require.NoError(t, err)

	rec := get(e, pathOf(t, in))
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Contains(t, rec.Body.String(), "already approved")
	assert.NotContains(t, rec.Body.String(), "<form")
}

func TestThreeDSUnknownIntentIs404(t *testing.T) {
	f := newFixture(t, paysim.Options{})
	e := threeDS(f)
	assert.Equal(t, http.StatusNotFound, get(e, "/paysim/3ds/pi_000000000000000000000000").Code)
	assert.Equal(t, http.StatusNotFound, post(e, "/paysim/3ds/pi_000000000000000000000000", "approve").Code)
}

func TestThreeDSAnswerOtherThanApproveOrDeclineIs400(t *testing.T) {
	f := newFixture(t, paysim.Options{})
	e := threeDS(f)
	in := f.authorize(paysim.Token3DS)
	for _, result := range []string{"", "yes", "APPROVE"} {
		rec := post(e, pathOf(t, in), result)
		assert.Equal(t, http.StatusBadRequest, rec.Code, "result %q", result)
	}
	assert.Equal(t, payment.StatusRequiresAction, f.status(in.IdempotencyKey))
}

func TestThreeDSApproveAuthorizesAndSendsASignedWebhook(t *testing.T) {
	r := newReceiver(t, nil)
	f := newFixture(t, paysim.Options{WebhookURL: r.srv.URL})
	e := threeDS(f)
	in := f.authorize(paysim.Token3DS)

	rec := post(e, pathOf(t, in), "approve")
	require.Equal(t, http.StatusOK, rec.Code)
	assert.Contains(t, rec.Body.String(), "Payment approved — you can close this page")
	assert.Equal(t, payment.StatusAuthorized, f.status(in.IdempotencyKey))

	require.Eventually(t, func() bool { return len(r.received()) == 1 }, 5*time.Second, 10*time.Millisecond)
	ev := r.received()[0]
	assert.Regexp(t, `^evt_[0-9a-f]{24}$`, ev.ID)
	assert.Equal(t, payment.EventAuthorized, ev.Type)
	assert.Equal(t, in.ID, ev.Intent.ID)
	assert.Equal(t, in.IdempotencyKey, ev.Intent.IdempotencyKey)
	assert.Equal(t, payment.StatusAuthorized, ev.Intent.Status)
	assert.WithinDuration(t, time.Now(), ev.Created, time.Minute)
	assert.Zero(t, r.bad.Load(), "every request carried a valid signature")
	require.Eventually(t, func() bool {
		return f.count(`SELECT count(*) FROM paysim.webhook_events WHERE id = $1 AND delivered_at IS NOT NULL AND attempts = 1`, ev.ID) == 1
	}, 5*time.Second, 10*time.Millisecond, "the delivery is recorded")
}

func TestThreeDSDeclineDeclinesAndSendsTheDeclinedWebhook(t *testing.T) {
	r := newReceiver(t, nil)
	f := newFixture(t, paysim.Options{WebhookURL: r.srv.URL})
	e := threeDS(f)
	in := f.authorize(paysim.Token3DS)

	rec := post(e, pathOf(t, in), "decline")
	require.Equal(t, http.StatusOK, rec.Code)
	assert.Contains(t, rec.Body.String(), "Payment declined — you can close this page")
	looked, err := f.sim.Lookup(f.ctx, ref(in))
	require.NoError(t, err)
	assert.Equal(t, payment.StatusDeclined, looked.Status)
	assert.Equal(t, "authentication_failed", looked.DeclineCode)

	require.Eventually(t, func() bool { return len(r.received()) == 1 }, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, payment.EventDeclined, r.received()[0].Type)
	assert.Equal(t, payment.StatusDeclined, r.received()[0].Intent.Status)
}

func TestThreeDSApproveAfterVoidIs409AndSendsNothing(t *testing.T) {
	r := newReceiver(t, nil)
	f := newFixture(t, paysim.Options{WebhookURL: r.srv.URL})
	e := threeDS(f)
	in := f.authorize(paysim.Token3DS)
	_, err := f.sim.Void(f.ctx, ref(in)) // the hold expired
	require.NoError(t, err)

	rec := post(e, pathOf(t, in), "approve")
	assert.Equal(t, http.StatusConflict, rec.Code)
	assert.Contains(t, rec.Header().Get("Content-Type"), "text/html")
	assert.Contains(t, rec.Body.String(), "can no longer be approved")
	assert.Equal(t, payment.StatusVoided, f.status(in.IdempotencyKey))
	assert.Zero(t, f.count(`SELECT count(*) FROM paysim.webhook_events`))
	time.Sleep(100 * time.Millisecond)
	assert.Zero(t, r.calls.Load())
}

func TestThreeDSSecondAnswerIs409(t *testing.T) {
	r := newReceiver(t, nil)
	f := newFixture(t, paysim.Options{WebhookURL: r.srv.URL})
	e := threeDS(f)
	in := f.authorize(paysim.Token3DS)
	require.Equal(t, http.StatusOK, post(e, pathOf(t, in), "approve").Code)
	rec := post(e, pathOf(t, in), "decline")
	assert.Equal(t, http.StatusConflict, rec.Code)
	assert.Contains(t, rec.Body.String(), "already approved")
	assert.Equal(t, payment.StatusAuthorized, f.status(in.IdempotencyKey))
	assert.Equal(t, 1, f.count(`SELECT count(*) FROM paysim.webhook_events`))
}

func TestDelivererRetriesUntilTheReceiverAccepts(t *testing.T) {
	// 500, 500, then 200: the first attempt is the immediate one, the others the deliverer's.
	r := newReceiver(t, func(n int32) int {
		if n <= 2 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	f := newFixture(t, paysim.Options{WebhookURL: r.srv.URL,
		RetryBase: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond, PollInterval: 20 * time.Millisecond})
	runDeliverer(t, f.sim)
	in := f.authorize(paysim.Token3DS)
	_, err := f.sim.Approve(f.ctx, in.ID)
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		return f.count(`SELECT count(*) FROM paysim.webhook_events WHERE delivered_at IS NOT NULL`) == 1
	}, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, int32(3), r.calls.Load())
	assert.Zero(t, r.bad.Load())
	require.Len(t, r.received(), 1)
	assert.Equal(t, in.ID, r.received()[0].Intent.ID)
	assert.Equal(t, 3, f.count(`SELECT attempts FROM paysim.webhook_events`))
}

func TestDeliverersOnSeveralReplicasSendEachEventOnce(t *testing.T) {
	r := newReceiver(t, nil)
	// Events enqueued by a Sim without a WebhookURL (say, a load generator) wait for the API's
	// deliverers; three replicas share them.
	f := newFixture(t, paysim.Options{})
	const n = 40
	for range n {
		in := f.authorize(paysim.Token3DS)
		_, err := f.sim.Approve(f.ctx, in.ID)
		require.NoError(t, err)
	}
	for range 3 {
		runDeliverer(t, paysim.New(f.pool, paysim.Options{WebhookURL: r.srv.URL, WebhookSecret: secret,
			PollInterval: 10 * time.Millisecond}))
	}
	require.Eventually(t, func() bool {
		return f.count(`SELECT count(*) FROM paysim.webhook_events WHERE delivered_at IS NOT NULL`) == n
	}, 10*time.Second, 10*time.Millisecond)
	seen := map[string]int{}
	for _, ev := range r.received() {
		seen[ev.ID]++
	}
	assert.Len(t, seen, n)
	for id, times := range seen {
		assert.Equal(t, 1, times, id)
	}
}

func TestRunDelivererNeedsAWebhookURL(t *testing.T) {
	f := newFixture(t, paysim.Options{})
	assert.Error(t, f.sim.RunDeliverer(f.ctx))
}

// runDeliverer runs sim's deliverer until the test ends.
func runDeliverer(t *testing.T, sim *paysim.Sim) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { assert.NoError(t, sim.RunDeliverer(ctx)) })
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// TestThreeDSWhileTheDatabaseIsDown_503WithRetryAfter: with the simulator's database out of reach,
// the page and the answer are 503 with Retry-After (send it again shortly), never a 500, and the
// intent still waits for the shopper.
func TestThreeDSWhileTheDatabaseIsDown_503WithRetryAfter(t *testing.T) {
	f := newFixture(t, paysim.Options{})
	in := f.authorize(paysim.Token3DS)
	down, err := pgxpool.New(context.Background(), testenv.DownDatabaseURL(t))
	require.NoError(t, err)
	t.Cleanup(down.Close)
	sim := paysim.New(down, paysim.Options{PublicBaseURL: baseURL, WebhookSecret: secret})
	t.Cleanup(sim.Close)
	e := echo.New()
	sim.Routes(e)

	for name, rec := range map[string]*httptest.ResponseRecorder{
		"page": get(e, pathOf(t, in)), "approve": post(e, pathOf(t, in), "approve")} {
		assert.Equal(t, http.StatusServiceUnavailable, rec.Code, name)
		assert.Equal(t, "2", rec.Header().Get("Retry-After"), name)
		assert.Contains(t, rec.Body.String(), "try again", name)
	}
	assert.Equal(t, payment.StatusRequiresAction, f.status(in.IdempotencyKey))
}
