package api_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/api"
	"github.com/marketplace/checkout/cart"
	"github.com/marketplace/checkout/events"
	"github.com/marketplace/checkout/internal/dev/demo"
	"github.com/marketplace/checkout/internal/dev/natsserver"
	"github.com/marketplace/checkout/internal/dev/pgserver"
	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/internal/metrics"
	"github.com/marketplace/checkout/internal/wiring"
	"github.com/marketplace/checkout/inventory"
)

// runCartCache starts a cart cache as the API process does, subscribed over conn to the cart
// notices of the deployment named prefix (its subscription runs until the test ends), and waits
// until it is subscribed.
func runCartCache(t testing.TB, conn *nats.Conn, prefix string, opts cart.CacheOptions) *cart.Cache {
	t.Helper()
	opts.Conn, opts.Subject = conn, events.CartSubject(prefix)
	c := cart.NewCache(opts)
	if c == nil {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("cart cache: %v", err)
		}
	})
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if err := c.WaitListening(wctx, true); err != nil {
		t.Fatalf("cart cache never subscribed: %v", err)
	}
	return c
}

// brokerConn is a process's own connection to the broker at url.
func brokerConn(t testing.TB, url string, buffered bool) *events.Broker {
	t.Helper()
	b, err := events.Connect(events.Options{URL: url, Prefix: "unused", Name: t.Name(), Buffered: buffered,
		Log: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	return b
}

// newProcess is one more API process on pool: its own Echo server, metrics, cart cache and
// connection to the test broker; the processes of one pool share its notices.
func newProcess(t *testing.T, pool *pgxpool.Pool, opts cart.CacheOptions) *harness {
	t.Helper()
	return newProcessAt(t, pool, testenv.NATSURL(t), opts)
}

// newProcessAt is newProcess with the broker at url.
func newProcessAt(t *testing.T, pool *pgxpool.Pool, url string, opts cart.CacheOptions) *harness {
	t.Helper()
	// One shopper writes here far faster than any shopper does: the cart's rate limit is not what
	// these tests are about.
	cfg := testenv.Config(t, map[string]string{"RATE_LIMIT_CART_USER": "off"})
	if opts.Entries == 0 {
		opts.Entries = cfg.CartCacheEntries
	}
	if opts.Heartbeat == 0 {
		// Longer than in production, so that a machine busy with other tests cannot make the
		// lease run out in the middle of a test that counts hits.
		opts.Heartbeat = 5 * time.Second
	}
	opts.Log = slog.New(slog.NewJSONHandler(io.Discard, nil))
	m := metrics.New()
	prefix := "cc_" + pool.Config().ConnConfig.Database
	b := brokerConn(t, url, true)
	carts := runCartCache(t, b.Conn(), prefix, opts)
	notices := cart.NewNotices(b.Conn(), events.CartSubject(prefix))
	e := api.New(api.Deps{Options: wiring.API(cfg), Pool: pool, Inventory: inventory.New(pool, m), Metrics: m, Log: opts.Log,
		CartCache: carts, CartNotices: notices})
	return &harness{t: t, e: e, pool: pool, cfg: cfg, carts: carts, metrics: m}
}

func sharedPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := testenv.Pool(t)
	require.NoError(t, demo.Load(context.Background(), pool))
	return pool
}

// getCart reads the cart of a shopper (token) or a guest (guest token) through h.
func getCart(h *harness, token, guest string) reply {
	h.t.Helper()
	var headers []string
	if guest != "" {
		headers = []string{api.GuestTokenHeader, guest}
	}
	r := h.send(http.MethodGet, "/api/v1/cart", token, "", headers...)
	require.Equal(h.t, http.StatusOK, r.status, r.raw)
	return r
}

// eventually polls GET /cart through h until ok holds for the answer (bounded: the notification
// is on its way from the other process's commit).
func eventually(t *testing.T, h *harness, token, guest, what string, ok func(reply) bool) {
	t.Helper()
	require.Eventually(t, func() bool { return ok(getCart(h, token, guest)) }, 20*time.Second, 2*time.Millisecond, what)
}

func etagIs(want string) func(reply) bool {
	return func(r reply) bool { return r.header.Get("ETag") == want }
}

// TestCartCache_WriteInOneProcess_SeenByAnother: two API processes on one database, each with its
// own cache and listener. B holds a cart in its cache; every kind of cart write made through A —
// a PUT, a DELETE, a merge (both carts), the janitor's deletion — reaches B's answers by
// notification, and B serves from its cache again afterwards.
func TestCartCache_WriteInOneProcess_SeenByAnother(t *testing.T) {
	t.Parallel()
	pool := sharedPool(t)
	a, b := newProcess(t, pool, cart.CacheOptions{}), newProcess(t, pool, cart.CacheOptions{})
	shopper := a.shopper(701)

	path, body := putItem(71, 42, 1)
	require.Equal(t, http.StatusOK, a.send(http.MethodPut, path, shopper, body).status)
	assert.Equal(t, `"1"`, getCart(b, shopper, "").header.Get("ETag"), "B reads the row: a miss")
	hits := b.carts.Stats().Hits
	assert.Equal(t, `"1"`, getCart(b, shopper, "").header.Get("ETag"))
	require.Equal(t, hits+1, b.carts.Stats().Hits, "B now serves version 1 from its cache")

	_, body = putItem(71, 42, 3)
	put := a.send(http.MethodPut, path, shopper, body)
	require.Equal(t, http.StatusOK, put.status, put.raw)
	require.Equal(t, `"2"`, put.header.Get("ETag"))
	eventually(t, b, shopper, "", "B sees A's PUT", func(r reply) bool {
		return r.header.Get("ETag") == `"2"` && lines(t, r.body)[71]["quantity"] == 3.0
	})
	hits = b.carts.Stats().Hits
	getCart(b, shopper, "")
	assert.Equal(t, hits+1, b.carts.Stats().Hits, "and caches it again")

	del := a.send(http.MethodDelete, path, shopper, "")
	require.Equal(t, http.StatusOK, del.status, del.raw)
	eventually(t, b, shopper, "", "B sees A's DELETE", func(r reply) bool {
		return r.header.Get("ETag") == `"3"` && len(lines(t, r.body)) == 0
	})

	// Merge: B holds both the guest cart and the member cart; A merges.
	guest := a.send(http.MethodPut, "/api/v1/cart/items/72", "", `{"sellerId":42,"quantity":2}`)
	require.Equal(t, http.StatusOK, guest.status, guest.raw)
	guestToken := guest.header.Get(api.GuestTokenHeader)
	for range 2 {
		assert.Nil(t, getCart(b, "", guestToken).body["mergedAt"])
		assert.Empty(t, lines(t, getCart(b, shopper, "").body))
	}
	merge := a.send(http.MethodPost, "/api/v1/cart/merge", shopper, fmt.Sprintf(`{"guestCartToken":%q}`, guestToken))
	require.Equal(t, http.StatusOK, merge.status, merge.raw)
	eventually(t, b, shopper, "", "B sees the merged member cart", func(r reply) bool {
		return r.header.Get("ETag") == merge.header.Get("ETag") && lines(t, r.body)[72]["quantity"] == 2.0
	})
	eventually(t, b, "", guestToken, "B sees the guest cart marked merged", func(r reply) bool {
		return r.body["mergedAt"] != nil
	})

	assert.Positive(t, b.carts.Stats().Notifications)
}

// TestCartCache_ChangeNoProcessAnnounced_ServedAtMostMaxAge: the janitor (a worker's job,
// outside any API process) deletes an idle cart B holds, and nothing announces it; B serves its
// copy no longer than CART_CACHE_MAX_AGE after it read it.
func TestCartCache_ChangeNoProcessAnnounced_ServedAtMostMaxAge(t *testing.T) {
	t.Parallel()
	pool := sharedPool(t)
	a := newProcess(t, pool, cart.CacheOptions{})
	b := newProcess(t, pool, cart.CacheOptions{MaxAge: 2 * time.Second})
	shopper := a.shopper(705)
	path, body := putItem(71, 42, 1)
	require.Equal(t, http.StatusOK, a.send(http.MethodPut, path, shopper, body).status)
	_, err := pool.Exec(context.Background(), `UPDATE carts SET updated_at = now() - interval '91 days' WHERE id = $1`,
		cart.MemberID(705))
	require.NoError(t, err)
	getCart(b, shopper, "")
	read := time.Now()
	hits := b.carts.Stats().Hits
	getCart(b, shopper, "")
	require.Equal(t, hits+1, b.carts.Stats().Hits, "B holds the idle cart")
	res, err := (&cart.Janitor{Conn: pool}).DeleteIdle(context.Background(), cart.DefaultIdleTTL)
	require.NoError(t, err)
	require.GreaterOrEqual(t, res.Deleted, 1)
	eventually(t, b, shopper, "", "B sees the janitor's deletion", func(r reply) bool {
		return r.header.Get("ETag") == `"0"` && len(lines(t, r.body)) == 0
	})
	assert.Less(t, time.Since(read), 2*time.Second+time.Second, "within MaxAge of B's read")
}

// TestCartCache_BrokerLost_ClearedAndBypassedUntilSubscribedAgain: the broker goes down; B clears
// its cache and answers from the database while it is not subscribed, so a write made meanwhile —
// when no notice can reach B — is never answered stale; once the broker is back and B is
// subscribed again it serves from its cache and follows notices again.
func TestCartCache_BrokerLost_ClearedAndBypassedUntilSubscribedAgain(t *testing.T) {
	t.Parallel()
	testenv.SkipIfShort(t, "a nats-server of its own")
	pool := sharedPool(t)
	dir := t.TempDir()
	port, err := pgserver.FreePort()
	require.NoError(t, err)
	startBroker := func() *natsserver.Server {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		srv, err := natsserver.Start(ctx, natsserver.Options{Dir: dir, Port: port})
		require.NoError(t, err)
		return srv
	}
	srv := startBroker()
	t.Cleanup(func() { srv.Stop() })
	a := newProcessAt(t, pool, srv.URL, cart.CacheOptions{})
	b := newProcessAt(t, pool, srv.URL, cart.CacheOptions{})
	shopper := a.shopper(702)
	path, body := putItem(71, 42, 1)
	require.Equal(t, http.StatusOK, b.send(http.MethodPut, path, shopper, body).status)
	hits := b.carts.Stats().Hits
	assert.Equal(t, `"1"`, getCart(b, shopper, "").header.Get("ETag"))
	require.Equal(t, hits+1, b.carts.Stats().Hits, "B's own write is in its cache")
	require.Contains(t, b.scrape(), "checkout_cart_cache_listening 1")

	srv.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, b.carts.WaitListening(ctx, false))
	st := b.carts.Stats()
	assert.Zero(t, st.Entries, "losing the connection clears the cache")
	assert.Positive(t, st.Resets)
	assert.Contains(t, b.scrape(), "checkout_cart_cache_listening 0")

	// Outage: A writes; no notice can reach B, and B answers from the database.
	for i, qty := range []int{2, 3} {
		_, body := putItem(71, 42, qty)
		require.Equal(t, http.StatusOK, a.send(http.MethodPut, path, shopper, body).status)
		before := b.carts.Stats()
		for range 3 {
			r := getCart(b, shopper, "")
			assert.Equal(t, fmt.Sprintf(`"%d"`, 2+i), r.header.Get("ETag"), "never the cached version 1")
			assert.EqualValues(t, qty, lines(t, r.body)[71]["quantity"])
		}
		after := b.carts.Stats()
		assert.Equal(t, before.Hits, after.Hits, "bypassed while not listening")
		assert.Equal(t, before.Misses+3, after.Misses)
		assert.Zero(t, after.Entries, "nothing is cached while not listening")
	}
	_, body = putItem(72, 42, 1) // B's own write during the outage
	require.Equal(t, http.StatusOK, b.send(http.MethodPut, "/api/v1/cart/items/72", shopper, body).status)
	assert.Equal(t, `"4"`, getCart(b, shopper, "").header.Get("ETag"))
	assert.False(t, b.carts.Listening())

	srv = startBroker()
	require.NoError(t, b.carts.WaitListening(ctx, true))
	assert.Positive(t, b.carts.Stats().Reconnects)
	assert.Equal(t, `"4"`, getCart(b, shopper, "").header.Get("ETag"))
	hits = b.carts.Stats().Hits
	assert.Equal(t, `"4"`, getCart(b, shopper, "").header.Get("ETag"))
	assert.Equal(t, hits+1, b.carts.Stats().Hits, "serving from the cache again")
	_, body = putItem(71, 42, 5)
	require.Equal(t, http.StatusOK, a.send(http.MethodPut, path, shopper, body).status)
	eventually(t, b, shopper, "", "notices reach B again", etagIs(`"5"`))
}

// TestCartCache_ConcurrentPutsAndGets_NeverOlderThanLastAcknowledgedWrite: writers in process A
// (and one in process B, whose writes reach A only by notification) change one cart concurrently;
// every GET through A shows a version at least as new as the newest write A had acknowledged when
// the GET began, and each version shows exactly the lines its write stored.
func TestCartCache_ConcurrentPutsAndGets_NeverOlderThanLastAcknowledgedWrite(t *testing.T) {
	t.Parallel()
	pool := sharedPool(t)
	a, b := newProcess(t, pool, cart.CacheOptions{}), newProcess(t, pool, cart.CacheOptions{})
	shopper := a.shopper(703)
	const writers, writes = 4, 30

	var acked atomic.Int64 // newest version A acknowledged
	var stored sync.Map    // version -> lines (sku -> quantity) its write stored
	var stop atomic.Bool
	var failures atomic.Int32
	linesOf := func(r reply) string {
		var parts []string
		for _, it := range r.body["items"].([]any) {
			m := it.(map[string]any)
			parts = append(parts, fmt.Sprintf("%v:%v", m["skuId"], m["quantity"]))
		}
		return strings.Join(parts, ",")
	}
	// Each GET's version and lines, checked against what the write of that version stored once
	// every write has been acknowledged (a GET may see a version before its writer has stored it).
	type read struct {
		version int64
		lines   string
	}
	var readsMu sync.Mutex
	var reads []read
	check := func(floor int64, r reply) {
		var v int64
		_, err := fmt.Sscanf(r.header.Get("ETag"), `"%d"`, &v)
		if !assert.NoError(t, err) || !assert.GreaterOrEqual(t, v, floor, "a GET older than an acknowledged write") {
			failures.Add(1)
			return
		}
		readsMu.Lock()
		reads = append(reads, read{v, linesOf(r)})
		readsMu.Unlock()
	}
	write := func(h *harness, w, i int) int64 {
		sku := int64(71 + w)
		path, body := putItem(sku, 42, 1+i%3)
		r := h.send(http.MethodPut, path, shopper, body)
		var v int64
		if !assert.Equal(t, http.StatusOK, r.status, r.raw) {
			failures.Add(1)
			return 0
		}
		if _, err := fmt.Sscanf(r.header.Get("ETag"), `"%d"`, &v); !assert.NoError(t, err) {
			failures.Add(1)
			return 0
		}
		stored.Store(v, linesOf(r))
		return v
	}

	var wg, readers sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range writes {
				v := write(a, w, i)
				for cur := acked.Load(); v > cur && !acked.CompareAndSwap(cur, v); cur = acked.Load() {
				}
				check(v, getCart(a, shopper, "")) // the writer reads its own write
			}
		})
	}
	wg.Go(func() {
		for i := range writes {
			write(b, writers, i)
		}
	})
	for range 2 {
		readers.Go(func() {
			for !stop.Load() {
				floor := acked.Load()
				check(floor, getCart(a, shopper, ""))
			}
		})
	}
	wg.Wait()
	stop.Store(true)
	readers.Wait()
	require.Zero(t, failures.Load())
	require.NotEmpty(t, reads)
	for _, r := range reads {
		want, ok := stored.Load(r.version)
		if r.version == 0 {
			want, ok = "", true // read before the first write: the empty cart
		}
		require.True(t, ok, "version %d was read but no acknowledged write made it", r.version)
		require.Equal(t, want, r.lines, "version %d: a GET shows the lines its write stored", r.version)
	}
	assert.EqualValues(t, (writers+1)*writes, scalarOf(t, pool, `SELECT version FROM carts WHERE id = $1`, cart.MemberID(703)),
		"every write is one version (each PUT changes a quantity)")
	st := a.carts.Stats()
	t.Logf("A's cache: %d hits, %d misses, %d notifications, %d evicted", st.Hits, st.Misses, st.Notifications, st.Evicted)
	assert.Positive(t, st.Hits, "the cache served some of the reads")
}

// TestCartCache_Heartbeats_KeepServingAndApplyWhatArrivesMeanwhile: with a short heartbeat the
// listener makes many round trips; notifications arriving around them are applied, and the
// cache keeps serving.
func TestCartCache_Heartbeats_KeepServingAndApplyWhatArrivesMeanwhile(t *testing.T) {
	t.Parallel()
	pool := sharedPool(t)
	a := newProcess(t, pool, cart.CacheOptions{})
	b := newProcess(t, pool, cart.CacheOptions{Heartbeat: 20 * time.Millisecond})
	shopper := a.shopper(704)
	for i := range 20 {
		_, body := putItem(71, 42, 1+i%2)
		put := a.send(http.MethodPut, "/api/v1/cart/items/71", shopper, body)
		require.Equal(t, http.StatusOK, put.status, put.raw)
		eventually(t, b, shopper, "", "B follows A", etagIs(put.header.Get("ETag")))
	}
	require.Eventually(t, func() bool { return b.carts.Stats().Heartbeats >= 10 }, 20*time.Second, time.Millisecond)
	// (On a very busy machine a round trip may miss its deadline; the listener then clears the
	// cache and reconnects, which is also right: so this asks for a hit eventually.)
	eventually(t, b, shopper, "", "B serves from its cache", func(r reply) bool {
		hits := b.carts.Stats().Hits
		return r.header.Get("ETag") == `"20"` && getCart(b, shopper, "").header.Get("ETag") == `"20"` &&
			b.carts.Stats().Hits > hits
	})
}

func scalarOf(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}
