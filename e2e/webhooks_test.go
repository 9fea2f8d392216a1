package e2e_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/events"
	"github.com/marketplace/checkout/webhooks"
)

// receiver is a seller's webhook endpoint: it checks each request's signature with the Standard
// Webhooks library (the seller's side of the convention) and keeps what it accepted.
type receiver struct {
	t      *testing.T
	srv    *httptest.Server
	secret atomic.Value // string: whsec_…
	// fail answers 500 to everything while set; delay holds each request that long.
	fail  atomic.Bool
	delay atomic.Int64

	mu       sync.Mutex
	accepted []received // answered 2xx, in arrival order
	refused  int        // answered 500
	badSigs  int
}

type received struct {
	id   string
	body []byte
	at   time.Time
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{t: t}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		if d := time.Duration(r.delay.Load()); d > 0 {
			time.Sleep(d)
		}
		wh, err := standardwebhooks.NewWebhook(r.secret.Load().(string))
		r.mu.Lock()
		defer r.mu.Unlock()
		if err != nil || wh.Verify(body, req.Header) != nil {
			r.badSigs++
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if r.fail.Load() {
			r.refused++
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		r.accepted = append(r.accepted, received{id: req.Header.Get(webhooks.HeaderID), body: body, at: time.Now()})
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) got() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.accepted)
}

// register makes r the endpoint of the seller for types, as the seller does through its API.
func (s *stack) register(seller int64, r *receiver, types ...string) int64 {
	s.t.Helper()
	resp := s.call(http.MethodPost, "/seller-api/v1/webhooks", s.seller(seller), nil,
		map[string]any{"url": r.srv.URL + "/hooks", "eventTypes": types, "description": "ERP"})
	require.Equal(s.t, http.StatusCreated, resp.status, resp.raw)
	r.secret.Store(resp.str("secret"))
	require.Regexp(s.t, `^whsec_`, resp.str("secret"))
	return resp.int("id")
}

func webhookStack(t *testing.T, env map[string]string) *stack {
	base := map[string]string{"WEBHOOKS_ALLOW_PRIVATE_TARGETS": "true", "WEBHOOK_RETRY_BASE": "100ms",
		"WEBHOOK_RETRY_MAX": "400ms", "WEBHOOK_TIMEOUT": "2s"}
	for k, v := range env {
		base[k] = v
	}
	return startStack(t, stackOptions{hold: time.Minute, env: base})
}

// TestWebhooks_FailingEndpointRecovers_EveryEventOnceInOrderSignedAndOnlyItsOwn: seller 42's
// endpoint refuses every delivery for a while, then recovers: it gets every event of its orders
// once, in order, each signed; the lines of seller 43 in the same orders never reach it, and
// seller 43's endpoint gets only its own; the delivery log shows the attempts; one delivery is
// replayed with the same webhook-id.
func TestWebhooks_FailingEndpointRecovers_EveryEventOnceInOrderSignedAndOnlyItsOwn(t *testing.T) {
	t.Parallel()
	s := webhookStack(t, nil)
	r42, r43 := newReceiver(t), newReceiver(t)
	all := []string{events.OrderCreated, events.OrderConfirmed, events.OrderFailed, events.OrderCancelled}
	ep42 := s.register(42, r42, all...)
	s.register(43, r43, all...)
	r42.fail.Store(true)

	const orders = 4
	var ids []int64
	for i := range orders {
		sh := s.shopper(int64(80_001 + i))
		sh.fill(map[int64]int32{71: 1, 82: 1}) // 71 is seller 42's, 82 seller 43's
		resp := sh.order("k-"+randomHex(6), sh.preview(), "tok_ok")
		require.Equal(t, http.StatusCreated, resp.status, resp.raw)
		ids = append(ids, resp.int("orderId"))
		require.Equal(t, "CONFIRMED", s.waitFinal(sh.token, resp.int("orderId"), 30*time.Second).str("status"))
	}
	require.Eventually(t, func() bool { r42.mu.Lock(); defer r42.mu.Unlock(); return r42.refused >= 3 },
		30*time.Second, 50*time.Millisecond, "the failing endpoint was tried and retried")
	r42.fail.Store(false)
	require.Eventually(t, func() bool { return len(r42.got()) >= 2*orders && len(r43.got()) >= 2*orders },
		time.Minute, 50*time.Millisecond, "every event reaches both endpoints")
	time.Sleep(time.Second) // nothing more is on its way

	v, err := events.NewValidator()
	require.NoError(t, err)
	for seller, r := range map[int64]*receiver{42: r42, 43: r43} {
		got := r.got()
		require.Len(t, got, 2*orders, "seller %d: each event once", seller)
		var prev int64
		for _, g := range got {
			require.NoError(t, v.ValidateWebhook(g.body), "%s", g.body)
			e, err := events.Decode(g.body)
			require.NoError(t, err)
			assert.Equal(t, e.ID, g.id, "webhook-id is the event's id")
			id, _ := strconv.ParseInt(e.ID, 10, 64)
			assert.Greater(t, id, prev, "seller %d: in order", seller)
			prev = id
			var o webhooks.SellerOrder
			require.NoError(t, json.Unmarshal(e.Data, &o))
			require.Len(t, o.Items, 1)
			assert.EqualValues(t, seller, o.Items[0].SellerID, "only the seller's own line")
			assert.Contains(t, ids, o.OrderID)
			assert.NotContains(t, string(e.Data), "userId")
		}
		r.mu.Lock()
		assert.Zero(t, r.badSigs, "every request signed")
		r.mu.Unlock()
	}

	// The delivery log: the first delivery failed before it went through.
	seller := s.seller(42)
	log := s.call(http.MethodGet, fmt.Sprintf("/seller-api/v1/webhooks/%d/deliveries", ep42), seller, nil, nil)
	require.Equal(t, http.StatusOK, log.status, log.raw)
	deliveries := log.body["deliveries"].([]any)
	require.Len(t, deliveries, 2*orders)
	oldest := deliveries[len(deliveries)-1].(map[string]any)
	assert.Equal(t, "DELIVERED", oldest["status"])
	assert.Greater(t, oldest["attempts"], 1.0)
	id := int64(oldest["id"].(float64))
	one := s.call(http.MethodGet, fmt.Sprintf("/seller-api/v1/webhooks/%d/deliveries/%d", ep42, id), seller, nil, nil)
	require.Equal(t, http.StatusOK, one.status, one.raw)
	attempts := one.body["attemptLog"].([]any)
	assert.EqualValues(t, 500, attempts[0].(map[string]any)["statusCode"])
	assert.EqualValues(t, 204, attempts[len(attempts)-1].(map[string]any)["statusCode"])
	assert.Contains(t, attempts[0], "latencyMs")

	// Another seller cannot read it; ops can, and replay it.
	other := s.call(http.MethodGet, fmt.Sprintf("/seller-api/v1/webhooks/%d/deliveries/%d", ep42, id), s.seller(43), nil, nil)
	assert.Equal(t, http.StatusNotFound, other.status, other.raw)
	replay := s.call(http.MethodPost, fmt.Sprintf("/api/v1/ops/webhooks/%d/deliveries/%d/replay", ep42, id), s.ops(), nil, nil)
	require.Equal(t, http.StatusAccepted, replay.status, replay.raw)
	require.Eventually(t, func() bool { return len(r42.got()) == 2*orders+1 }, 30*time.Second, 50*time.Millisecond)
	got := r42.got()
	assert.Equal(t, got[0].id, got[len(got)-1].id, "the replay carries the same webhook-id")
	one = s.call(http.MethodGet, fmt.Sprintf("/api/v1/ops/webhooks/%d/deliveries/%d", ep42, id), s.ops(), nil, nil)
	attempts = one.body["attemptLog"].([]any)
	assert.Equal(t, true, attempts[len(attempts)-1].(map[string]any)["replay"])
}

// TestWebhooks_EndpointFailingPastTheRetryWindow_DisabledAndTheSellerTold: an endpoint that fails
// for longer than WEBHOOK_RETRY_FOR is disabled with the reason, a webhook.endpoint_disabled event
// tells the seller, and enabling it again sends what waited, in order; meanwhile neither it nor a
// slow endpoint of another seller held back the seller's other, healthy endpoint.
func TestWebhooks_EndpointFailingPastTheRetryWindow_DisabledAndTheSellerTold(t *testing.T) {
	t.Parallel()
	s := webhookStack(t, map[string]string{"WEBHOOK_RETRY_FOR": "2s"})
	failing, slow, fast := newReceiver(t), newReceiver(t), newReceiver(t)
	ep := s.register(42, failing, events.OrderCreated, events.OrderConfirmed)
	s.register(43, slow, events.OrderCreated, events.OrderConfirmed)
	s.register(42, fast, events.OrderCreated, events.OrderConfirmed)
	failing.fail.Store(true)
	slow.delay.Store(int64(1500 * time.Millisecond))

	sh := s.shopper(81_001)
	sh.fill(map[int64]int32{71: 1, 82: 1})
	resp := sh.order("k-"+randomHex(6), sh.preview(), "tok_ok")
	require.Equal(t, http.StatusCreated, resp.status, resp.raw)

	require.Eventually(t, func() bool { return len(fast.got()) == 2 }, 30*time.Second, 20*time.Millisecond)
	assert.Less(t, len(slow.got()), 2, "the fast endpoint had both events before the slow one had its second")

	seller := s.seller(42)
	require.Eventually(t, func() bool {
		r := s.call(http.MethodGet, fmt.Sprintf("/seller-api/v1/webhooks/%d", ep), seller, nil, nil)
		return r.str("status") == webhooks.StatusDisabled
	}, time.Minute, 100*time.Millisecond, "the failing endpoint is disabled")
	r := s.call(http.MethodGet, fmt.Sprintf("/seller-api/v1/webhooks/%d", ep), seller, nil, nil)
	assert.Contains(t, r.str("disabledReason"), "failed for 2s")
	assert.EqualValues(t, 1, s.scalar(`SELECT count(*) FROM outbox_events WHERE event_type = 'webhook.endpoint_disabled'
		AND (payload->>'endpointId')::bigint = $1`, ep), "the seller is told, once")
	require.Eventually(t, func() bool { return len(slow.got()) == 2 }, 30*time.Second, 50*time.Millisecond,
		"the slow endpoint gets its events, each after its own wait")

	failing.fail.Store(false)
	enable := s.call(http.MethodPatch, fmt.Sprintf("/seller-api/v1/webhooks/%d", ep), seller, nil, map[string]any{"status": "ENABLED"})
	require.Equal(t, http.StatusOK, enable.status, enable.raw)
	require.Eventually(t, func() bool { return len(failing.got()) == 2 }, 30*time.Second, 50*time.Millisecond,
		"what waited goes out once the endpoint is enabled")
	got := failing.got()
	first, _ := events.Decode(got[0].body)
	second, _ := events.Decode(got[1].body)
	assert.Equal(t, []string{events.OrderCreated, events.OrderConfirmed}, []string{first.Type, second.Type}, "in order")
}

// TestWebhooks_TargetsInTheCheckoutsOwnNetwork_Refused: outside dev, an endpoint may not point at
// a private, loopback or link-local address (registration answers 422 WEBHOOK_TARGET_FORBIDDEN),
// and a delivery never connects to one, whatever its name resolves to at that moment.
func TestWebhooks_TargetsInTheCheckoutsOwnNetwork_Refused(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	seller := s.seller(42)
	for _, url := range []string{"https://127.0.0.1/hooks", "https://10.1.2.3/hooks", "https://192.168.0.10/x",
		"https://169.254.169.254/latest/meta-data", "https://[::1]/x", "https://[fd12::1]/x", "https://localhost/x",
		"https://100.64.0.1/x", "https://0.0.0.0/x"} {
		r := s.call(http.MethodPost, "/seller-api/v1/webhooks", seller, nil, map[string]any{"url": url,
			"eventTypes": []string{events.OrderConfirmed}})
		assert.Equal(t, http.StatusUnprocessableEntity, r.status, "%s: %s", url, r.raw)
		assert.Equal(t, "WEBHOOK_TARGET_FORBIDDEN", r.str("code"), url)
	}
	for _, url := range []string{"http://93.184.215.14/hooks", "ftp://93.184.215.14/x", "https://user:pw@93.184.215.14/x"} {
		r := s.call(http.MethodPost, "/seller-api/v1/webhooks", seller, nil, map[string]any{"url": url,
			"eventTypes": []string{events.OrderConfirmed}})
		assert.Equal(t, http.StatusBadRequest, r.status, "%s: %s", url, r.raw)
	}
	assert.Zero(t, s.scalar(`SELECT count(*) FROM webhook_endpoints`))

	// A name that resolves to this machine at the moment of delivery: the connection is refused.
	local := newReceiver(t)
	local.secret.Store(webhooks.FormatSecret(make([]byte, 32)))
	client := webhooks.Targets{}.Client(2 * time.Second)
	_, port, err := net.SplitHostPort(strings.TrimPrefix(local.srv.URL, "http://"))
	require.NoError(t, err)
	_, err = client.Post("http://localhost:"+port+"/hooks", "application/json", nil)
	require.Error(t, err)
	assert.ErrorIs(t, err, webhooks.ErrForbiddenTarget)
	assert.Empty(t, local.got())
}
