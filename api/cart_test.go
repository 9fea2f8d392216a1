package api_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/api"
	"github.com/marketplace/checkout/availability"
	"github.com/marketplace/checkout/events"
	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/dev/demo"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/internal/wiring"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/outbox"
)

// newHarnessWithEnv is newHarness with settings of the test's own.
func newHarnessWithEnv(t testing.TB, env map[string]string) *harness {
	t.Helper()
	return newHarnessOf(t, nil, env)
}

type reply struct {
	answer
	header http.Header
}

// send is do with request headers given as name, value pairs.
func (h *harness) send(method, path, token, body string, headers ...string) reply {
	h.t.Helper()
	return h.from(defaultPeer, method, path, token, body, headers...)
}

// defaultPeer is the client address of a request sent without one.
const defaultPeer = "192.0.2.1:1234"

// from is send from a client address (the connection's peer).
func (h *harness) from(peer, method, path, token, body string, headers ...string) reply {
	h.t.Helper()
	return h.sendBytesFrom(peer, method, path, token, []byte(body), headers...)
}

// sendBytes is send. It touches no test state, so fuzz functions call it too.
func (h *harness) sendBytes(method, path, token string, body []byte, headers ...string) reply {
	return h.sendBytesFrom(defaultPeer, method, path, token, body, headers...)
}

func (h *harness) sendBytesFrom(peer, method, path, token string, body []byte, headers ...string) reply {
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	req.RemoteAddr = peer
	if len(body) > 0 {
		req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	}
	if token != "" {
		req.Header.Set(echo.HeaderAuthorization, "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	h.e.ServeHTTP(rec, req)
	r := reply{answer: answer{status: rec.Code, raw: rec.Body.String()}, header: rec.Header()}
	_ = json.Unmarshal(rec.Body.Bytes(), &r.body)
	return r
}

func putItem(sku, seller int64, qty int) (string, string) {
	return fmt.Sprintf("/api/v1/cart/items/%d", sku), fmt.Sprintf(`{"sellerId": %d, "quantity": %d}`, seller, qty)
}

// lines maps skuId to the line of a cart answer.
func lines(t *testing.T, body map[string]any) map[int64]map[string]any {
	t.Helper()
	out := map[int64]map[string]any{}
	items, ok := body["items"].([]any)
	require.True(t, ok, "answer has items: %v", body)
	for _, it := range items {
		m := it.(map[string]any)
		out[int64(m["skuId"].(float64))] = m
	}
	return out
}

func sellerOf(sku int64) int64 {
	for _, s := range demo.SKUs {
		if s.ID == sku {
			return s.SellerID
		}
	}
	return 0
}

func TestCart_GuestPutRepeatedFiveTimes_SetsQuantityOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	require.NoError(t, availability.Rebuild(context.Background(), h.pool)) // the demo stock, projected
	path, body := putItem(71, 42, 2)
	first := h.send(http.MethodPut, path, "", body)
	require.Equal(t, http.StatusOK, first.status, first.raw)
	token := first.header.Get(api.GuestTokenHeader)
	raw, err := base64.RawURLEncoding.DecodeString(token)
	require.NoError(t, err, "the guest token is URL-safe base64")
	assert.GreaterOrEqual(t, len(raw)*8, 128, "at least 128 random bits")

	for range 5 {
		again := h.send(http.MethodPut, path, "", body, api.GuestTokenHeader, token)
		require.Equal(t, http.StatusOK, again.status, again.raw)
		assert.Equal(t, token, again.header.Get(api.GuestTokenHeader))
	}
	got := h.send(http.MethodGet, "/api/v1/cart", "", "", api.GuestTokenHeader, token)
	require.Equal(t, http.StatusOK, got.status, got.raw)
	assert.Equal(t, `"1"`, got.header.Get("ETag"), "one write, one version")
	line := lines(t, got.body)[71]
	require.NotNil(t, line)
	assert.EqualValues(t, 2, line["quantity"])
	assert.Equal(t, "1249.90", line["priceAtAdd"])
	assert.Equal(t, "1249.90", line["price"])
	assert.Equal(t, "2499.80", line["lineTotal"])
	assert.Equal(t, availability.InStock, line["stock"])
	assert.EqualValues(t, 1, h.scalar(`SELECT count(*) FROM carts`))
	assert.EqualValues(t, 1, h.scalar(`SELECT version FROM carts`))
	assert.EqualValues(t, 2, h.scalar(`SELECT (doc->'items'->0->>'quantity')::int FROM carts`))

	del := h.send(http.MethodDelete, path, "", "", api.GuestTokenHeader, token)
	require.Equal(t, http.StatusOK, del.status, del.raw)
	assert.Empty(t, del.body["items"])
	assert.Equal(t, `"2"`, del.header.Get("ETag"))
	del = h.send(http.MethodDelete, path, "", "", api.GuestTokenHeader, token)
	assert.Equal(t, `"2"`, del.header.Get("ETag"), "deleting a line that is not there changes nothing")
}

// TestCart_MadeUpGuestToken_Refused: only tokens the server issued reach a guest cart. A token a
// client makes up, well formed as it may be, is 401 INVALID_GUEST_TOKEN and reads or writes
// nothing; one issued by another deployment (another secret) too.
func TestCart_MadeUpGuestToken_Refused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	issued := h.send(http.MethodPut, "/api/v1/cart/items/72", "", `{"sellerId":42,"quantity":1}`)
	require.Equal(t, http.StatusOK, issued.status, issued.raw)
	token := issued.header.Get(api.GuestTokenHeader)
	elsewhere := auth.NewGuestTokens(auth.Keys{Signing: auth.Key{Secret: []byte(strings.Repeat("x", 40))}}).Issue()
	tampered := []byte(token)
	tampered[0] ^= 1

	for name, bad := range map[string]string{
		"random, 256 bits":      base64.RawURLEncoding.EncodeToString([]byte(strings.Repeat("r", 32))),
		"another server's":      elsewhere,
		"one character changed": string(tampered),
		"short":                 "abc",
	} {
		for _, r := range []reply{
			h.send(http.MethodGet, "/api/v1/cart", "", "", api.GuestTokenHeader, bad),
			h.send(http.MethodPut, "/api/v1/cart/items/73", "", `{"sellerId":42,"quantity":1}`, api.GuestTokenHeader, bad),
			h.send(http.MethodDelete, "/api/v1/cart/items/72", "", "", api.GuestTokenHeader, bad),
		} {
			assert.Equal(t, http.StatusUnauthorized, r.status, "%s: %s", name, r.raw)
			assert.EqualValues(t, problem.InvalidGuestToken, r.body["code"], name)
			assert.Empty(t, r.header.Get(api.GuestTokenHeader), "no token handed back")
		}
	}
	assert.EqualValues(t, 1, h.scalar(`SELECT count(*) FROM carts`), "nothing written but the issued token's cart")
	own := h.send(http.MethodGet, "/api/v1/cart", "", "", api.GuestTokenHeader, token)
	require.Equal(t, http.StatusOK, own.status, own.raw)
	assert.Equal(t, []int64{72}, keys(lines(t, own.body)))
}

func TestCart_TwentyConcurrentPutsOnDifferentSKUs_AllLinesPresent(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	token := h.shopper(601)
	var wg sync.WaitGroup
	statuses := make([]int, 20)
	for i := range 20 {
		wg.Go(func() {
			sku := int64(71 + i)
			path, body := putItem(sku, sellerOf(sku), 1)
			statuses[i] = h.send(http.MethodPut, path, token, body).status
		})
	}
	wg.Wait()
	for i, s := range statuses {
		assert.Equal(t, http.StatusOK, s, "PUT of SKU %d", 71+i)
	}
	got := h.send(http.MethodGet, "/api/v1/cart", token, "")
	require.Equal(t, http.StatusOK, got.status, got.raw)
	assert.Len(t, lines(t, got.body), 20)
	assert.Equal(t, `"20"`, got.header.Get("ETag"))
}

func TestCart_StaleIfMatch_Conflict(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	token := h.shopper(602)
	path, body := putItem(71, 42, 1)
	require.Equal(t, http.StatusOK, h.send(http.MethodPut, path, token, body).status)
	etag := h.send(http.MethodGet, "/api/v1/cart", token, "").header.Get("ETag")
	require.Equal(t, `"1"`, etag)

	// Device A writes on the version it read; device B still holds the same version.
	path2, body2 := putItem(72, 42, 1)
	a := h.send(http.MethodPut, path2, token, body2, "If-Match", etag)
	require.Equal(t, http.StatusOK, a.status, a.raw)
	assert.Equal(t, `"2"`, a.header.Get("ETag"))

	path3, body3 := putItem(73, 42, 1)
	b := h.send(http.MethodPut, path3, token, body3, "If-Match", etag)
	assert.Equal(t, http.StatusConflict, b.status, b.raw)
	assert.EqualValues(t, problem.CartConflict, b.body["code"])
	assert.EqualValues(t, 2, b.body["currentVersion"])
	del := h.send(http.MethodDelete, path, token, "", "If-Match", etag)
	assert.Equal(t, http.StatusConflict, del.status, del.raw)

	got := h.send(http.MethodGet, "/api/v1/cart", token, "")
	assert.Len(t, lines(t, got.body), 2, "the refused writes changed nothing")

	// Without If-Match the same write re-reads and applies.
	c := h.send(http.MethodPut, path3, token, body3)
	assert.Equal(t, http.StatusOK, c.status, c.raw)
	assert.Len(t, lines(t, c.body), 3)
}

func TestCart_LimitsAndValidation_DocumentedErrors(t *testing.T) {
	t.Parallel()
	h := newHarnessWithEnv(t, map[string]string{"CART_MAX_LINES": "3"})
	token := h.shopper(603)
	// A SKU whose own limit is above the per-line cap.
	sku := h.do(http.MethodPut, "/seller-api/v1/skus", h.seller(43),
		`[{"sku":"BULK-1","title":"Toplu paket","price":"1.00","currency":"TRY","maxPerOrder":500}]`)
	require.Equal(t, http.StatusOK, sku.status, sku.raw)
	bulk := int64(sku.body["results"].([]any)[0].(map[string]any)["skuId"].(float64))
	for _, s := range []int64{71, 72} {
		path, body := putItem(s, 42, 1)
		require.Equal(t, http.StatusOK, h.send(http.MethodPut, path, token, body).status)
	}

	cases := []struct {
		name, method, path, body string
		headers                  []string
		status                   int
		code                     problem.Code
		detail                   map[string]any
	}{
		{"unknown SKU", http.MethodPut, "/api/v1/cart/items/99999", `{"sellerId":42,"quantity":1}`, nil, 404, problem.SKUNotFound, nil},
		{"another seller's SKU", http.MethodPut, "/api/v1/cart/items/73", `{"sellerId":43,"quantity":1}`, nil, 400, problem.ValidationFailed, nil},
		{"negative quantity", http.MethodPut, "/api/v1/cart/items/73", `{"sellerId":42,"quantity":-1}`, nil, 400, problem.ValidationFailed, nil},
		{"fractional quantity", http.MethodPut, "/api/v1/cart/items/73", `{"sellerId":42,"quantity":1.5}`, nil, 400, problem.ValidationFailed, nil},
		{"absurd quantity", http.MethodPut, "/api/v1/cart/items/73", `{"sellerId":42,"quantity":1000000}`, nil, 400, problem.ValidationFailed, nil},
		{"missing quantity", http.MethodPut, "/api/v1/cart/items/73", `{"sellerId":42}`, nil, 400, problem.ValidationFailed, nil},
		{"missing seller", http.MethodPut, "/api/v1/cart/items/73", `{"quantity":1}`, nil, 400, problem.ValidationFailed, nil},
		{"not a SKU id", http.MethodPut, "/api/v1/cart/items/abc", `{"sellerId":42,"quantity":1}`, nil, 400, problem.ValidationFailed, nil},
		{"malformed JSON", http.MethodPut, "/api/v1/cart/items/73", `{"sellerId":`, nil, 400, problem.InvalidJSON, nil},
		{"bad If-Match", http.MethodPut, "/api/v1/cart/items/73", `{"sellerId":42,"quantity":1}`, []string{"If-Match", `"x"`}, 400, problem.ValidationFailed, nil},
		{"over the SKU's maxPerOrder", http.MethodPut, "/api/v1/cart/items/71", `{"sellerId":42,"quantity":6}`, nil, 422, problem.CartLimit,
			map[string]any{"limit": "maxPerOrder", "max": 5.0}},
		{"over the per-line cap", http.MethodPut, fmt.Sprintf("/api/v1/cart/items/%d", bulk), `{"sellerId":43,"quantity":100}`, nil, 422, problem.CartLimit,
			map[string]any{"limit": "unitsPerLine", "max": 99.0}},
		{"third line fits", http.MethodPut, "/api/v1/cart/items/73", `{"sellerId":42,"quantity":1}`, []string{}, 0, "", nil}, // third line fits
		{"fourth line", http.MethodPut, "/api/v1/cart/items/74", `{"sellerId":42,"quantity":1}`, nil, 422, problem.CartLimit,
			map[string]any{"limit": "linesPerCart", "max": 3.0}},
	}
	for _, c := range cases {
		a := h.send(c.method, c.path, token, c.body, c.headers...)
		if c.status == 0 {
			require.Equal(t, http.StatusOK, a.status, "%s: %s", c.name, a.raw)
			continue
		}
		assert.Equal(t, c.status, a.status, "%s: %s", c.name, a.raw)
		assert.EqualValues(t, c.code, a.body["code"], "%s: %s", c.name, a.raw)
		for k, v := range c.detail {
			assert.Equal(t, v, a.body[k], "%s: %s", c.name, a.raw)
		}
	}
	got := h.send(http.MethodGet, "/api/v1/cart", token, "")
	assert.Len(t, lines(t, got.body), 3)
	assert.Equal(t, `"3"`, got.header.Get("ETag"), "no refused request wrote")

	zero := h.send(http.MethodPut, "/api/v1/cart/items/72", token, `{"sellerId":42,"quantity":0}`)
	require.Equal(t, http.StatusOK, zero.status, zero.raw)
	assert.NotContains(t, lines(t, zero.body), int64(72), "quantity 0 removes the line")
}

func TestCart_OwnCartOnly(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	alice, bob := h.shopper(7), h.shopper(8)
	path, body := putItem(71, 42, 3)
	require.Equal(t, http.StatusOK, h.send(http.MethodPut, path, alice, body).status)
	guest := h.send(http.MethodPut, "/api/v1/cart/items/72", "", `{"sellerId":42,"quantity":1}`)
	require.Equal(t, http.StatusOK, guest.status, guest.raw)
	guestToken := guest.header.Get(api.GuestTokenHeader)

	bobs := h.send(http.MethodGet, "/api/v1/cart", bob, "")
	require.Equal(t, http.StatusOK, bobs.status)
	assert.Empty(t, bobs.body["items"], "another user's cart is not visible")
	require.Equal(t, http.StatusOK, h.send(http.MethodDelete, path, bob, "").status)
	require.Equal(t, http.StatusOK, h.send(http.MethodPut, path, bob, `{"sellerId":42,"quantity":1}`).status)

	guestView := h.send(http.MethodGet, "/api/v1/cart", "", "", api.GuestTokenHeader, guestToken)
	assert.Equal(t, []int64{72}, keys(lines(t, guestView.body)), "a guest token reads its own cart only")
	forged := h.send(http.MethodGet, "/api/v1/cart", "", "", api.GuestTokenHeader, "u:7")
	assert.Equal(t, http.StatusUnauthorized, forged.status, "a guest token cannot name a member cart")
	assert.EqualValues(t, problem.InvalidGuestToken, forged.body["code"])
	bad := h.send(http.MethodGet, "/api/v1/cart", "not-a-jwt", "", api.GuestTokenHeader, guestToken)
	assert.Equal(t, http.StatusUnauthorized, bad.status, "a bad bearer token never falls back to the guest cart")
	seller := h.send(http.MethodGet, "/api/v1/cart", h.seller(42), "")
	assert.Equal(t, http.StatusForbidden, seller.status)

	mine := h.send(http.MethodGet, "/api/v1/cart", alice, "", api.GuestTokenHeader, guestToken)
	line := lines(t, mine.body)
	assert.Equal(t, []int64{71}, keys(line), "with a bearer token the member cart is used")
	assert.EqualValues(t, 3, line[71]["quantity"], "the other user changed nothing")
}

func keys(m map[int64]map[string]any) []int64 {
	var out []int64
	for k := range m {
		out = append(out, k)
	}
	return out
}

// guestCart fills a guest cart and returns its token.
func guestCart(t *testing.T, h *harness, items map[int64]int) string {
	t.Helper()
	token := ""
	for sku, qty := range items {
		path, body := putItem(sku, sellerOf(sku), qty)
		var r reply
		if token == "" {
			r = h.send(http.MethodPut, path, "", body)
			token = r.header.Get(api.GuestTokenHeader)
		} else {
			r = h.send(http.MethodPut, path, "", body, api.GuestTokenHeader, token)
		}
		require.Equal(t, http.StatusOK, r.status, r.raw)
	}
	return token
}

func TestCartMerge_Twice_SumsOnceAndClipsToMaxPerOrder(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	member := h.shopper(7)
	for sku, qty := range map[int64]int{71: 4, 74: 1} {
		path, body := putItem(sku, 42, qty)
		require.Equal(t, http.StatusOK, h.send(http.MethodPut, path, member, body).status)
	}
	token := guestCart(t, h, map[int64]int{71: 3, 73: 4, 82: 1})
	merge := fmt.Sprintf(`{"guestCartToken": %q}`, token)

	first := h.send(http.MethodPost, "/api/v1/cart/merge", member, merge)
	require.Equal(t, http.StatusOK, first.status, first.raw)
	m := first.body["merge"].(map[string]any)
	assert.Equal(t, "MERGED", m["outcome"])
	assert.Equal(t, []any{map[string]any{"skuId": 71.0, "requested": 7.0, "quantity": 5.0, "reason": "maxPerOrder"}},
		m["adjustments"], "4 + 3 of SKU 71 clipped to its maxPerOrder 5")
	want := map[int64]float64{71: 5, 73: 4, 74: 1, 82: 1}
	got := lines(t, first.body)
	require.Len(t, got, len(want))
	for sku, qty := range want {
		assert.Equal(t, qty, got[sku]["quantity"], "SKU %d", sku)
	}
	assert.EqualValues(t, 1, h.scalar(`SELECT count(*) FROM carts WHERE merged_into = 'u:7' AND merged_at IS NOT NULL`))
	version := first.header.Get("ETag")

	second := h.send(http.MethodPost, "/api/v1/cart/merge", member, merge)
	require.Equal(t, http.StatusOK, second.status, second.raw)
	assert.Equal(t, "ALREADY_MERGED", second.body["merge"].(map[string]any)["outcome"])
	assert.Equal(t, version, second.header.Get("ETag"), "a second merge changes nothing")
	for sku, qty := range want {
		assert.Equal(t, qty, lines(t, second.body)[sku]["quantity"], "SKU %d", sku)
	}

	late := h.send(http.MethodPut, "/api/v1/cart/items/75", "", `{"sellerId":42,"quantity":1}`, api.GuestTokenHeader, token)
	assert.Equal(t, http.StatusConflict, late.status, late.raw)
	assert.EqualValues(t, problem.CartMerged, late.body["code"])

	unused := h.send(http.MethodGet, "/api/v1/cart", "", "").header.Get(api.GuestTokenHeader) // issued, never written
	none := h.send(http.MethodPost, "/api/v1/cart/merge", member, fmt.Sprintf(`{"guestCartToken": %q}`, unused))
	require.Equal(t, http.StatusOK, none.status, none.raw)
	assert.Equal(t, "NO_GUEST_CART", none.body["merge"].(map[string]any)["outcome"])
	madeUp := h.send(http.MethodPost, "/api/v1/cart/merge", member, fmt.Sprintf(`{"guestCartToken": %q}`, strings.Repeat("Z", 43)))
	assert.Equal(t, http.StatusBadRequest, madeUp.status, "a token this server did not issue: %s", madeUp.raw)
	assert.EqualValues(t, problem.ValidationFailed, madeUp.body["code"])
	bad := h.send(http.MethodPost, "/api/v1/cart/merge", member, `{"guestCartToken": ""}`)
	assert.Equal(t, http.StatusBadRequest, bad.status)
	guest := h.send(http.MethodPost, "/api/v1/cart/merge", "", merge, api.GuestTokenHeader, token)
	assert.Equal(t, http.StatusUnauthorized, guest.status, "merge needs the signed-in shopper")
}

func TestCartMerge_ConcurrentRequests_SumOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	member := h.shopper(8)
	path, body := putItem(88, 43, 1)
	require.Equal(t, http.StatusOK, h.send(http.MethodPut, path, member, body).status)
	token := guestCart(t, h, map[int64]int{88: 2, 87: 1})
	merge := fmt.Sprintf(`{"guestCartToken": %q}`, token)

	const n = 10
	outcomes := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r := h.send(http.MethodPost, "/api/v1/cart/merge", member, merge)
			if r.status == http.StatusOK {
				outcomes[i] = r.body["merge"].(map[string]any)["outcome"].(string)
			} else {
				outcomes[i] = r.raw
			}
		})
	}
	wg.Wait()
	merged := 0
	for _, o := range outcomes {
		if o == "MERGED" {
			merged++
		} else {
			assert.Equal(t, "ALREADY_MERGED", o)
		}
	}
	assert.Equal(t, 1, merged, "exactly one request merged")
	got := lines(t, h.send(http.MethodGet, "/api/v1/cart", member, "").body)
	assert.EqualValues(t, 3, got[88]["quantity"], "1 + 2, summed once")
	assert.EqualValues(t, 1, got[87]["quantity"])
}

// TestCart_StockHints_FromProjection_CatchUpAfterBurstAndRelayRestart shows the hints come from the
// projection (they do not move while no relay runs) and that the projection catches up with a
// burst of seller stock reports and reservations, and again after the relay restarts.
func TestCart_StockHints_FromProjection_CatchUpAfterBurstAndProjectorRestart(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ctx := context.Background()
	member := h.shopper(604)
	for sku := int64(71); sku <= 90; sku++ {
		path, body := putItem(sku, sellerOf(sku), 1)
		require.Equal(t, http.StatusOK, h.send(http.MethodPut, path, member, body).status)
	}
	newSKU := h.do(http.MethodPut, "/seller-api/v1/skus", h.seller(42),
		`[{"sku":"NEW-9","title":"Yeni","price":"5.00","currency":"TRY","maxPerOrder":3}]`)
	require.Equal(t, http.StatusOK, newSKU.status)
	fresh := int64(newSKU.body["results"].([]any)[0].(map[string]any)["skuId"].(float64))
	path, body := putItem(fresh, 42, 1)
	require.Equal(t, http.StatusOK, h.send(http.MethodPut, path, member, body).status)

	stop := runProjection(t, h)
	inv := inventory.New(h.pool, nil)
	stamp := time.Now().Add(-time.Hour).UTC()
	var wg sync.WaitGroup
	for w := range 10 {
		wg.Go(func() {
			for i := range 10 {
				seller, first, last := int64(42), 71, 81
				if w%2 == 1 {
					seller, first, last = 43, 82, 90
				}
				var rows []string
				for sku := first; sku <= last; sku++ {
					qty := (sku*7 + w*3 + i) % 6 // 0..5: some out of stock, some low
					rows = append(rows, fmt.Sprintf(`{"skuId":%d,"warehouseId":%d,"quantity":%d,"sourceUpdatedAt":%q}`,
						sku, 1+w%3, qty, stamp.Add(time.Duration(i*10+w)*time.Millisecond).Format(time.RFC3339Nano)))
				}
				a := h.do(http.MethodPut, "/seller-api/v1/stocks", h.seller(seller), "["+strings.Join(rows, ",")+"]")
				assert.Equal(t, http.StatusOK, a.status, a.raw)
				order := int64(w*100 + i + 1)
				_, _ = inv.Reserve(ctx, inventory.ReserveRequest{OrderID: order, Lines: []inventory.Line{{SKUID: 74, Quantity: 1}},
					ShipTo: inventory.Location{Lat: 41, Lon: 29}, Hold: time.Hour})
			}
		})
	}
	wg.Wait()

	expected := func() map[int64]string {
		out := map[int64]string{}
		rows, err := h.pool.Query(ctx, `SELECT sku_id, sum(on_hand - reserved)::int FROM inventory WHERE sku_id BETWEEN 71 AND 90 GROUP BY sku_id`)
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			var sku int64
			var n int32
			require.NoError(t, rows.Scan(&sku, &n))
			out[sku] = availability.Hint(n, true, int32(h.cfg.LowStockThreshold))
		}
		require.NoError(t, rows.Err())
		return out
	}
	shown := func() map[int64]string {
		out := map[int64]string{}
		for sku, l := range lines(t, h.send(http.MethodGet, "/api/v1/cart", member, "").body) {
			out[sku] = l["stock"].(string)
		}
		return out
	}
	caughtUp := func() bool {
		want, got := expected(), shown()
		for sku, hint := range want {
			if got[sku] != hint {
				return false
			}
		}
		return true
	}
	require.Eventually(t, caughtUp, 60*time.Second, 25*time.Millisecond, "hints caught up with the burst")
	assert.Equal(t, availability.Unknown, shown()[fresh], "a SKU the projection has no row for")
	low := 0
	for sku, l := range lines(t, h.send(http.MethodGet, "/api/v1/cart", member, "").body) {
		isLow := l["stock"] == availability.LowStock
		assert.Equal(t, isLow, l["available"] != nil, "sku %d: LOW_STOCK names the units left, no other hint does", sku)
		if isLow {
			low++
		}
	}
	require.Positive(t, low, "the burst left some SKU low on stock")

	stop()
	before := shown()[73]
	target, change := availability.OutOfStock, `UPDATE inventory SET on_hand = reserved WHERE sku_id = 73`
	if before == availability.OutOfStock {
		target, change = availability.InStock, `UPDATE inventory SET on_hand = reserved + 100 WHERE sku_id = 73`
	}
	_, err := h.pool.Exec(ctx, change)
	require.NoError(t, err)
	assert.Equal(t, before, shown()[73], "with no projector running the hint does not move: it is not read from the inventory")

	stop = runProjection(t, h)
	defer stop()
	require.Eventually(t, func() bool { return shown()[73] == target }, 60*time.Second, 25*time.Millisecond,
		"a restarted projector applies what changed while it was down")
	assert.True(t, caughtUp())
}

// runProjection runs what feeds the projection in a worker: the outbox relay to a stream of the
// test's own on the test broker, and the projector consuming it.
func runProjection(t *testing.T, h *harness) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b, err := events.Connect(wiring.Events(h.cfg, t.Name()))
	require.NoError(t, err)
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	relay := &outbox.Relay{Pool: h.pool, Broker: b, Log: log, Interval: 10 * time.Millisecond, Prepare: b.EnsureStream}
	p := availability.NewProjector(h.pool, b, nil, log)
	var wg sync.WaitGroup
	wg.Go(func() { _ = relay.Run(ctx) })
	wg.Go(func() { _ = p.Run(ctx) })
	return func() {
		cancel()
		wg.Wait()
		b.Close()
	}
}
