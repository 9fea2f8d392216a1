package api_test

import (
	"context"
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

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/marketplace/checkout/api"
	"github.com/marketplace/checkout/cart"
	"github.com/marketplace/checkout/events"
	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/codec"
	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/internal/dev/demo"
	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/internal/metrics"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/internal/wiring"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/payment/paysim"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type harness struct {
	t       testing.TB
	e       *echo.Echo
	pool    *pgxpool.Pool
	cfg     config.Config
	carts   *cart.Cache
	metrics *metrics.Metrics
	codec   *codec.Codec
	// logs holds the API's log lines.
	logs *logBuffer
}

// logBuffer keeps the last log lines written to it (up to about 1 MiB), for any goroutine.
type logBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.buf) > 1<<20 {
		b.buf = b.buf[:0]
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

func newHarness(t testing.TB, temporal api.TemporalClient) *harness {
	t.Helper()
	return newHarnessOf(t, temporal, nil)
}

// newHarnessOf is the API over a fresh database with the demo data, configured by env over the
// test defaults.
func newHarnessOf(t testing.TB, temporal api.TemporalClient, env map[string]string) *harness {
	t.Helper()
	cfg := testenv.Config(t, env)
	pc, err := cfg.PayloadCodec()
	require.NoError(t, err)
	pool := testenv.Pool(t)
	require.NoError(t, demo.Load(context.Background(), pool))
	m := metrics.New()
	inv := inventory.New(pool, m)
	m.RegisterInventoryGauges(inv)
	logs := &logBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	sim := paysim.New(pool, paysim.Options{PublicBaseURL: "http://localhost:8080", Log: log})
	b := brokerConn(t, cfg.Events.NATSURL, true)
	carts := runCartCache(t, b.Conn(), cfg.Events.Prefix, cart.CacheOptions{Entries: cfg.CartCacheEntries, Log: log})
	e := api.New(api.Deps{Options: wiring.API(cfg), Pool: pool, Inventory: inv, Temporal: temporal, Metrics: m, Log: log,
		PaymentPages: sim, PaymentFaults: sim, CartCache: carts, Codec: pc,
		CartNotices: cart.NewNotices(b.Conn(), events.CartSubject(cfg.Events.Prefix))})
	return &harness{t: t, e: e, pool: pool, cfg: cfg, carts: carts, metrics: m, codec: pc, logs: logs}
}

// scrape reads the process's /metrics as its internal listener serves it.
func (h *harness) scrape() string {
	rec := httptest.NewRecorder()
	h.metrics.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Body.String()
}

func (h *harness) token(p auth.Principal) string {
	h.t.Helper()
	tok, err := auth.Mint([]byte(h.cfg.JWTSecret), p, time.Hour)
	require.NoError(h.t, err)
	return tok
}

func (h *harness) shopper(id int64) string {
	return h.token(auth.Principal{UserID: id, Role: auth.RoleShopper})
}

func (h *harness) seller(id int64) string {
	return h.token(auth.Principal{UserID: 1000 + id, Role: auth.RoleSeller, SellerID: id})
}

type answer struct {
	status int
	body   map[string]any
	raw    string
}

func (h *harness) do(method, path, token, body string) answer {
	h.t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	}
	if token != "" {
		req.Header.Set(echo.HeaderAuthorization, "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.e.ServeHTTP(rec, req)
	a := answer{status: rec.Code, raw: rec.Body.String()}
	_ = json.Unmarshal(rec.Body.Bytes(), &a.body)
	return a
}

func (h *harness) scalar(sql string, args ...any) int64 {
	h.t.Helper()
	var n int64
	require.NoError(h.t, h.pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

func TestErrors_OneModelForEveryFailure(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	shopper := h.shopper(7)
	expired, err := auth.Mint([]byte(h.cfg.JWTSecret), auth.Principal{UserID: 7, Role: auth.RoleShopper}, -time.Hour)
	require.NoError(t, err)
	cases := []struct {
		name, method, path, token, body string
		status                          int
		code                            problem.Code
	}{
		{"unknown route", http.MethodGet, "/api/v1/nothing-here", shopper, "", 404, problem.NotFound},
		{"no token", http.MethodGet, "/api/v1/addresses", "", "", 401, problem.Unauthorized},
		{"garbage token", http.MethodGet, "/api/v1/addresses", "abc.def.ghi", "", 401, problem.Unauthorized},
		{"expired token", http.MethodGet, "/api/v1/addresses", expired, "", 401, problem.Unauthorized},
		{"seller on shopper route", http.MethodGet, "/api/v1/addresses", h.seller(42), "", 403, problem.Forbidden},
		{"shopper on seller route", http.MethodPut, "/seller-api/v1/stocks", shopper, "[]", 403, problem.Forbidden},
		{"malformed JSON", http.MethodPost, "/api/v1/addresses", shopper, `{"city":`, 400, problem.InvalidJSON},
		{"text after the JSON value", http.MethodPost, "/api/v1/addresses", shopper, `{"city":"Izmir"}}`, 400, problem.InvalidJSON},
		{"NUL in text", http.MethodPost, "/api/v1/addresses", shopper, `{"city":"a\u0000","line1":"b","lat":0,"lon":0}`, 400, problem.ValidationFailed},
		{"empty body", http.MethodPost, "/api/v1/addresses", shopper, ``, 400, problem.InvalidJSON},
		{"wrong type", http.MethodPost, "/api/v1/addresses", shopper, `{"city": 5}`, 400, problem.ValidationFailed},
		{"body over 1 MiB", http.MethodPost, "/api/v1/addresses", shopper,
			`{"city": "` + strings.Repeat("x", 1<<20) + `"}`, 413, problem.PayloadTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := h.do(c.method, c.path, c.token, c.body)
			assert.Equal(t, c.status, a.status, a.raw)
			assert.EqualValues(t, c.code, a.body["code"], a.raw)
			assert.NotEmpty(t, a.body["message"])
		})
	}
}

func TestAddresses_OwnOnlyAndValidated(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	a := h.do(http.MethodPost, "/api/v1/addresses", h.shopper(501), `{"city":"Izmir","line1":"Kordon 1","lat":38.43,"lon":27.14}`)
	require.Equal(t, http.StatusCreated, a.status, a.raw)
	assert.NotZero(t, a.body["addressId"])

	mine := h.do(http.MethodGet, "/api/v1/addresses", h.shopper(501), "")
	require.Equal(t, http.StatusOK, mine.status)
	assert.Len(t, mine.body["addresses"], 1)
	other := h.do(http.MethodGet, "/api/v1/addresses", h.shopper(502), "")
	assert.Empty(t, other.body["addresses"], "another shopper sees none of them")

	bad := h.do(http.MethodPost, "/api/v1/addresses", h.shopper(501), `{"city":"","line1":"x","lat":91,"lon":0}`)
	assert.Equal(t, http.StatusBadRequest, bad.status)
	assert.EqualValues(t, problem.ValidationFailed, bad.body["code"])
	var fields []string
	for _, f := range bad.body["fields"].([]any) {
		fields = append(fields, f.(map[string]any)["field"].(string))
	}
	assert.ElementsMatch(t, []string{"city", "lat"}, fields)
	assert.EqualValues(t, 1, h.scalar(`SELECT count(*) FROM addresses WHERE user_id = 501`))
}

// TestAddresses_ConcurrentPostsNeverPassTheLimit: a book five short of the limit gets twenty
// POSTs at once; exactly five are written, the others answer 422 LIMIT_REACHED. (The user's rate
// limit on address writes is turned off, so that all twenty reach the book.)
func TestAddresses_ConcurrentPostsNeverPassTheLimit(t *testing.T) {
	t.Parallel()
	h := newHarnessWithEnv(t, map[string]string{"RATE_LIMIT_ADDRESSES_USER": "off"})
	_, err := h.pool.Exec(context.Background(), `INSERT INTO addresses (user_id, city, line1, lat, lon)
		SELECT 503, 'Ankara', 'Atatürk Bulvarı ' || n, 39.92, 32.85 FROM generate_series(1, $1::int - 5) n`,
		api.MaxAddressesPerUser)
	require.NoError(t, err)
	token := h.shopper(503)
	answers := make([]answer, 20)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = h.do(http.MethodPost, "/api/v1/addresses", token,
				fmt.Sprintf(`{"city":"Izmir","line1":"Kordon %d","lat":38.43,"lon":27.14}`, i))
		}()
	}
	wg.Wait()
	statuses := map[int]int{}
	for _, a := range answers {
		statuses[a.status]++
		if a.status == http.StatusUnprocessableEntity {
			assert.EqualValues(t, problem.LimitReached, a.body["code"], a.raw)
		}
	}
	assert.Equal(t, map[int]int{http.StatusCreated: 5, http.StatusUnprocessableEntity: 15}, statuses)
	assert.EqualValues(t, api.MaxAddressesPerUser, h.scalar(`SELECT count(*) FROM addresses WHERE user_id = 503`))
}

func TestSellerSKUs_CreateThenUpdateMovesPriceVersion(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	body := `[{"sku":"NEW-1","title":"Yeni ürün","price":"199.90","currency":"TRY","maxPerOrder":5}]`
	a := h.do(http.MethodPut, "/seller-api/v1/skus", h.seller(43), body)
	require.Equal(t, http.StatusOK, a.status, a.raw)
	res := a.body["results"].([]any)[0].(map[string]any)
	assert.Equal(t, "CREATED", res["status"])
	id := int64(res["skuId"].(float64))
	assert.EqualValues(t, 1, h.scalar(`SELECT price_version FROM skus WHERE id = $1`, id))

	a = h.do(http.MethodPut, "/seller-api/v1/skus", h.seller(43), strings.Replace(body, "199.90", "219.90", 1))
	require.Equal(t, http.StatusOK, a.status, a.raw)
	assert.Equal(t, "UPDATED", a.body["results"].([]any)[0].(map[string]any)["status"])
	assert.EqualValues(t, 2, h.scalar(`SELECT price_version FROM skus WHERE id = $1`, id))
	assert.EqualValues(t, 21990, h.scalar(`SELECT price_minor FROM skus WHERE id = $1`, id))

	bad := h.do(http.MethodPut, "/seller-api/v1/skus", h.seller(43),
		`[{"sku":"NEW-2","title":"ok","price":"1.00","currency":"TRY","maxPerOrder":1},
		  {"sku":"NEW-3","title":"ok","price":"-5","currency":"try","maxPerOrder":0}]`)
	assert.Equal(t, http.StatusBadRequest, bad.status)
	assert.Len(t, bad.body["fields"], 3)
	assert.Zero(t, h.scalar(`SELECT count(*) FROM skus WHERE code IN ('NEW-2', 'NEW-3')`), "a rejected batch writes nothing")
}

func TestSellerSKUs_PriceInTheCurrencysMinorUnit(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	cases := []struct {
		price, currency string
		minor           int64
	}{{"1500", "JPY", 1500}, {"12.345", "KWD", 12345}, {"12.3", "KWD", 12300}, {"199.9", "TRY", 19990}}
	for i, c := range cases {
		code := fmt.Sprintf("MINOR-%d", i)
		a := h.do(http.MethodPut, "/seller-api/v1/skus", h.seller(43), fmt.Sprintf(
			`[{"sku":%q,"title":"t","price":%q,"currency":%q,"maxPerOrder":5}]`, code, c.price, c.currency))
		require.Equal(t, http.StatusOK, a.status, a.raw)
		assert.Equal(t, c.minor, h.scalar(`SELECT price_minor FROM skus WHERE code = $1`, code), "%s %s", c.price, c.currency)
	}
	for _, c := range []struct{ price, currency string }{{"1500.5", "JPY"}, {"1500.00", "JPY"}, {"12.3456", "KWD"},
		{"1.999", "TRY"}, {"1.00", "XYZ"}} {
		a := h.do(http.MethodPut, "/seller-api/v1/skus", h.seller(43), fmt.Sprintf(
			`[{"sku":"MINOR-BAD","title":"t","price":%q,"currency":%q,"maxPerOrder":5}]`, c.price, c.currency))
		assert.Equal(t, http.StatusBadRequest, a.status, "%s %s: %s", c.price, c.currency, a.raw)
	}
	assert.Zero(t, h.scalar(`SELECT count(*) FROM skus WHERE code = 'MINOR-BAD'`))
}

func TestSellerStocks_AppliedStaleAndShortfall(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ctx := context.Background()
	inv := inventory.New(h.pool, nil)
	for order := int64(1); order <= 5; order++ {
		_, err := inv.Reserve(ctx, inventory.ReserveRequest{OrderID: order, Lines: []inventory.Line{{SKUID: 84, Quantity: 1}},
			ShipTo: inventory.Location{Lat: 38.42, Lon: 27.14}, Hold: time.Minute})
		require.NoError(t, err)
	}
	put := func(body string) answer { return h.do(http.MethodPut, "/seller-api/v1/stocks", h.seller(43), body) }

	a := put(`[{"sku":"S-84","warehouseId":3,"quantity":3,"sourceUpdatedAt":"2026-11-01T10:00:00Z"},
	            {"sku":"S-83","warehouseId":1,"quantity":7,"sourceUpdatedAt":"2026-11-01T10:00:00Z"}]`)
	require.Equal(t, http.StatusOK, a.status, a.raw)
	rows := a.body["results"].([]any)
	assert.Equal(t, "APPLIED_WITH_SHORTFALL", rows[0].(map[string]any)["status"])
	assert.EqualValues(t, 2, rows[0].(map[string]any)["cancelledReservations"])
	assert.Equal(t, "APPLIED", rows[1].(map[string]any)["status"])

	a = put(`[{"sku":"S-83","warehouseId":1,"quantity":1,"sourceUpdatedAt":"2026-11-01T09:00:00Z"}]`)
	require.Equal(t, http.StatusOK, a.status, a.raw)
	assert.Equal(t, "STALE_IGNORED", a.body["results"].([]any)[0].(map[string]any)["status"])
	assert.EqualValues(t, 7, h.scalar(`SELECT on_hand FROM inventory WHERE sku_id = 83 AND warehouse_id = 1`))
}

func TestSellerStocks_BadInput_DocumentedErrorAndNothingWritten(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	good := `{"sku":"S-83","warehouseId":1,"quantity":9,"sourceUpdatedAt":"2026-11-01T10:00:00Z"}`
	var huge strings.Builder
	huge.WriteString("[")
	for i := 0; i <= api.MaxSellerBatch; i++ {
		if i > 0 {
			huge.WriteString(",")
		}
		huge.WriteString(good)
	}
	huge.WriteString("]")
	cases := []struct {
		name, body string
		status     int
		code       problem.Code
	}{
		{"malformed JSON", `[` + good, 400, problem.InvalidJSON},
		{"not an array", good, 400, problem.ValidationFailed},
		{"empty batch", `[]`, 400, problem.ValidationFailed},
		{"negative quantity", `[` + good + `,{"sku":"S-84","warehouseId":3,"quantity":-1,"sourceUpdatedAt":"2026-11-01T10:00:00Z"}]`, 400, problem.ValidationFailed},
		{"fractional quantity", `[{"sku":"S-84","warehouseId":3,"quantity":1.5,"sourceUpdatedAt":"2026-11-01T10:00:00Z"}]`, 400, problem.ValidationFailed},
		{"missing timestamp", `[{"sku":"S-84","warehouseId":3,"quantity":1}]`, 400, problem.ValidationFailed},
		{"timestamp far in the future", `[{"sku":"S-84","warehouseId":3,"quantity":1,"sourceUpdatedAt":"2099-01-01T00:00:00Z"}]`, 400, problem.ValidationFailed},
		{"unknown warehouse", `[` + good + `,{"sku":"S-84","warehouseId":99,"quantity":1,"sourceUpdatedAt":"2026-11-01T10:00:00Z"}]`, 400, problem.ValidationFailed},
		{"unknown SKU code", `[` + good + `,{"sku":"NOPE","warehouseId":1,"quantity":1,"sourceUpdatedAt":"2026-11-01T10:00:00Z"}]`, 404, problem.SKUNotFound},
		{"another seller's SKU code", `[` + good + `,{"sku":"S-71","warehouseId":1,"quantity":1,"sourceUpdatedAt":"2026-11-01T10:00:00Z"}]`, 404, problem.SKUNotFound},
		{"another seller's SKU id", `[` + good + `,{"skuId":71,"warehouseId":1,"quantity":1,"sourceUpdatedAt":"2026-11-01T10:00:00Z"}]`, 403, problem.Forbidden},
		{"oversized batch", huge.String(), 422, problem.BatchTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := h.do(http.MethodPut, "/seller-api/v1/stocks", h.seller(43), c.body)
			assert.Equal(t, c.status, a.status, a.raw)
			assert.EqualValues(t, c.code, a.body["code"], a.raw)
		})
	}
	assert.EqualValues(t, 30, h.scalar(`SELECT on_hand FROM inventory WHERE sku_id = 83 AND warehouse_id = 1`),
		"no rejected batch wrote its valid rows")
	assert.Zero(t, h.scalar(`SELECT count(*) FROM inventory WHERE source_updated_at IS NOT NULL`))
}

func TestReadyz_ReportsDatabaseAndTemporal(t *testing.T) {
	t.Parallel()
	tc, err := client.Dial(client.Options{HostPort: testenv.TemporalAddress(t)})
	require.NoError(t, err)
	t.Cleanup(tc.Close)
	h := newHarness(t, tc)
	a := h.do(http.MethodGet, "/readyz", "", "")
	assert.Equal(t, http.StatusOK, a.status, a.raw)

	down := newHarness(t, nil)
	down.pool.Close()
	a = down.do(http.MethodGet, "/readyz", "", "")
	assert.Equal(t, http.StatusServiceUnavailable, a.status, a.raw)
	assert.Equal(t, map[string]any{"database": "unreachable", "temporal": "not configured"}, a.body["checks"])
}

func TestMetrics_ExposeReservationAndSweeperFigures(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	raw := h.scrape()
	for _, name := range []string{"checkout_active_reservations", "checkout_sweeper_lag_seconds",
		"checkout_expired_active_reservations", "checkout_reservation_attempts_total"} {
		assert.Contains(t, raw, name)
	}
	assert.Contains(t, raw, fmt.Sprintf("checkout_inventory_scrape_error %d", 0))
}

func TestMetrics_NotOnThePublicAPI(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	a := h.do(http.MethodGet, "/metrics", "", "")
	assert.Equal(t, http.StatusNotFound, a.status, a.raw)
	assert.EqualValues(t, problem.NotFound, a.body["code"])
	assert.NotContains(t, a.raw, "checkout_")
}

func TestPaymentFaults_OpsOnlyAndValidated(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ops := h.token(auth.Principal{UserID: 950, Role: auth.RoleOps})
	assert.Equal(t, http.StatusForbidden, h.do(http.MethodPut, "/api/v1/ops/payment-faults", h.shopper(7), `{"downForSeconds": 60}`).status)
	bad := h.do(http.MethodPut, "/api/v1/ops/payment-faults", ops, `{"failureRate": 2}`)
	assert.Equal(t, http.StatusBadRequest, bad.status, bad.raw)

	a := h.do(http.MethodPut, "/api/v1/ops/payment-faults", ops, `{"downForSeconds": 60, "latencyMs": 5}`)
	require.Equal(t, http.StatusOK, a.status, a.raw)
	assert.NotNil(t, a.body["downUntil"])
	assert.EqualValues(t, 5, a.body["latencyMs"])
	assert.Nil(t, a.body["moneyDownUntil"])
	a = h.do(http.MethodPut, "/api/v1/ops/payment-faults", ops, `{"moneyDownForSeconds": 60}`)
	require.Equal(t, http.StatusOK, a.status, a.raw)
	assert.NotNil(t, a.body["moneyDownUntil"])
	assert.Nil(t, a.body["downUntil"], "omitted, so cleared")
	bad = h.do(http.MethodPut, "/api/v1/ops/payment-faults", ops, `{"moneyDownForSeconds": 86401}`)
	assert.Equal(t, http.StatusBadRequest, bad.status, bad.raw)
	assert.Contains(t, bad.raw, "moneyDownForSeconds")
	a = h.do(http.MethodPut, "/api/v1/ops/payment-faults", ops, `{}`)
	require.Equal(t, http.StatusOK, a.status, a.raw)
	assert.Nil(t, a.body["downUntil"], "an empty body brings the provider back")
	assert.Nil(t, a.body["moneyDownUntil"])
}

// bareAPI is the API over pool alone, without Temporal or a payment provider: for the answers
// of a database that is down.
func bareAPI(t *testing.T, pool *pgxpool.Pool) (*echo.Echo, config.Config) {
	cfg := testenv.Config(t, nil)
	m := metrics.New()
	return api.New(api.Deps{Options: wiring.API(cfg), Pool: pool, Inventory: inventory.New(pool, m), Metrics: m,
		Log: slog.New(slog.NewJSONHandler(io.Discard, nil))}), cfg
}

// TestDatabaseDown_503WithRetryAfter: with PostgreSQL unreachable, a request that needs it is
// answered 503 UNAVAILABLE with Retry-After, never a 500.
func TestDatabaseDown_503WithRetryAfter(t *testing.T) {
	t.Parallel()
	pcfg, err := pgxpool.ParseConfig(testenv.DownDatabaseURL(t))
	require.NoError(t, err)
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	e, cfg := bareAPI(t, pool)
	tok, err := auth.Mint([]byte(cfg.JWTSecret), auth.Principal{UserID: 7, Role: auth.RoleShopper}, time.Hour)
	require.NoError(t, err)

	req := httptest.NewRequest(http.MethodGet, "/api/v1/addresses", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
	assert.Contains(t, rec.Body.String(), `"code":"UNAVAILABLE"`)
	assert.NotEmpty(t, rec.Header().Get("Retry-After"))
}
