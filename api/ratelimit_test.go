package api_test

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/api"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/payment"
)

// limited asserts a 429 RATE_LIMITED answer with a Retry-After between least and most seconds.
func limited(t *testing.T, r reply, least, most int, msg string) {
	t.Helper()
	if !assert.Equal(t, http.StatusTooManyRequests, r.status, "%s: %s", msg, r.raw) {
		return
	}
	assert.EqualValues(t, problem.RateLimited, r.body["code"], msg)
	assert.NotEmpty(t, r.body["message"], msg)
	n, err := strconv.Atoi(r.header.Get("Retry-After"))
	require.NoError(t, err, "%s: Retry-After %q", msg, r.header.Get("Retry-After"))
	assert.GreaterOrEqual(t, n, least, msg)
	assert.LessOrEqual(t, n, most, msg)
}

// refusals reads checkout_rate_limited_total{group, by} from /metrics.
func refusals(h *harness, group, by string) int {
	re := regexp.MustCompile(fmt.Sprintf(`(?m)^checkout_rate_limited_total\{by="%s",group="%s"\} (\d+)$`, by, group))
	if g := re.FindStringSubmatch(h.scrape()); g != nil {
		n, _ := strconv.Atoi(g[1])
		return n
	}
	return 0
}

// TestRateLimits_PerUser_EachWriteGroup: with each group's user limit at 2 an hour, a user's third
// write in the group (or third checkout preview, which is priced as an order is) is 429 RATE_LIMITED with Retry-After (about half an hour, when the next one is
// allowed), counted by group; another user is not held back, nor the same user in another group.
func TestRateLimits_PerUser_EachWriteGroup(t *testing.T) {
	t.Parallel()
	h := newHarnessWithEnv(t, map[string]string{
		"RATE_LIMIT_ORDERS_USER": "2/1h", "RATE_LIMIT_CART_USER": "2/1h", "RATE_LIMIT_ADDRESSES_USER": "2/1h",
		"RATE_LIMIT_SELLER": "2/1h", "RATE_LIMIT_PREVIEW_USER": "2/1h"})
	address := `{"city":"Izmir","line1":"Kordon 1","lat":38.43,"lon":27.14}`
	stocks := `[{"sku":"S-83","warehouseId":1,"quantity":7,"sourceUpdatedAt":"2026-11-01T10:00:00Z"}]`
	cases := []struct {
		group, method, path, body string
		token                     func(user int64) string
	}{
		// An order without Idempotency-Key is refused (400) after the limit has counted it.
		{"orders", http.MethodPost, "/api/v1/orders", `{}`, h.shopper},
		{"cart", http.MethodPut, "/api/v1/cart/items/71", `{"sellerId":42,"quantity":1}`, h.shopper},
		// A preview of an empty cart is refused (422) after the limit has counted it.
		{"preview", http.MethodPost, "/api/v1/checkout/preview", `{"couponCode":"GUESS-1"}`, h.shopper},
		{"addresses", http.MethodPost, "/api/v1/addresses", address, h.shopper},
		{"seller", http.MethodPut, "/seller-api/v1/stocks", stocks, func(id int64) string { return h.seller(id - 900) }},
	}
	for _, c := range cases {
		t.Run(c.group, func(t *testing.T) {
			first, second := c.token(942), c.token(943)
			for i := range 2 {
				r := h.send(c.method, c.path, first, c.body)
				assert.NotEqual(t, http.StatusTooManyRequests, r.status, "request %d: %s", i+1, r.raw)
			}
			limited(t, h.send(c.method, c.path, first, c.body), 1700, 1800, "third")
			assert.NotEqual(t, http.StatusTooManyRequests, h.send(c.method, c.path, second, c.body).status,
				"another user has limits of their own")
			assert.Equal(t, 1, refusals(h, c.group, "user"))
		})
	}
	// Merging a guest cart is a cart write: user 942 has none left.
	limited(t, h.send(http.MethodPost, "/api/v1/cart/merge", h.shopper(942), `{"guestCartToken":"x"}`), 1, 1800, "merge")
	got := h.send(http.MethodGet, "/api/v1/cart", h.shopper(942), "")
	assert.Equal(t, http.StatusOK, got.status, "reading is not limited")
}

// TestRateLimits_PerClientAddress: an address's limit holds across users; another address is not
// held back. IPv6 clients count by /64.
func TestRateLimits_PerClientAddress(t *testing.T) {
	t.Parallel()
	h := newHarnessWithEnv(t, map[string]string{"RATE_LIMIT_ADDRESSES_IP": "3/1m", "RATE_LIMIT_PREVIEW_IP": "2/1m"})
	address := `{"city":"Izmir","line1":"Kordon 1","lat":38.43,"lon":27.14}`
	for i, user := range []int64{951, 952, 953} {
		r := h.from("203.0.113.7:5000", http.MethodPost, "/api/v1/addresses", h.shopper(user), address)
		require.Equal(t, http.StatusCreated, r.status, "request %d: %s", i+1, r.raw)
	}
	limited(t, h.from("203.0.113.7:6000", http.MethodPost, "/api/v1/addresses", h.shopper(954), address), 1, 20,
		"a fourth user from the same address")
	assert.Equal(t, http.StatusCreated, h.from("203.0.113.8:5000", http.MethodPost, "/api/v1/addresses",
		h.shopper(954), address).status, "another address")
	assert.Equal(t, 1, refusals(h, "addresses", "ip"))

	for _, user := range []int64{955, 956} {
		r := h.from("203.0.113.9:5000", http.MethodPost, "/api/v1/checkout/preview", h.shopper(user), "")
		require.NotEqual(t, http.StatusTooManyRequests, r.status, r.raw)
	}
	limited(t, h.from("203.0.113.9:5000", http.MethodPost, "/api/v1/checkout/preview", h.shopper(957), ""), 1, 40,
		"a third shopper's preview from the same address")
	assert.Equal(t, 1, refusals(h, "preview", "ip"))

	for i := range 3 {
		peer := fmt.Sprintf("[2001:db8:1:2::%x]:443", i+1)
		require.Equal(t, http.StatusCreated, h.from(peer, http.MethodPost, "/api/v1/addresses", h.shopper(960), address).status)
	}
	limited(t, h.from("[2001:db8:1:2:ffff::1]:443", http.MethodPost, "/api/v1/addresses", h.shopper(961), address), 1, 20,
		"another address of the same /64")
	assert.Equal(t, http.StatusCreated, h.from("[2001:db8:1:3::1]:443", http.MethodPost, "/api/v1/addresses",
		h.shopper(961), address).status, "another /64")
}

// TestRateLimits_ClientAddress_XForwardedForOnlyFromTrustedProxies: without TRUSTED_PROXIES a
// client's X-Forwarded-For is ignored, so it cannot pass for another address; behind a listed
// proxy the address the proxy appended counts, whatever the client wrote before it.
func TestRateLimits_ClientAddress_XForwardedForOnlyFromTrustedProxies(t *testing.T) {
	t.Parallel()
	env := map[string]string{"RATE_LIMIT_GUEST_CARTS_IP": "2/1m"}
	newGuest := func(h *harness, peer, xff string) reply {
		return h.from(peer, http.MethodGet, "/api/v1/cart", "", "", echo.HeaderXForwardedFor, xff)
	}

	direct := newHarnessWithEnv(t, env)
	for i := range 2 {
		require.Equal(t, http.StatusOK, newGuest(direct, "198.51.100.1:1000", fmt.Sprintf("192.0.2.%d", i+10)).status)
	}
	limited(t, newGuest(direct, "198.51.100.1:1000", "192.0.2.99"), 1, 60, "a forged X-Forwarded-For changes nothing")

	env["TRUSTED_PROXIES"] = "198.51.100.1"
	proxied := newHarnessWithEnv(t, env)
	const proxy = "198.51.100.1:1000"
	for i := range 2 {
		require.Equal(t, http.StatusOK, newGuest(proxied, proxy, "192.0.2.10").status, "client A, %d", i+1)
	}
	limited(t, newGuest(proxied, proxy, "192.0.2.10"), 1, 60, "client A's third")
	limited(t, newGuest(proxied, proxy, "10.9.9.9, 192.0.2.10"), 1, 60,
		"client A naming another address before the one the proxy appended")
	assert.Equal(t, http.StatusOK, newGuest(proxied, proxy, "192.0.2.11").status, "client B behind the same proxy")
	assert.Equal(t, http.StatusOK, newGuest(proxied, proxy, "192.0.2.10, 10.0.0.5").status,
		"a private address is a client like any other unless it is listed")
	assert.Equal(t, http.StatusOK, newGuest(proxied, "198.51.100.2:1000", "192.0.2.10").status,
		"X-Forwarded-For from a peer that is not a listed proxy is ignored")
	for range 2 {
		newGuest(proxied, "127.0.0.1:1000", "192.0.2.77")
	}
	limited(t, newGuest(proxied, "127.0.0.1:1000", "192.0.2.78"), 1, 60, "loopback is not trusted unless listed")
}

// TestRateLimits_GuestCartCreation: new guest carts (a cart call without X-Guest-Token, which
// issues one) are limited per address; a guest with a token goes on.
func TestRateLimits_GuestCartCreation(t *testing.T) {
	t.Parallel()
	h := newHarnessWithEnv(t, map[string]string{"RATE_LIMIT_GUEST_CARTS_IP": "2/1h"})
	var token string
	for i := range 2 {
		r := h.from("203.0.113.20:1", http.MethodPut, "/api/v1/cart/items/72", "", `{"sellerId":42,"quantity":1}`)
		require.Equal(t, http.StatusOK, r.status, "guest %d: %s", i+1, r.raw)
		token = r.header.Get(api.GuestTokenHeader)
	}
	third := h.from("203.0.113.20:1", http.MethodGet, "/api/v1/cart", "", "")
	limited(t, third, 1700, 1800, "a third new guest cart")
	assert.Empty(t, third.header.Get(api.GuestTokenHeader), "no token issued")
	assert.EqualValues(t, 2, h.scalar(`SELECT count(*) FROM carts`))
	own := h.from("203.0.113.20:1", http.MethodPut, "/api/v1/cart/items/73", "", `{"sellerId":42,"quantity":1}`,
		api.GuestTokenHeader, token)
	assert.Equal(t, http.StatusOK, own.status, "a guest cart already issued is not a new one: %s", own.raw)
	assert.Equal(t, http.StatusOK, h.from("203.0.113.21:1", http.MethodGet, "/api/v1/cart", "", "").status, "another address")
	assert.Equal(t, 1, refusals(h, "guest_carts", "ip"))
}

// TestRateLimits_WebhookBadSignatures_NeverLockOutAGoodOne: an address that sends bad signatures
// gets 401 until its limit is used up, then 429 for its bad signatures; a good signature from that
// very address is still read and answered, so bad signatures sent from (or naming) the provider's
// address cannot keep its events out. Other addresses are not held back.
func TestRateLimits_WebhookBadSignatures_NeverLockOutAGoodOne(t *testing.T) {
	t.Parallel()
	h := newHarnessWithEnv(t, map[string]string{"RATE_LIMIT_WEBHOOK_FAILURES_IP": "3/1h"})
	body := `{"id":"evt_rl_1","type":"payment_intent.succeeded","intent":{"id":"pi_unknown","status":"AUTHORIZED"}}`
	good := payment.Sign([]byte(h.cfg.PaymentWebhookSecret), []byte(body), time.Now())
	bad := payment.Sign([]byte("not-the-secret-not-the-secret-0123"), []byte(body), time.Now())
	const attacker, provider = "203.0.113.66:1", "198.51.100.9:1"
	for i := range 3 {
		r := h.from(attacker, http.MethodPost, "/api/v1/payments/webhook", "", body, payment.SignatureHeader, bad)
		require.Equal(t, http.StatusUnauthorized, r.status, "bad signature %d: %s", i+1, r.raw)
		assert.EqualValues(t, problem.InvalidSignature, r.body["code"])
	}
	limited(t, h.from(attacker, http.MethodPost, "/api/v1/payments/webhook", "", body, payment.SignatureHeader, bad),
		1100, 1200, "a fourth bad signature")
	ok := h.from(attacker, http.MethodPost, "/api/v1/payments/webhook", "", body, payment.SignatureHeader, good)
	assert.Equal(t, http.StatusOK, ok.status, "a good signature from the limited address is read: %s", ok.raw)
	limited(t, h.from(attacker, http.MethodPost, "/api/v1/payments/webhook", "", body, payment.SignatureHeader, bad),
		1100, 1200, "and its bad ones are still limited")
	ok = h.from(provider, http.MethodPost, "/api/v1/payments/webhook", "", body, payment.SignatureHeader, good)
	assert.Equal(t, http.StatusOK, ok.status, "the provider's address: %s", ok.raw)
	assert.Equal(t, http.StatusUnauthorized, h.from(provider, http.MethodPost, "/api/v1/payments/webhook", "", body,
		payment.SignatureHeader, bad).status, "its own bad signatures count on its own")
	assert.Equal(t, 2, refusals(h, "webhook_failures", "ip"))
}
