package loadgen

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheckLoopback_OnlyThisMachine(t *testing.T) {
	t.Parallel()
	cases := []struct {
		url string
		ok  bool
	}{
		{"http://localhost:8080", true},
		{"http://LOCALHOST:8080/", true},
		{"http://127.0.0.1:18081", true},
		{"http://127.8.9.10:80", true},
		{"http://[::1]:8080", true},
		{"https://localhost", true},
		{"http://10.0.0.5:8080", false},
		{"http://example.com:8080", false},
		{"http://localhost.example.com", false},
		{"ftp://localhost", false},
		{"localhost:8080", false},
		{"", false},
	}
	for _, tc := range cases {
		t.Run(tc.url, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tc.ok, CheckLoopback(tc.url) == nil)
		})
	}
}

func TestParseMix_SharesByScenario(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want Mix // nil: refused
	}{
		{"", CampaignMix},
		{"campaign", CampaignMix},
		{"ok=1", Mix{ScenarioOK: 1}},
		{"ok=40, abandon=10,ok=10", Mix{ScenarioOK: 50, ScenarioAbandon: 10}},
		{"3ds-approve=3,3ds-decline=1,timeout=0.5", Mix{Scenario3DSApprove: 3, Scenario3DSDecline: 1, ScenarioTimeout: 0.5}},
		{"ok", nil},
		{"paypal=5", nil},
		{"ok=-1", nil},
		{"ok=0,cancel=0", nil},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseMix(tc.in)
			if tc.want == nil {
				assert.Error(t, err)
				return
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestMixPick_FollowsTheShares(t *testing.T) {
	t.Parallel()
	m := Mix{ScenarioOK: 50, ScenarioAbandon: 25, ScenarioCancel: 25}
	got := []string{m.pick(0), m.pick(0.49), m.pick(0.5), m.pick(0.74), m.pick(0.75), m.pick(0.999999)}
	assert.Equal(t, []string{ScenarioOK, ScenarioOK, ScenarioAbandon, ScenarioAbandon, ScenarioCancel, ScenarioCancel}, got)
}

func TestPercentile_NearestRank(t *testing.T) {
	t.Parallel()
	sorted := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	got := []float64{percentile(sorted, 0.5), percentile(sorted, 0.95), percentile(sorted, 0.99), percentile(nil, 0.5)}
	assert.Equal(t, []float64{5, 10, 10, 0}, got)
}

func TestValidate_RefusesUnboundedRuns(t *testing.T) {
	t.Parallel()
	cases := map[string]func(c *Config){
		"too long":       func(c *Config) { c.Duration = 2 * time.Hour },
		"too many":       func(c *Config) { c.Orders = MaxOrders + 1 },
		"no shoppers":    func(c *Config) { c.Shoppers = -1 },
		"too many users": func(c *Config) { c.Shoppers = MaxShoppers + 1 },
		"remote":         func(c *Config) { c.BaseURL = "http://checkout.example.com" },
		"remote orders":  func(c *Config) { c.OrderURL = "http://orders.example.com/plain/v1/orders" },
		"remote metrics": func(c *Config) { c.MetricsURL = "http://checkout.example.com:9091/metrics" },
		"no secret":      func(c *Config) { c.JWTSecret = "" },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := Config{JWTSecret: "0123456789abcdef0123"}.withDefaults()
			mutate(&c)
			assert.Error(t, c.Validate())
		})
	}
}

func TestValidate_AcceptsALocalOrderURL(t *testing.T) {
	t.Parallel()
	c := Config{JWTSecret: "0123456789abcdef0123", OrderURL: "http://127.0.0.1:18090/plain/v1/orders"}.withDefaults()
	assert.NoError(t, c.Validate())
}

func TestGauges_ReadsUnlabelledValues(t *testing.T) {
	t.Parallel()
	body := []byte("# HELP checkout_availability_lag_seconds Age.\n# TYPE checkout_availability_lag_seconds gauge\n" +
		"checkout_availability_lag_seconds 0.25\ncheckout_availability_pending_changes 12\n" +
		"checkout_http_requests_total{route=\"/x\"} 3\n")
	assert.Equal(t, map[string]float64{metricLag: 0.25, metricPending: 12}, gauges(body, metricLag, metricPending))
}

// TestRecorder_BusyRefusalsApartFromTheOrdersLetIn: the latency of POST /orders is that of the
// orders the API let in; its BUSY refusals are counted on a row of their own, as expected answers.
func TestRecorder_BusyRefusalsApartFromTheOrdersLetIn(t *testing.T) {
	t.Parallel()
	r := newRecorder()
	r.observe(epOrder, 201, "", 900*time.Millisecond)
	r.observe(epOrder, 503, codeBusy, time.Millisecond)
	r.observe(epRepeat, 503, codeBusy, time.Millisecond)
	r.observe(epOrder, 503, "UNAVAILABLE", 30*time.Second)
	got := map[string]EndpointStats{}
	for _, e := range r.endpoints(1) {
		got[e.Endpoint] = e
	}
	assert.EqualValues(t, 2, got[EndpointOrder].Requests)
	assert.EqualValues(t, 900, got[EndpointOrder].P50Ms)
	assert.EqualValues(t, 2, got[EndpointOrderBusy].Requests)
	for _, e := range r.errors() {
		assert.Equal(t, e.Code == codeBusy, e.Expected, "%+v", e)
	}
	assert.Empty(t, sameAnswer(answer{status: 503, code: codeBusy}, nil, answer{status: 201}, nil),
		"a refusal is no answer of the key's to compare")
}

// TestRecorder_OrdersByPayment: each order as its shopper waited is counted once more by its payment
// token, on rows after the API's endpoints, in the same order in every report.
func TestRecorder_OrdersByPayment(t *testing.T) {
	t.Parallel()
	r := newRecorder()
	for _, w := range []struct {
		token string
		ms    time.Duration
	}{{"tok_ok", 40}, {"tok_3ds", 60}, {"tok_ok", 42}, {"tok_timeout", 90}, {"tok_3ds", 66}} {
		r.wait(EndpointOrderShopper, w.ms*time.Millisecond)
		r.wait(EndpointOrderPaidWith(w.token), w.ms*time.Millisecond)
	}
	r.observe(epGetOrder, 200, "", time.Millisecond)
	var names []string
	got := map[string]EndpointStats{}
	for _, e := range r.endpoints(1) {
		names = append(names, e.Endpoint)
		got[e.Endpoint] = e
	}
	assert.Equal(t, []string{EndpointOrderShopper, epGetOrder, EndpointOrderPaidWith("tok_3ds"),
		EndpointOrderPaidWith("tok_ok"), EndpointOrderPaidWith("tok_timeout")}, names)
	assert.EqualValues(t, 5, got[EndpointOrderShopper].Requests)
	assert.EqualValues(t, 2, got[EndpointOrderPaidWith("tok_3ds")].Requests)
	assert.EqualValues(t, 66, got[EndpointOrderPaidWith("tok_3ds")].P99Ms)
	assert.EqualValues(t, 40, got[EndpointOrderPaidWith("tok_ok")].P50Ms)
}

func TestParseCampaignHot_BoolOrPercent(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want float64 // -1: refused
	}{
		{"false", 0},
		{"true", DefaultCampaignHot},
		{"15", 15},
		{"12.5%", 12.5},
		{"0", 0},
		{"100", -1},
		{"-5", -1},
		{"lots", -1},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseCampaignHot(tc.in)
			if tc.want < 0 {
				assert.Error(t, err)
				return
			}
			assert.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestCouponCode_AValidCodeFromAnyRunID(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "LG-MIF3K2", couponCode("mif3k2"))
	assert.Equal(t, "LG-RUNA_B", couponCode("run a/_b"))
	long := couponCode("abcdefghijklmnopqrstuvwxyz0123456789")
	assert.Len(t, long, 32)
	assert.Regexp(t, `^[A-Z0-9_-]{3,32}$`, long)
}

func TestExpectedError_CouponRefusalsAreNotFaults(t *testing.T) {
	t.Parallel()
	assert.True(t, expectedError(errKey{epOrder, 409, "COUPON_USED_UP"}))
	assert.True(t, expectedError(errKey{epRepeat, 409, "COUPON_ALREADY_USED"}))
	assert.False(t, expectedError(errKey{epOrder, 409, "PRICE_CHANGED"}))
	assert.False(t, expectedError(errKey{epPreview, 409, "COUPON_USED_UP"}))
}

// TestSend_RetryFor_RepeatsFaultsWithTheSameKeyAndBody: with RetryFor, an order a fault answers
// (a 503 UNAVAILABLE after Retry-After, a 504, a 502) is sent again with the same
// Idempotency-Key and body until it is answered, every try observed; BUSY and a 500 are never
// repeated by send, and neither is a 503 that names the order it gave up (its key is spent).
func TestSend_RetryFor_RepeatsFaultsWithTheSameKeyAndBody(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var keys, bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		mu.Lock()
		keys, bodies = append(keys, r.Header.Get("Idempotency-Key")), append(bodies, string(raw))
		n := len(keys)
		mu.Unlock()
		switch {
		case r.URL.Path == "/busy":
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"code":"BUSY"}`))
		case r.URL.Path == "/given-up":
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"code":"UNAVAILABLE","orderId":42}`))
		case r.URL.Path == "/bug":
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"code":"INTERNAL"}`))
		case n == 1:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"code":"UNAVAILABLE"}`))
		case n == 2:
			w.WriteHeader(http.StatusGatewayTimeout)
		case n == 3:
			w.WriteHeader(http.StatusBadGateway)
		default:
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"orderId":42}`))
		}
	}))
	t.Cleanup(srv.Close)
	var seen []Observation
	c := &client{base: srv.URL, http: srv.Client(), rec: newRecorder(), retryFor: time.Minute,
		observe: func(o Observation) { mu.Lock(); seen = append(seen, o); mu.Unlock() }}
	h := http.Header{"Idempotency-Key": {"k-1"}}
	a, err := c.send(context.Background(), request{endpoint: epOrder, method: http.MethodPost, url: "/orders",
		header: h, json: map[string]any{"addressId": 5}})
	require.NoError(t, err)
	assert.Equal(t, http.StatusCreated, a.status)
	assert.Equal(t, 3, a.faults, "three tries answered by a fault before the order")
	assert.Equal(t, []int64{42}, namedOrders(a))
	assert.Equal(t, []string{"k-1", "k-1", "k-1", "k-1"}, keys, "every try with the key")
	for _, b := range bodies {
		assert.JSONEq(t, `{"addressId":5}`, b, "every try with the body")
	}
	require.Len(t, seen, 4, "every try observed")
	assert.Equal(t, []bool{true, true, true, false}, []bool{seen[0].Fault(), seen[1].Fault(), seen[2].Fault(), seen[3].Fault()})
	assert.GreaterOrEqual(t, seen[1].Sent.Sub(seen[0].Done), time.Second, "the 503's Retry-After waited out")

	for _, path := range []string{"/busy", "/bug", "/given-up"} {
		mu.Lock()
		keys = nil
		mu.Unlock()
		a, err = c.send(context.Background(), request{endpoint: epOrder, method: http.MethodPost, url: path, header: h})
		require.NoError(t, err)
		assert.Zero(t, a.faults, path)
		assert.Len(t, keys, 1, "%s is answered once", path)
	}
}
