package api_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/marketplace/checkout/api"
	"github.com/marketplace/checkout/availability"
	"github.com/marketplace/checkout/cart"
	"github.com/marketplace/checkout/events"
	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/dev/demo"
	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/internal/metrics"
	"github.com/marketplace/checkout/internal/wiring"
	"github.com/marketplace/checkout/inventory"
)

// benchUsers is the number of concurrent shoppers, each on their own cart and connection.
const benchUsers = 50

// BenchmarkCartHTTP measures the cart endpoints as shoppers reach them: real HTTP on loopback,
// benchUsers goroutines each with its own keep-alive connection and its own member cart of five
// lines, and beside them, in the same run on the same machine, a bare Echo handler answering a
// fixed JSON body of the same size as a cart (the floor of HTTP and JSON on this machine), and the
// same bare handler after one primary-key read of the cart row (the floor of any handler that
// asks PostgreSQL once). The API runs with its cart cache subscribed to the cart notices on the
// test broker, as `checkout api` does (each PUT announces itself there once committed); the GET
// case reports the share of reads the cache answered.
//
//	TEST_PG_URL=postgres://... go test ./api -run '^$' -bench BenchmarkCartHTTP -benchtime 10s
func BenchmarkCartHTTP(b *testing.B) {
	env := newCartBench(b)
	// Rounds interleave the cases, so that a machine busy with other work weighs on each of them
	// alike; compare the cases within a round.
	for round := 1; round <= benchRounds; round++ {
		b.Run(fmt.Sprintf("round=%d/bare", round), func(b *testing.B) {
			env.run(b, env.bare.URL+"/bare", func(int) (*http.Request, error) {
				return http.NewRequest(http.MethodGet, env.bare.URL+"/bare", nil)
			})
		})
		b.Run(fmt.Sprintf("round=%d/bare+pk", round), func(b *testing.B) {
			env.run(b, env.bare.URL+"/bare", func(user int) (*http.Request, error) {
				return http.NewRequest(http.MethodGet, fmt.Sprintf("%s/pk/%d", env.bare.URL, 20_000+user), nil)
			})
		})
		b.Run(fmt.Sprintf("round=%d/get", round), func(b *testing.B) {
			before := env.carts.Stats()
			env.run(b, env.api.URL+"/healthz", func(user int) (*http.Request, error) {
				req, err := http.NewRequest(http.MethodGet, env.api.URL+"/api/v1/cart", nil)
				if err == nil {
					req.Header.Set("Authorization", "Bearer "+env.tokens[user])
				}
				return req, err
			})
			after := env.carts.Stats()
			if reads := (after.Hits - before.Hits) + (after.Misses - before.Misses); reads > 0 {
				b.ReportMetric(float64(after.Hits-before.Hits)/float64(reads), "cache-hit-ratio")
			}
		})
		b.Run(fmt.Sprintf("round=%d/put", round), func(b *testing.B) { env.runPut(b) })
	}
}

// benchRounds is how many times the three cases alternate in one run.
const benchRounds = 3

type cartBench struct {
	api, bare *httptest.Server
	pool      *pgxpool.Pool
	carts     *cart.Cache
	clients   map[string]*http.Client // one keep-alive pool per server, sized for benchUsers
	tokens    []string
	flip      [benchUsers]int // PUT: only user u's goroutine touches flip[u]
}

func newBenchClient(b *testing.B) *http.Client {
	c := &http.Client{Transport: &http.Transport{MaxIdleConns: benchUsers, MaxIdleConnsPerHost: benchUsers,
		MaxConnsPerHost: benchUsers, IdleConnTimeout: time.Minute}}
	b.Cleanup(c.CloseIdleConnections)
	return c
}

func newCartBench(b *testing.B) *cartBench {
	b.Helper()
	ctx := context.Background()
	// The rate limits stay on (their cost is part of a write) but far above what 50 shoppers on one
	// address send here.
	cfg := testenv.Config(b, map[string]string{"RATE_LIMIT_CART_USER": "1000000/1s", "RATE_LIMIT_CART_IP": "1000000/1s"})
	pool := testenv.PoolOn(b, testenv.DatabaseURL(b), cfg.DBMaxConns)
	if err := demo.Load(ctx, pool); err != nil {
		b.Fatal(err)
	}
	if err := availability.Rebuild(ctx, pool); err != nil {
		b.Fatal(err)
	}
	m := metrics.New()
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	// The cart cache as the API process runs it: subscribed to the cart notices beside the server.
	conn := brokerConn(b, cfg.Events.NATSURL, true).Conn()
	carts := runCartCache(b, conn, cfg.Events.Prefix, cart.CacheOptions{Entries: cfg.CartCacheEntries,
		MaxBytes: int64(cfg.CartCacheMemoryMB) << 20, MaxAge: cfg.CartCacheMaxAge, Log: log})
	e := api.New(api.Deps{Options: wiring.API(cfg), Pool: pool, Inventory: inventory.New(pool, m), Metrics: m, Log: log,
		CartCache: carts, CartNotices: cart.NewNotices(conn, events.CartSubject(cfg.Events.Prefix))})
	env := &cartBench{api: httptest.NewServer(e), clients: map[string]*http.Client{}, pool: pool, carts: carts}
	b.Cleanup(env.api.Close)
	env.clients[env.api.URL] = newBenchClient(b)

	var sample []byte
	for u := range benchUsers {
		tok, err := auth.Mint([]byte(cfg.JWTSecret), auth.Principal{UserID: int64(20_000 + u), Role: auth.RoleShopper}, time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		env.tokens = append(env.tokens, tok)
		for sku := 71; sku <= 75; sku++ {
			req, _ := http.NewRequest(http.MethodPut, fmt.Sprintf("%s/api/v1/cart/items/%d", env.api.URL, sku),
				strings.NewReader(`{"sellerId":42,"quantity":1}`))
			req.Header.Set("Authorization", "Bearer "+tok)
			if sample, err = env.expectOK(req); err != nil {
				b.Fatal(err)
			}
		}
	}

	bare := echo.New()
	bare.HideBanner, bare.HidePort = true, true
	bare.GET("/bare", func(c echo.Context) error { return c.JSONBlob(http.StatusOK, sample) })
	// The floor of any handler that reads PostgreSQL once: the same answer after one primary-key read.
	bare.GET("/pk/:user", func(c echo.Context) error {
		var version int64
		err := pool.QueryRow(c.Request().Context(), `SELECT version FROM carts WHERE id = $1`, "u:"+c.Param("user")).Scan(&version)
		if err != nil {
			return err
		}
		return c.JSONBlob(http.StatusOK, sample)
	})
	env.bare = httptest.NewServer(bare)
	b.Cleanup(env.bare.Close)
	env.clients[env.bare.URL] = newBenchClient(b)
	return env
}

func (env *cartBench) runPut(b *testing.B) {
	env.run(b, env.api.URL+"/healthz", func(user int) (*http.Request, error) {
		// Each user's line alternates between 2 and 1 units, so that every PUT is a real write.
		env.flip[user] ^= 1
		body := fmt.Sprintf(`{"sellerId":42,"quantity":%d}`, 1+env.flip[user])
		req, err := http.NewRequest(http.MethodPut, env.api.URL+"/api/v1/cart/items/74", strings.NewReader(body))
		if err == nil {
			req.Header.Set("Authorization", "Bearer "+env.tokens[user])
			req.Header.Set("Content-Type", "application/json")
		}
		return req, err
	})
}

func (env *cartBench) expectOK(req *http.Request) ([]byte, error) {
	resp, err := env.clients[req.URL.Scheme+"://"+req.URL.Host].Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s %s: %d %s", req.Method, req.URL.Path, resp.StatusCode, body)
	}
	return body, nil
}

// run sends b.N requests from exactly benchUsers goroutines (user u always sends as user u) and
// reports throughput and latency percentiles. Connections are opened before the clock starts.
func (env *cartBench) run(b *testing.B, warmURL string, build func(user int) (*http.Request, error)) {
	var wg sync.WaitGroup
	for range benchUsers {
		wg.Go(func() {
			if req, err := http.NewRequest(http.MethodGet, warmURL, nil); err == nil {
				_, _ = env.expectOK(req)
			}
		})
	}
	wg.Wait()

	var (
		next   atomic.Int64
		failed atomic.Pointer[error]
	)
	lat := make([][]time.Duration, benchUsers)
	b.ResetTimer()
	start := time.Now()
	for u := range benchUsers {
		wg.Go(func() {
			for failed.Load() == nil {
				if next.Add(1) > int64(b.N) {
					return
				}
				req, err := build(u)
				if err != nil {
					failed.Store(&err)
					return
				}
				t0 := time.Now()
				if _, err := env.expectOK(req); err != nil {
					failed.Store(&err)
					return
				}
				lat[u] = append(lat[u], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "req/s")
	b.ReportMetric(benchMs(benchPercentile(all, 0.50)), "p50-ms")
	b.ReportMetric(benchMs(benchPercentile(all, 0.99)), "p99-ms")
}

func benchPercentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(float64(len(sorted))*p)) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func benchMs(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
