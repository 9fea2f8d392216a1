// Package e2e_test drives the whole product as shoppers, sellers and the payment provider do:
// through HTTP only, against the API, a worker, real PostgreSQL and the Temporal dev server.
package e2e_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/marketplace/checkout/api"
	"github.com/marketplace/checkout/cart"
	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/events"
	"github.com/marketplace/checkout/features"
	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/codec"
	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/internal/dev/demo"
	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/internal/metrics"
	"github.com/marketplace/checkout/internal/wiring"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/loadgen"
	"github.com/marketplace/checkout/payment"
	"github.com/marketplace/checkout/payment/paysim"
	"github.com/marketplace/checkout/payment/stripepay"
	"github.com/marketplace/checkout/worker"
	"github.com/marketplace/checkout/workflows"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
)

// TestMain runs the end-to-end tests; every one of them runs the product against real servers
// (PostgreSQL, Temporal, often a whole cluster), so the fast tier (-short) has none of them.
func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("e2e: every test runs the product against real servers: not in the fast tier (-short)")
		os.Exit(0)
	}
	testenv.Main(m)
}

// stack is one running product: API on a real listener, /metrics on another, worker, loops,
// payment simulator.
type stack struct {
	t        *testing.T
	ctx      context.Context
	pool     *pgxpool.Pool
	cfg      config.Config
	temporal client.Client
	// codec is the product's payload codec, as the API and the worker have it.
	codec   *codec.Codec
	base    string
	metrics string // the URL of /metrics
	sim     *paysim.Sim
	http    *http.Client
	deps    worker.Deps
	worker  sdkworker.Worker
	// workerTemporal is the worker's Temporal client: temporal unless workerDial gave it its own.
	workerTemporal client.Client
	cancel         context.CancelFunc
	// tokens, when set, gives shoppers' and sellers' tokens from an identity provider, for an API
	// that takes no token of the shared secret (the cluster's); unset, they are minted with it.
	tokens loadgen.Tokens
	// moneyDown makes the provider refuse to move money (capture, void, refund) as if it were
	// down, while it still answers lookups: an outage the order sees only after it has checked
	// its payment.
	moneyDown *atomic.Bool
}

// moneyDownGateway is the worker's provider, unable to move money while down is set.
type moneyDownGateway struct {
	payment.Gateway
	down *atomic.Bool
}

func (g moneyDownGateway) Capture(ctx context.Context, key payment.Ref) (payment.Intent, error) {
	if g.down.Load() {
		return payment.Intent{}, payment.ErrUnavailable
	}
	return g.Gateway.Capture(ctx, key)
}

func (g moneyDownGateway) Void(ctx context.Context, key payment.Ref) (payment.Intent, error) {
	if g.down.Load() {
		return payment.Intent{}, payment.ErrUnavailable
	}
	return g.Gateway.Void(ctx, key)
}

func (g moneyDownGateway) Refund(ctx context.Context, key payment.Ref) (payment.Intent, error) {
	if g.down.Load() {
		return payment.Intent{}, payment.ErrUnavailable
	}
	return g.Gateway.Refund(ctx, key)
}

type stackOptions struct {
	hold time.Duration
	// stepRetryWindow shortens how long steps retry before an order needs attention.
	stepRetryWindow time.Duration
	// noWorker leaves the worker to the test (started as a separate process).
	noWorker bool
	// noLoops leaves the worker's loops (the outbox relay, the event consumers) to that process
	// too, so that every event is relayed and consumed there.
	noLoops bool
	// gateway, when set, wraps the payment provider the worker calls.
	gateway func(payment.Gateway) payment.Gateway
	// apiTemporal and apiPayments, when set, wrap the Temporal client and the payment provider the
	// API calls.
	apiTemporal func(api.TemporalClient) api.TemporalClient
	apiPayments func(api.PaymentLookup) api.PaymentLookup
	// stripeMock runs the worker and the API on the Stripe adapter against stripe-mock (the
	// simulator still runs, unused by the order).
	stripeMock bool
	// env adds settings.
	env map[string]string
	// workerEnv adds settings the worker alone is given, over env's (the API keeps env's).
	workerEnv map[string]string
	// workerDial, when set, gives the worker a Temporal client of its own, dialled with these
	// options as well (the API's keeps the plain connection).
	workerDial []grpc.DialOption
	// tracer, when set, traces every statement of the product's pool (the API's, the worker's and
	// the loops'); the payment simulator then has a pool of its own, untraced.
	tracer pgx.QueryTracer
}

// quietLog discards the product's logs; E2E_LOG=1 shows them.
func quietLog() *slog.Logger {
	if os.Getenv("E2E_LOG") != "" {
		return slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewJSONHandler(io.Discard, nil))
}

func startStack(t *testing.T, o stackOptions) *stack {
	t.Helper()
	if o.hold == 0 {
		o.hold = time.Minute
	}
	ctx, cancel := context.WithCancel(context.Background())
	dbURL := testenv.DatabaseURL(t)
	pool := testenv.PoolOn(t, dbURL, 60)
	simPool := pool
	if o.tracer != nil {
		traced, err := db.Connect(ctx, dbURL, 60, db.WithTracer(o.tracer))
		require.NoError(t, err)
		t.Cleanup(traced.Close)
		pool = traced
	}
	require.NoError(t, demo.Load(ctx, pool))
	// Order ids name the hold workflows; tests share one Temporal server, so each database
	// numbers its orders in a range of its own.
	start, err := rand.Int(rand.Reader, big.NewInt(1<<40))
	require.NoError(t, err)
	_, err = pool.Exec(ctx, fmt.Sprintf("ALTER TABLE orders ALTER COLUMN id RESTART WITH %d", start.Int64()+1))
	require.NoError(t, err)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	base := "http://" + ln.Addr().String()
	env := map[string]string{"HOLD_TTL": o.hold.String(), "PUBLIC_BASE_URL": base, "DATABASE_URL": dbURL,
		"TEMPORAL_ADDRESS": testenv.TemporalAddress(t), "TEMPORAL_TASK_QUEUE": "e2e-" + randomHex(6),
		"EVENTS_PREFIX": testenv.EventsPrefix(t)}
	if o.stepRetryWindow > 0 {
		env["STEP_RETRY_WINDOW"] = o.stepRetryWindow.String()
	}
	maps.Copy(env, o.env)
	cfg := testenv.Config(t, env)
	workerCfg := cfg
	if len(o.workerEnv) > 0 {
		we := maps.Clone(env)
		maps.Copy(we, o.workerEnv)
		workerCfg = testenv.Config(t, we)
	}
	pc, err := cfg.PayloadCodec()
	require.NoError(t, err)

	tc, err := client.Dial(client.Options{HostPort: cfg.TemporalAddress, Namespace: cfg.TemporalNamespace,
		Logger: sdklog.NewStructuredLogger(quietLog()), DataConverter: pc.DataConverter()})
	require.NoError(t, err)
	require.NoError(t, worker.EnsureSearchAttributes(ctx, tc, cfg.TemporalNamespace))
	wtc := tc
	if len(o.workerDial) > 0 {
		wtc, err = client.Dial(client.Options{HostPort: cfg.TemporalAddress, Namespace: cfg.TemporalNamespace,
			Logger: sdklog.NewStructuredLogger(quietLog()), DataConverter: pc.DataConverter(),
			ConnectionOptions: client.ConnectionOptions{DialOptions: o.workerDial}})
		require.NoError(t, err)
		t.Cleanup(wtc.Close)
	}

	broker, err := events.Connect(wiring.Events(workerCfg, "e2e"))
	require.NoError(t, err)
	m := metrics.New()
	inv := inventory.New(pool, m)
	m.RegisterInventoryGauges(inv)
	switches := features.New(pool, features.Options{TTL: cfg.FeaturesCacheTTL, Log: quietLog()})
	m.RegisterFeatures(switches.Snapshot)
	sim := paysim.New(simPool, paysim.Options{PublicBaseURL: base, WebhookURL: cfg.PaymentWebhookURL,
		WebhookSecret: []byte(cfg.PaymentWebhookSecret), Log: quietLog(), RetryBase: 100 * time.Millisecond,
		RetryMax: time.Second, PollInterval: 100 * time.Millisecond, HoldUntil: api.HoldUntil(pool)})
	subject := events.CartSubject(cfg.Events.Prefix)
	carts := cart.NewCache(cart.CacheOptions{Entries: cfg.CartCacheEntries, Conn: broker.Conn(), Subject: subject,
		MaxAge: cfg.CartCacheMaxAge, Log: quietLog()})
	var apiTemporal api.TemporalClient = tc
	if o.apiTemporal != nil {
		apiTemporal = o.apiTemporal(tc)
	}
	var gateway payment.Gateway = sim
	var webhooks api.WebhookVerifier
	if o.stripeMock {
		gateway = stripepay.New(stripepay.Options{SecretKey: "sk_test_e2e", APIURL: testenv.StripeMock(t), ReturnURL: base})
		webhooks = stripepay.Webhooks{Secret: cfg.PaymentWebhookSecret}
	}
	var apiPayments api.PaymentLookup = gateway
	if o.apiPayments != nil {
		apiPayments = o.apiPayments(gateway)
	}
	e := api.New(api.Deps{Options: wiring.API(cfg), Pool: pool, Inventory: inv, Temporal: apiTemporal, Metrics: m,
		Log: quietLog(), Payments: apiPayments, Webhooks: webhooks, PaymentPages: sim, PaymentFaults: sim, CartCache: carts,
		Codec: pc, Features: switches, CartNotices: cart.NewNotices(broker.Conn(), subject)})
	srv := api.HTTPServer("", e)
	go func() { _ = srv.Serve(ln) }()
	metricsLn, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	metricsSrv := api.HTTPServer("", m.Handler())
	go func() { _ = metricsSrv.Serve(metricsLn) }()
	go func() { _ = sim.RunDeliverer(ctx) }()
	cartsDone := make(chan struct{})
	go func() { _ = carts.Run(ctx); close(cartsDone) }()

	s := &stack{t: t, ctx: ctx, pool: pool, cfg: cfg, temporal: tc, workerTemporal: wtc, codec: pc, base: base, sim: sim, cancel: cancel,
		http: &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 100}},
		deps: worker.Deps{Config: workerCfg, Pool: pool, Inventory: inv, Temporal: tc, Metrics: m, Log: quietLog(), Features: switches,
			Broker: broker},
		moneyDown: &atomic.Bool{}}
	s.deps.Gateway = moneyDownGateway{Gateway: gateway, down: s.moneyDown}
	s.metrics = "http://" + metricsLn.Addr().String() + "/metrics"
	if o.gateway != nil {
		s.deps.Gateway = o.gateway(s.deps.Gateway)
	}
	for _, l := range worker.Loops(s.deps) {
		if !o.noLoops {
			go func() { _ = l.Run(ctx) }()
		}
	}
	if !o.noWorker {
		s.startWorker()
	}
	t.Cleanup(func() {
		cancel()
		<-cartsDone // the listener is off the database before the test drops it
		if s.worker != nil {
			s.worker.Stop()
		}
		_ = srv.Close()
		_ = metricsSrv.Close()
		sim.Close()
		tc.Close()
		broker.Close()
	})
	return s
}

func (s *stack) startWorker() {
	s.worker = worker.New(s.workerTemporal, s.deps)
	require.NoError(s.t, s.worker.Start())
	require.NoError(s.t, worker.SetCurrent(s.ctx, s.temporal, worker.Version(s.cfg, s.deps.BuildID),
		worker.SetCurrentAlways, quietLog()))
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// shopper is one signed-in user with an address.
type shopper struct {
	s       *stack
	id      int64
	token   string
	address int64
}

func (s *stack) shopper(id int64) *shopper {
	var tok string
	var err error
	if s.tokens != nil {
		tok, err = s.tokens.Shopper(s.ctx, id)
	} else {
		tok, err = auth.Mint([]byte(s.cfg.JWTSecret), auth.Principal{UserID: id, Role: auth.RoleShopper}, time.Hour)
	}
	require.NoError(s.t, err)
	sh := &shopper{s: s, id: id, token: tok}
	r := s.call(http.MethodPost, "/api/v1/addresses", tok, nil, map[string]any{"city": "Istanbul", "line1": "Test 1",
		"lat": 41.0, "lon": 29.0})
	require.Equal(s.t, http.StatusCreated, r.status, r.raw)
	sh.address = r.int("addressId")
	return sh
}

func (s *stack) seller(id int64) string {
	if s.tokens != nil {
		tok, err := s.tokens.Seller(s.ctx, id)
		require.NoError(s.t, err)
		return tok
	}
	tok, err := auth.Mint([]byte(s.cfg.JWTSecret), auth.Principal{UserID: 1000 + id, Role: auth.RoleSeller, SellerID: id}, time.Hour)
	require.NoError(s.t, err)
	return tok
}

func (s *stack) support() string {
	tok, err := auth.Mint([]byte(s.cfg.JWTSecret), auth.Principal{UserID: 900, Role: auth.RoleSupport}, time.Hour)
	require.NoError(s.t, err)
	return tok
}

type reply struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func (r reply) int(key string) int64 {
	v, _ := r.body[key].(float64)
	return int64(v)
}

func (r reply) str(path ...string) string {
	var cur any = r.body
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return ""
		}
		cur = m[p]
	}
	s, _ := cur.(string)
	return s
}

// call sends a JSON request; headers are name, value pairs.
func (s *stack) call(method, path, token string, headers []string, body any) reply {
	s.t.Helper()
	return s.callAt(s.base, method, path, token, headers, body)
}

// callAt sends a JSON request to the API at base (another replica of the stack's).
func (s *stack) callAt(base, method, path, token string, headers []string, body any) reply {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(s.t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(s.ctx, method, base+path, rd)
	require.NoError(s.t, err)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return s.do(req)
}

func (s *stack) do(req *http.Request) reply {
	s.t.Helper()
	resp, err := s.http.Do(req)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(s.t, err)
	r := reply{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

// fill puts items in the shopper's cart: skuID → quantity (seller from the demo data).
func (sh *shopper) fill(items map[int64]int32) {
	for sku, q := range items {
		r := sh.s.call(http.MethodPut, fmt.Sprintf("/api/v1/cart/items/%d", sku), sh.token, nil,
			map[string]any{"sellerId": sellerOf(sh.s, sku), "quantity": q})
		require.Equal(sh.s.t, http.StatusOK, r.status, r.raw)
	}
}

func sellerOf(s *stack, sku int64) int64 {
	var seller int64
	require.NoError(s.t, s.pool.QueryRow(s.ctx, `SELECT seller_id FROM skus WHERE id = $1`, sku).Scan(&seller))
	return seller
}

func (sh *shopper) preview() string {
	r := sh.s.call(http.MethodPost, "/api/v1/checkout/preview", sh.token, nil, map[string]any{})
	require.Equal(sh.s.t, http.StatusOK, r.status, r.raw)
	pv := r.str("priceVersion")
	require.NotEmpty(sh.s.t, pv)
	return pv
}

// order places the order with a key and a token.
func (sh *shopper) order(key, priceVersion, token string) reply {
	return sh.s.call(http.MethodPost, "/api/v1/orders", sh.token, []string{"Idempotency-Key", key},
		map[string]any{"priceVersion": priceVersion, "addressId": sh.address, "paymentMethodToken": token})
}

var intentRe = regexp.MustCompile(`/paysim/3ds/(pi_[0-9a-f]+)$`)

// answer3DS presses Approve or Decline on the provider's page, as the browser form does.
func (s *stack) answer3DS(redirectURL, result string) reply {
	s.t.Helper()
	require.Regexp(s.t, intentRe, redirectURL)
	req, err := http.NewRequestWithContext(s.ctx, http.MethodPost, redirectURL, strings.NewReader(url.Values{"result": {result}}.Encode()))
	require.NoError(s.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return s.do(req)
}

// waitFinal polls the order until it leaves PENDING_PAYMENT.
func (s *stack) waitFinal(token string, orderID int64, within time.Duration) reply {
	s.t.Helper()
	deadline := time.Now().Add(within)
	for {
		r := s.call(http.MethodGet, fmt.Sprintf("/api/v1/orders/%d", orderID), token, nil, nil)
		require.Equal(s.t, http.StatusOK, r.status, r.raw)
		switch r.str("status") {
		case "CONFIRMED", "FAILED", "CANCELLED":
			// The saga ends the order's row first and gives back afterwards (stock, then money):
			// what the order shows once it has done so.
			if s.waitSagaClosed(orderID, 15*time.Second) {
				r = s.call(http.MethodGet, fmt.Sprintf("/api/v1/orders/%d", orderID), token, nil, nil)
			}
			return r
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("order %d still %s after %s", orderID, r.str("status"), within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitSagaClosed waits, at most within, for the order's saga to close, and says whether it did
// (an order whose compensation waits for support keeps it open).
func (s *stack) waitSagaClosed(orderID int64, within time.Duration) bool {
	s.t.Helper()
	if s.temporal == nil {
		return false // a cluster's stack, reached through HTTP only
	}
	query := fmt.Sprintf(`OrderId = %d AND WorkflowType = %q AND ExecutionStatus = "Running"`, orderID, workflows.OrderWorkflowName)
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		n, err := s.temporal.CountWorkflow(s.ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: query})
		if err == nil && n.GetCount() == 0 {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

func (s *stack) scalar(sql string, args ...any) int64 {
	s.t.Helper()
	var n int64
	require.NoError(s.t, s.pool.QueryRow(s.ctx, sql, args...).Scan(&n))
	return n
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// recordHistory writes the history of a workflow to RECORD_HISTORIES/name.json when that
// variable is set (`make histories`, which points it at this build's folder): the replay test in
// workflows/ replays these files, so a change that would break running orders fails CI. A kept
// history is never written over. It is written decoded, as histories were before payloads were
// encrypted: the files outlive any key, stay readable, and replay with the SDK's own converter.
func (s *stack) recordHistory(name, workflowID string) {
	s.t.Helper()
	dir := os.Getenv("RECORD_HISTORIES")
	if dir == "" {
		return
	}
	h := s.history(workflowID)
	require.NoError(s.t, s.codec.DecodeMessage(s.ctx, h))
	raw, err := protojson.MarshalOptions{Indent: "  "}.Marshal(h)
	require.NoError(s.t, err)
	require.NoError(s.t, os.MkdirAll(dir, 0o755))
	f, err := os.OpenFile(filepath.Join(dir, name+".json"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	require.NoError(s.t, err, "recorded histories are kept as they are: a changed workflow records under a new build id")
	_, err = f.Write(raw)
	require.NoError(s.t, errors.Join(err, f.Close()))
}

// workflowOf names the order workflow of a shopper's key.
func (sh *shopper) workflowOf(key string) string { return workflows.OrderWorkflowID(sh.id, key) }
