package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/marketplace/checkout/api"
	"github.com/marketplace/checkout/features"
	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/internal/dev/demo"
	"github.com/marketplace/checkout/internal/money"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/payment"
)

// FuzzRequestBody sends a body to one of the routes that decode one (bodyRoutes), through the
// whole server (routing, authentication, body limit, decoding, validation, the one error
// handler) over a real database, and checks what any body must get: never a 5xx, an answer in
// JSON, a refusal in the error model with a status and code the route gives, and, when the body
// is accepted, a body within the route's limits, read back with encoding/json as a client writes
// it. One target for every route, so that a run starts one server.
func FuzzRequestBody(f *testing.F) {
	// Every request comes from one shopper and one address: the rate limits would soon answer
	// 429 to all of them, and the bodies would never reach their decoders.
	// Every limit the settings list, so that one added later is off here too.
	off := map[string]string{}
	for _, s := range config.Settings {
		for _, name := range s.Names {
			if strings.HasPrefix(name, "RATE_LIMIT_") {
				off[name] = "off"
			}
		}
	}
	h := newHarnessWithEnv(f, off)
	routes := bodyRoutes(f, h)
	for i, r := range routes {
		for _, s := range r.seeds {
			f.Add(uint8(i), []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		r := routes[int(route)%len(routes)]
		var headers []string
		if r.headers != nil {
			headers = r.headers(body)
		}
		token := ""
		if r.token != nil {
			token = r.token(t)
		}
		a := h.sendBytes(r.method, r.path, token, body, headers...)
		if a.status >= 500 {
			t.Fatalf("%s answered %d: %s", r.name, a.status, a.raw)
		}
		if ct := a.header.Get(echo.HeaderContentType); !strings.HasPrefix(ct, echo.MIMEApplicationJSON) || a.body == nil {
			t.Fatalf("%s answered %d with %q, not a JSON object: %s", r.name, a.status, ct, a.raw)
		}
		if r.accepts(a) {
			r.check(t, body, a)
			return
		}
		codes, ok := r.refused[a.status]
		if !ok {
			t.Fatalf("%s answered %d, which it never answers to a body: %s", r.name, a.status, a.raw)
		}
		code, _ := a.body["code"].(string)
		msg, _ := a.body["message"].(string)
		if !slices.Contains(codes, problem.Code(code)) || msg == "" {
			t.Fatalf("%s refused with %d outside the error model (codes %v): %s", r.name, a.status, codes, a.raw)
		}
	})
}

// bodyRoute is a route that decodes a request body, as FuzzRequestBody sees it.
type bodyRoute struct {
	name         string
	method, path string
	// token is the bearer token of a request (nil: none).
	token func(t *testing.T) string
	// headers are more request headers, name and value pairs, for a body.
	headers func(body []byte) []string
	// accepts tells an answer that accepted the body; check holds that body to the route's limits.
	accepts func(a reply) bool
	check   func(t *testing.T, body []byte, a reply)
	refused refusalCodes
	seeds   []string
}

// refusalCodes are the statuses a route answers to a bad body, each with its error codes.
type refusalCodes map[int][]problem.Code

func bodyRefusals(more refusalCodes) refusalCodes {
	r := refusalCodes{
		http.StatusBadRequest:            {problem.InvalidJSON, problem.ValidationFailed},
		http.StatusRequestEntityTooLarge: {problem.PayloadTooLarge},
	}
	for status, codes := range more {
		r[status] = append(r[status], codes...)
	}
	return r
}

func status(s int) func(reply) bool { return func(a reply) bool { return a.status == s } }

// fuzzUsers hands out a new shopper per input, so that no input meets another's addresses or
// cart and every accepted body reaches the database.
var fuzzUsers atomic.Int64

func init() { fuzzUsers.Store(5_000_000) }

// fuzzToken mints a token for p inside a fuzz function (the harness's helpers belong to the F).
func (h *harness) fuzzToken(t *testing.T, p auth.Principal) string {
	t.Helper()
	tok, err := auth.Mint([]byte(h.cfg.JWTSecret), p, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (h *harness) newShopper(t *testing.T) string {
	return h.fuzzToken(t, auth.Principal{UserID: fuzzUsers.Add(1), Role: auth.RoleShopper})
}

func (h *harness) as(p auth.Principal) func(t *testing.T) string {
	return func(t *testing.T) string { return h.fuzzToken(t, p) }
}

// readAccepted decodes an accepted body as the route's wire shape; a body that is not one JSON
// value of that shape should never have been accepted.
func readAccepted(t *testing.T, body []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("accepted a body that is not one JSON value of the route's shape (%v): %q", err, body)
	}
}

var (
	guestTokenShape   = regexp.MustCompile(`^[A-Za-z0-9_-]{22,128}$`)
	paymentTokenShape = regexp.MustCompile(`^tok_[A-Za-z0-9_]{1,60}$`)
	couponShape       = regexp.MustCompile(`^[A-Za-z0-9_-]{3,32}$`)
	currencyShape     = regexp.MustCompile(`^[A-Z]{3}$`)
)

// bodyRoutes are the routes FuzzRequestBody sends bodies to, with their seeds, over h's demo
// data. Corpus files name a route by its index: add routes at the end.
func bodyRoutes(f *testing.F, h *harness) []bodyRoute {
	return []bodyRoute{
		addressRoute(h), cartItemRoute(h), cartMergeRoute(f, h), previewRoute(f, h), orderRoute(h),
		sellerSKUsRoute(f, h), sellerStocksRoute(h), paymentFaultsRoute(h), featuresRoute(h), webhookRoute(h, true),
		webhookRoute(h, false), lineCancelRoute(h),
	}
}

func addressRoute(h *harness) bodyRoute {
	return bodyRoute{name: "POST /api/v1/addresses", method: http.MethodPost, path: "/api/v1/addresses",
		token: h.newShopper, accepts: status(http.StatusCreated), refused: bodyRefusals(nil),
		check: func(t *testing.T, body []byte, a reply) {
			var req struct {
				City  string   `json:"city"`
				Line1 string   `json:"line1"`
				Lat   *float64 `json:"lat"`
				Lon   *float64 `json:"lon"`
			}
			readAccepted(t, body, &req)
			city, line1 := strings.TrimSpace(req.City), strings.TrimSpace(req.Line1)
			if city == "" || len(city) > 100 || line1 == "" || len(line1) > 300 {
				t.Fatalf("accepted city %q and line1 %q", city, line1)
			}
			if req.Lat == nil || !(*req.Lat >= -90 && *req.Lat <= 90) || req.Lon == nil || !(*req.Lon >= -180 && *req.Lon <= 180) {
				t.Fatalf("accepted lat %v and lon %v", req.Lat, req.Lon)
			}
			if a.body["city"] != city || a.body["line1"] != line1 {
				t.Fatalf("answered %s for city %q and line1 %q", a.raw, city, line1)
			}
		},
		seeds: []string{
			`{"city":"Izmir","line1":"Kordon 1","lat":38.43,"lon":27.14}`,
			`{"city":"  İstanbul ","line1":"Bağdat Cd. 5","lat":-90,"lon":180}`,
			`{"city":"x","line1":"y","lat":90.0000001,"lon":0}`,
			`{"city":"` + strings.Repeat("ç", 50) + `","line1":"y","lat":0,"lon":-180}`,
			`{"city":"\u00e7\t","line1":"y","lat":1e1,"lon":-1E-3}`,
			`{"city":" ","line1":"y","lat":0,"lon":0}`,
			`{"city":"Izmir","line1":"Kordon 1","lat":null,"lon":27.14}`,
			`{"City":"Izmir","LINE1":"Kordon 1","lat":1,"lon":2,"extra":[1,{}]}`,
			`{"city":"a\\u0000b","line1":"y","lat":0,"lon":0}`,
			`{"city":5}`, `[]`, `null`, ``, `{"city":"Izmir"} {}`, `{"city":"Izmir"}]`,
		}}
}

func cartItemRoute(h *harness) bodyRoute {
	const sku = 71
	var limit int64
	for _, s := range demo.SKUs {
		if s.ID == sku {
			limit = min(int64(s.MaxPerOrder), int64(h.cfg.CartMaxUnitsPerLine))
		}
	}
	return bodyRoute{name: "PUT /api/v1/cart/items/71", method: http.MethodPut, path: "/api/v1/cart/items/71",
		token: h.newShopper, accepts: status(http.StatusOK),
		refused: bodyRefusals(refusalCodes{http.StatusUnprocessableEntity: {problem.CartLimit}}),
		check: func(t *testing.T, body []byte, a reply) {
			var req struct {
				SellerID *int64 `json:"sellerId"`
				Quantity *int64 `json:"quantity"`
			}
			readAccepted(t, body, &req)
			if req.SellerID == nil || *req.SellerID != sellerOf(sku) || req.Quantity == nil || *req.Quantity < 0 || *req.Quantity > limit {
				t.Fatalf("accepted %q for SKU %d (seller %d, at most %d a line)", body, sku, sellerOf(sku), limit)
			}
			items, _ := a.body["items"].([]any)
			want := 0
			if *req.Quantity > 0 {
				want = 1
			}
			if len(items) != want || (want == 1 && items[0].(map[string]any)["quantity"] != float64(*req.Quantity)) {
				t.Fatalf("the cart after %q is %s", body, a.raw)
			}
		},
		seeds: []string{
			`{"sellerId":42,"quantity":1}`, `{"sellerId":42,"quantity":0}`, `{"sellerId":42,"quantity":5}`,
			`{"sellerId":42,"quantity":6}`, `{"sellerId":43,"quantity":1}`, `{"sellerId":42,"quantity":1000}`,
			`{"sellerId":42,"quantity":1001}`, `{"sellerId":42,"quantity":-1}`, `{"sellerId":42,"quantity":1.5}`,
			`{"sellerId":42,"quantity":2e0}`, `{"sellerId":"42","quantity":1}`, `{"sellerId":0,"quantity":1}`,
			`{"sellerId":9223372036854775807,"quantity":1}`, `{"sellerId":42,"quantity":99999999999999999999}`,
			`{"quantity":1}`, `{}`, `[{"sellerId":42,"quantity":1}]`,
		}}
}

func cartMergeRoute(f *testing.F, h *harness) bodyRoute {
	path, item := putItem(71, 42, 2)
	guest := h.send(http.MethodPut, path, "", item).header.Get(api.GuestTokenHeader)
	if guest == "" {
		f.Fatal("no guest cart")
	}
	outcomes := []string{"MERGED", "ALREADY_MERGED", "NO_GUEST_CART"}
	return bodyRoute{name: "POST /api/v1/cart/merge", method: http.MethodPost, path: "/api/v1/cart/merge",
		token: h.newShopper, accepts: status(http.StatusOK), refused: bodyRefusals(nil),
		check: func(t *testing.T, body []byte, a reply) {
			var req struct {
				GuestCartToken string `json:"guestCartToken"`
			}
			readAccepted(t, body, &req)
			if !guestTokenShape.MatchString(strings.TrimSpace(req.GuestCartToken)) {
				t.Fatalf("accepted guest token %q", req.GuestCartToken)
			}
			merge, _ := a.body["merge"].(map[string]any)
			if outcome, _ := merge["outcome"].(string); !slices.Contains(outcomes, outcome) {
				t.Fatalf("merge answered %s", a.raw)
			}
		},
		seeds: []string{
			`{"guestCartToken":"` + guest + `"}`, `{"guestCartToken":" ` + guest + `\n"}`,
			`{"guestCartToken":"short"}`, `{"guestCartToken":"` + strings.Repeat("A", 128) + `"}`,
			`{"guestCartToken":"` + strings.Repeat("A", 129) + `"}`, `{"guestCartToken":"` + strings.Repeat("+", 30) + `"}`,
			`{"guestCartToken":null}`, `{"guestCartToken":7}`, `{}`, `"` + guest + `"`,
		}}
}

// previewRoute: the preview's body is optional and holds only a coupon code. A body without one
// (nothing, white space, or an object without a code) answers what no body answers; a code is
// answered with what the coupon does, named as it is stored.
func previewRoute(f *testing.F, h *harness) bodyRoute {
	shopper := auth.Principal{UserID: 7, Role: auth.RoleShopper}
	path, item := putItem(71, 42, 2)
	if a := h.send(http.MethodPut, path, h.token(shopper), item); a.status != http.StatusOK {
		f.Fatalf("cart: %d %s", a.status, a.raw)
	}
	return bodyRoute{name: "POST /api/v1/checkout/preview", method: http.MethodPost, path: "/api/v1/checkout/preview",
		token:   h.as(shopper),
		accepts: status(http.StatusOK), refused: bodyRefusals(nil),
		check: func(t *testing.T, body []byte, a reply) {
			var req struct {
				CouponCode string `json:"couponCode"`
			}
			if len(bytes.TrimSpace(body)) > 0 {
				readAccepted(t, body, &req)
			}
			if req.CouponCode != "" {
				coupon, _ := a.body["coupon"].(map[string]any)
				if !couponShape.MatchString(req.CouponCode) || coupon["code"] != strings.ToUpper(req.CouponCode) {
					t.Fatalf("with body %q the preview is %s", body, a.raw)
				}
				return
			}
			want := h.sendBytes(http.MethodPost, "/api/v1/checkout/preview", h.fuzzToken(t, shopper), nil)
			if a.raw != want.raw {
				t.Fatalf("with body %q the preview is\n%s\nwithout one\n%s", body, a.raw, want.raw)
			}
		},
		seeds: []string{``, ` `, `{}`, `{"priceVersion":"x"}`, `not json`, `[` + strings.Repeat("1,", 100) + `1]`,
			`{"couponCode":"nope"}`, `{"couponCode":"ab"}`, `{"couponCode":"` + strings.Repeat("A", 33) + `"}`,
			`{"couponCode":"a b c"}`, `{"couponCode":7}`, `{"couponCode":""}`}}
}

// orderRoute sends every body as a shopper without addresses: a body that passes validation is
// refused by the address check that follows it, before any workflow starts, and only such a body
// may get that refusal.
func orderRoute(h *harness) bodyRoute {
	return bodyRoute{name: "POST /api/v1/orders", method: http.MethodPost, path: "/api/v1/orders",
		token:   h.newShopper,
		headers: func([]byte) []string { return []string{"Idempotency-Key", "fuzz-order"} },
		accepts: func(a reply) bool {
			fields, _ := json.Marshal(a.body["fields"])
			return a.status == http.StatusBadRequest && string(fields) == `[{"field":"addressId","message":"not one of your addresses"}]`
		},
		refused: bodyRefusals(nil),
		check: func(t *testing.T, body []byte, _ reply) {
			var req struct {
				PriceVersion       string `json:"priceVersion"`
				AddressID          int64  `json:"addressId"`
				PaymentMethodToken string `json:"paymentMethodToken"`
				CouponCode         string `json:"couponCode"`
			}
			readAccepted(t, body, &req)
			if req.PriceVersion == "" || len(req.PriceVersion) > 64 || req.AddressID <= 0 || !paymentTokenShape.MatchString(req.PaymentMethodToken) ||
				(req.CouponCode != "" && !couponShape.MatchString(req.CouponCode)) {
				t.Fatalf("accepted %q", body)
			}
		},
		seeds: []string{
			`{"priceVersion":"v1-abc","addressId":1,"paymentMethodToken":"tok_ok"}`,
			`{"priceVersion":"` + strings.Repeat("p", 64) + `","addressId":9223372036854775807,"paymentMethodToken":"tok_` + strings.Repeat("x", 60) + `"}`,
			`{"priceVersion":"` + strings.Repeat("p", 65) + `","addressId":1,"paymentMethodToken":"tok_3ds"}`,
			`{"priceVersion":"v","addressId":1,"paymentMethodToken":"tok_` + strings.Repeat("x", 61) + `"}`,
			`{"priceVersion":"v","addressId":0,"paymentMethodToken":"tok_"}`,
			`{"priceVersion":"v","addressId":-1,"paymentMethodToken":"TOK_ok"}`,
			`{"priceVersion":"v","addressId":1,"paymentMethodToken":"tok_ok\n"}`,
			`{"priceVersion":"","addressId":1.5,"paymentMethodToken":"tok_ok"}`,
			`{"priceVersion":7,"addressId":"1","paymentMethodToken":null}`,
			`{"priceVersion":"v","addressId":1,"paymentMethodToken":"tok_ok","couponCode":"KASIM-100"}`,
			`{"priceVersion":"v","addressId":1,"paymentMethodToken":"tok_ok","couponCode":"x"}`,
			`{}`, `[]`, ``,
		}}
}

// sellerSKUsRoute writes as a seller of its own, so that the catalog the other routes read stays
// as the demo data has it.
func sellerSKUsRoute(f *testing.F, h *harness) bodyRoute {
	const seller = 44
	if _, err := h.pool.Exec(context.Background(), `INSERT INTO sellers (id, name) VALUES ($1, 'Fuzz')`, seller); err != nil {
		f.Fatal(err)
	}
	return bodyRoute{name: "PUT /seller-api/v1/skus", method: http.MethodPut, path: "/seller-api/v1/skus",
		token:   h.as(auth.Principal{UserID: 1000 + seller, Role: auth.RoleSeller, SellerID: seller}),
		accepts: status(http.StatusOK),
		refused: bodyRefusals(refusalCodes{http.StatusUnprocessableEntity: {problem.BatchTooLarge}}),
		check: func(t *testing.T, body []byte, a reply) {
			var rows []struct {
				SKU         string `json:"sku"`
				Title       string `json:"title"`
				Price       string `json:"price"`
				Currency    string `json:"currency"`
				MaxPerOrder *int32 `json:"maxPerOrder"`
			}
			readAccepted(t, body, &rows)
			results, _ := a.body["results"].([]any)
			if len(rows) == 0 || len(rows) > api.MaxSellerBatch || len(results) != len(rows) {
				t.Fatalf("accepted %d rows, answered %s", len(rows), a.raw)
			}
			for i, r := range rows {
				code, title := strings.TrimSpace(r.SKU), strings.TrimSpace(r.Title)
				_, priceErr := money.Parse(r.Price, r.Currency)
				if code == "" || len(code) > 64 || title == "" || len(title) > 200 || priceErr != nil ||
					!currencyShape.MatchString(r.Currency) || r.MaxPerOrder == nil || *r.MaxPerOrder < 1 || *r.MaxPerOrder > 1000 {
					t.Fatalf("accepted row %d: %+v", i, r)
				}
				res := results[i].(map[string]any)
				if res["sku"] != code || (res["status"] != "CREATED" && res["status"] != "UPDATED") {
					t.Fatalf("row %d (%q) answered %v", i, code, res)
				}
			}
		},
		seeds: []string{
			`[{"sku":"NEW-1","title":"Yeni ürün","price":"199.90","currency":"TRY","maxPerOrder":5}]`,
			`[{"sku":" S-1 ","title":"t","price":"0","currency":"EUR","maxPerOrder":1},
			  {"sku":"` + strings.Repeat("k", 64) + `","title":"` + strings.Repeat("t", 200) + `","price":"9999999999999.99","currency":"USD","maxPerOrder":1000}]`,
			`[{"sku":"` + strings.Repeat("k", 65) + `","title":"t","price":"1","currency":"TRY","maxPerOrder":1}]`,
			`[{"sku":"x","title":"` + strings.Repeat("t", 201) + `","price":"1.5","currency":"TRY","maxPerOrder":1}]`,
			`[{"sku":"x","title":"t","price":"10000000000000.00","currency":"TRY","maxPerOrder":1}]`,
			`[{"sku":"x","title":"t","price":"1.234","currency":"try","maxPerOrder":0}]`,
			`[{"sku":"x","title":"t","price":"-1","currency":"TRY","maxPerOrder":1001}]`,
			`[{"sku":"x","title":"t","price":"01","currency":"TRYY","maxPerOrder":2147483648}]`,
			`[{"sku":"x","title":"t","price":1,"currency":"TRY","maxPerOrder":"1"}]`,
			`[]`, `{}`, `[null]`, ``,
		}}
}

func sellerStocksRoute(h *harness) bodyRoute {
	warehouses := map[int32]bool{}
	for _, w := range demo.Warehouses {
		warehouses[w.ID] = true
	}
	statuses := []string{inventory.StockApplied, inventory.StockStaleIgnored, inventory.StockAppliedWithShortfall}
	return bodyRoute{name: "PUT /seller-api/v1/stocks", method: http.MethodPut, path: "/seller-api/v1/stocks",
		token:   h.as(auth.Principal{UserID: 1043, Role: auth.RoleSeller, SellerID: 43}),
		accepts: status(http.StatusOK),
		refused: bodyRefusals(refusalCodes{
			http.StatusUnprocessableEntity: {problem.BatchTooLarge},
			http.StatusNotFound:            {problem.SKUNotFound},
			http.StatusForbidden:           {problem.Forbidden},
		}),
		check: func(t *testing.T, body []byte, a reply) {
			var rows []struct {
				SKU             string `json:"sku"`
				SKUID           int64  `json:"skuId"`
				WarehouseID     *int32 `json:"warehouseId"`
				Quantity        *int64 `json:"quantity"`
				SourceUpdatedAt string `json:"sourceUpdatedAt"`
			}
			readAccepted(t, body, &rows)
			results, _ := a.body["results"].([]any)
			if len(rows) == 0 || len(rows) > api.MaxSellerBatch || len(results) != len(rows) {
				t.Fatalf("accepted %d rows, answered %s", len(rows), a.raw)
			}
			latest := time.Now().Add(api.MaxFutureSkew)
			for i, r := range rows {
				ts, err := time.Parse(time.RFC3339Nano, r.SourceUpdatedAt)
				if (strings.TrimSpace(r.SKU) == "" && r.SKUID <= 0) || r.WarehouseID == nil || !warehouses[*r.WarehouseID] ||
					r.Quantity == nil || *r.Quantity < 0 || *r.Quantity > 1_000_000_000 || err != nil || ts.IsZero() || ts.After(latest) {
					t.Fatalf("accepted row %d: %+v", i, r)
				}
				if status, _ := results[i].(map[string]any)["status"].(string); !slices.Contains(statuses, status) {
					t.Fatalf("row %d answered %v", i, results[i])
				}
			}
		},
		seeds: []string{
			`[{"sku":"S-84","warehouseId":3,"quantity":3,"sourceUpdatedAt":"2026-11-01T10:00:00Z"}]`,
			`[{"skuId":83,"warehouseId":1,"quantity":0,"sourceUpdatedAt":"2026-11-01T10:00:00.123456789+03:00"},
			  {"sku":" S-84 ","skuId":84,"warehouseId":2,"quantity":1000000000,"sourceUpdatedAt":"0001-01-01T00:00:00.000001Z"}]`,
			`[{"sku":"S-84","warehouseId":3,"quantity":3,"sourceUpdatedAt":"0001-01-01T02:00:00+02:00"}]`,
			`[{"sku":"S-84","warehouseId":3,"quantity":1000000001,"sourceUpdatedAt":"9999-12-31T23:59:59Z"}]`,
			`[{"sku":"S-84","warehouseId":99,"quantity":1,"sourceUpdatedAt":"2026-11-01T10:00:00Z"}]`,
			`[{"sku":"S-84","skuId":83,"warehouseId":1,"quantity":1,"sourceUpdatedAt":"2026-11-01T10:00:00Z"}]`,
			`[{"sku":"S-71","warehouseId":1,"quantity":1,"sourceUpdatedAt":"2026-11-01T10:00:00Z"}]`,
			`[{"skuId":71,"warehouseId":1,"quantity":1,"sourceUpdatedAt":"2026-11-01T10:00:00Z"}]`,
			`[{"skuId":-1,"warehouseId":2147483648,"quantity":-1,"sourceUpdatedAt":"2026-11-01 10:00:00"}]`,
			`[{"sku":"NOPE","warehouseId":1,"quantity":1,"sourceUpdatedAt":""}]`,
			`[]`, `{}`, `[null]`, ``,
		}}
}

func paymentFaultsRoute(h *harness) bodyRoute {
	return bodyRoute{name: "PUT /api/v1/ops/payment-faults", method: http.MethodPut, path: "/api/v1/ops/payment-faults",
		token:   h.as(auth.Principal{UserID: 950, Role: auth.RoleOps}),
		accepts: status(http.StatusOK), refused: bodyRefusals(nil),
		check: func(t *testing.T, body []byte, a reply) {
			var req struct {
				DownForSeconds      *float64 `json:"downForSeconds"`
				MoneyDownForSeconds *float64 `json:"moneyDownForSeconds"`
				LatencyMs           *float64 `json:"latencyMs"`
				FailureRate         *float64 `json:"failureRate"`
			}
			readAccepted(t, body, &req)
			within := func(v *float64, hi float64) bool { return v == nil || (*v >= 0 && *v <= hi) }
			if !within(req.DownForSeconds, 86400) || !within(req.MoneyDownForSeconds, 86400) || !within(req.LatencyMs, 60000) ||
				!within(req.FailureRate, 1) {
				t.Fatalf("accepted %q", body)
			}
			latency, _ := a.body["latencyMs"].(float64)
			rate, _ := a.body["failureRate"].(float64)
			if latency < 0 || latency > 60000 || rate < 0 || rate > 1 {
				t.Fatalf("the switch reads %s after %q", a.raw, body)
			}
		},
		seeds: []string{
			`{}`, `{"downForSeconds":60,"latencyMs":5}`, `{"failureRate":1}`, `{"failureRate":1.0000001}`,
			`{"downForSeconds":86400}`, `{"downForSeconds":86401}`, `{"latencyMs":60000}`, `{"latencyMs":-0}`,
			`{"latencyMs":0.0001}`, `{"downForSeconds":1e-300}`, `{"failureRate":null}`, `{"latencyMs":"5"}`,
			`{"downForSeconds":-1,"latencyMs":60001,"failureRate":-0.1}`, `null`, ``,
			`{"moneyDownForSeconds":600}`, `{"moneyDownForSeconds":-1}`, `{"moneyDownForSeconds":86400.5}`,
		}}
}

func featuresRoute(h *harness) bodyRoute {
	return bodyRoute{name: "PUT /api/v1/ops/features", method: http.MethodPut, path: "/api/v1/ops/features",
		token:   h.as(auth.Principal{UserID: 950, Role: auth.RoleOps}),
		accepts: status(http.StatusOK), refused: bodyRefusals(nil),
		check: func(t *testing.T, body []byte, a reply) {
			var req map[string]*bool
			readAccepted(t, body, &req)
			if len(req) == 0 {
				t.Fatalf("accepted %q, which names no switch", body)
			}
			seen := map[string]bool{}
			for _, f := range a.body["features"].([]any) {
				f := f.(map[string]any)
				seen[f["name"].(string)] = f["enabled"].(bool)
			}
			if len(seen) != len(features.All) {
				t.Fatalf("the answer lists %d switches: %s", len(seen), a.raw)
			}
			for name, on := range req {
				if got, ok := seen[name]; !ok || on == nil || got != *on {
					t.Fatalf("accepted %q: %s is %v in the answer %s", body, name, got, a.raw)
				}
			}
		},
		seeds: []string{
			`{"cart_stock_hints":false}`, `{"cart_stock_hints":true,"preview_stock_warnings":false,"abandoned_cart_events":true}`,
			`{"preview_stock_warnings":true}`, `{"free_shipping":false}`, `{"cart_stock_hints":"off"}`, `{"cart_stock_hints":0}`,
			`{"cart_stock_hints":null}`, `{}`, `[]`, `null`, ``, `{"cart_stock_hints":false,"cart_stock_hints":true}`,
		}}
}

// lineCancelRoute sends every body as ops for an order that does not exist: a body that passes
// validation is answered 404 by the order's look-up that follows it, before any workflow starts,
// and only such a body may get that answer.
func lineCancelRoute(h *harness) bodyRoute {
	return bodyRoute{name: "POST /api/v1/ops/orders/{id}/lines/{lineId}/cancel", method: http.MethodPost,
		path:    "/api/v1/ops/orders/999999999999/lines/71/cancel",
		token:   h.as(auth.Principal{UserID: 950, Role: auth.RoleOps}),
		headers: func([]byte) []string { return []string{"Idempotency-Key", "fuzz-line-cancel"} },
		accepts: func(a reply) bool {
			return a.status == http.StatusNotFound && a.body["code"] == string(problem.NotFound)
		},
		refused: bodyRefusals(nil),
		check: func(t *testing.T, body []byte, _ reply) {
			var req struct {
				Units  int32  `json:"units"`
				Reason string `json:"reason"`
			}
			readAccepted(t, body, &req)
			if req.Units < 1 || req.Units > 1000 || !inventory.ValidCancelReason(req.Reason) {
				t.Fatalf("accepted %q", body)
			}
		},
		seeds: []string{
			`{"units":1,"reason":"damaged"}`, `{"units":1000,"reason":"seller_cannot_ship"}`, `{"units":1001,"reason":"lost"}`,
			`{"units":0,"reason":"lost"}`, `{"units":-1,"reason":"damaged"}`, `{"units":1.5,"reason":"damaged"}`,
			`{"units":"1","reason":"damaged"}`, `{"units":1,"reason":"Damaged"}`, `{"units":1,"reason":""}`,
			`{"units":2147483648,"reason":"lost"}`, `{"units":1}`, `{}`, `[]`, `null`, ``,
		}}
}

// webhookRoute sends each body signed as the provider signs it, or, unsigned, expects 401 for any
// body.
func webhookRoute(h *harness, signed bool) bodyRoute {
	event := `{"id":"evt_1","type":"payment_intent.authorized","created":"2026-11-30T10:00:00Z",` +
		`"intent":{"id":"pi_1","idempotencyKey":"order-1","orderId":1,"status":"AUTHORIZED","amountMinor":100}}`
	r := bodyRoute{name: "POST /api/v1/payments/webhook unsigned", method: http.MethodPost, path: "/api/v1/payments/webhook",
		accepts: func(reply) bool { return false },
		refused: refusalCodes{http.StatusUnauthorized: {problem.InvalidSignature}},
		seeds:   []string{event}}
	if !signed {
		return r
	}
	secret := []byte(h.cfg.PaymentWebhookSecret)
	r.name = "POST /api/v1/payments/webhook"
	r.headers = func(body []byte) []string {
		return []string{payment.SignatureHeader, payment.Sign(secret, body, time.Now())}
	}
	r.accepts = status(http.StatusOK)
	r.refused = refusalCodes{http.StatusBadRequest: {problem.InvalidJSON}, http.StatusRequestEntityTooLarge: {problem.PayloadTooLarge}}
	r.check = func(t *testing.T, body []byte, a reply) {
		var ev struct {
			ID     string `json:"id"`
			Intent struct {
				ID string `json:"id"`
			} `json:"intent"`
		}
		readAccepted(t, body, &ev)
		if ev.ID == "" || ev.Intent.ID == "" || a.body["received"] != true {
			t.Fatalf("accepted %q: %s", body, a.raw)
		}
	}
	r.seeds = []string{event, `{"id":"evt_2","intent":{"id":"pi_2"}}`, `{"id":"","intent":{"id":"pi_3"}}`,
		`{"id":"evt_4"}`, `{"id":"evt_5","intent":{"id":"pi_5","status":7}}`, `[]`, `null`, `not json`, ``}
	return r
}
