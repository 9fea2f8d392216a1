package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/cart"
	"github.com/marketplace/checkout/events"
	"github.com/marketplace/checkout/internal/dev/devprometheus"
	"github.com/marketplace/checkout/internal/dev/natsserver"
	"github.com/marketplace/checkout/internal/dev/pgserver"
	"github.com/marketplace/checkout/internal/wiring"
)

// streamed reads every message of the stack's stream so far, in stream order, as raw bodies.
func (s *stack) streamed() [][]byte {
	s.t.Helper()
	b, err := events.Connect(wiring.Events(s.cfg, "e2e-reader"))
	require.NoError(s.t, err)
	defer b.Close()
	st, err := b.JetStream().Stream(s.ctx, events.StreamName(s.cfg.Events.Prefix))
	require.NoError(s.t, err)
	info, err := st.Info(s.ctx)
	require.NoError(s.t, err)
	var out [][]byte
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(s.ctx, seq)
		require.NoError(s.t, err)
		require.Equal(s.t, events.ContentType, m.Header.Get("Content-Type"))
		require.NotEmpty(s.t, m.Header.Get(jetstream.MsgIDHeader))
		out = append(out, m.Data)
	}
	return out
}

func (s *stack) waitOutboxPublished() {
	s.t.Helper()
	require.Eventually(s.t, func() bool {
		return s.scalar(`SELECT count(*) FROM outbox_events WHERE published_at IS NULL AND dead_at IS NULL`) == 0
	}, time.Minute, 50*time.Millisecond, "the relay never published the outbox")
}

// TestEvents_EveryTypeTheRelayPublishes_FollowsItsSchema drives the product through every path
// that writes an event — an order paid at once, a declined one, a cancelled one, a line cancelled
// after payment, a seller's count below what orders hold, an abandoned cart — and holds every
// message the relay put on the broker against the envelope's schema and its type's.
func TestEvents_EveryTypeTheRelayPublishes_FollowsItsSchema(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{hold: time.Minute})

	_, paid := s.confirmedOrder(7, map[int64]int32{71: 1, 72: 2})
	r := s.cancelLine(paid, 72, "evt-"+randomHex(4), 1, "damaged")
	require.Equal(t, http.StatusOK, r.status, r.raw)

	declined := s.shopper(8)
	declined.fill(map[int64]int32{73: 1})
	r = declined.order("k-"+randomHex(6), declined.preview(), "tok_decline")
	require.Equal(t, http.StatusPaymentRequired, r.status, r.raw)

	cancelled := s.shopper(9)
	cancelled.fill(map[int64]int32{74: 1})
	r = cancelled.order("k-"+randomHex(6), cancelled.preview(), "tok_3ds")
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	require.Equal(t, http.StatusOK, s.call(http.MethodPost, fmt.Sprintf("/api/v1/orders/%d/cancel", r.int("orderId")),
		cancelled.token, nil, nil).status)

	sku := s.proofSKU("EVT", 2)
	short := s.placeOrders(2, 1, 60001, sku, "tok_3ds", nil)
	r = s.call(http.MethodPut, "/seller-api/v1/stocks", s.seller(42), nil, []map[string]any{{"sku": "EVT",
		"warehouseId": 1, "quantity": 1, "sourceUpdatedAt": time.Now().UTC().Format(time.RFC3339Nano)}})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	assert.Equal(t, "FAILED", s.waitFinal(short[1].sh.token, short[1].orderID, 30*time.Second).str("status"))

	idle := s.shopper(10)
	idle.fill(map[int64]int32{75: 3})
	_, err := s.pool.Exec(s.ctx, `UPDATE carts SET updated_at = now() - interval '100 days' WHERE user_id = $1`, idle.id)
	require.NoError(t, err)
	j := &cart.Janitor{Conn: s.pool}
	_, err = j.DeleteIdle(context.Background(), 90*24*time.Hour)
	require.NoError(t, err)

	want := []string{events.OrderCreated, events.OrderConfirmed, events.OrderFailed, events.OrderCancelled,
		events.OrderLineCancelled, events.OrderStockShortfall, events.PaymentCaptured, events.PaymentRefunded,
		events.CartAbandoned, events.StockChanged}
	v, err := events.NewValidator()
	require.NoError(t, err)
	var seen []string
	require.Eventually(t, func() bool {
		s.waitOutboxPublished()
		seen = seen[:0]
		for _, body := range s.streamed() {
			e, err := events.Decode(body)
			require.NoError(t, err)
			if !slices.Contains(seen, e.Type) {
				seen = append(seen, e.Type)
			}
		}
		for _, w := range want {
			if !slices.Contains(seen, w) {
				return false
			}
		}
		return true
	}, time.Minute, 200*time.Millisecond, "not every type was published")

	for _, body := range s.streamed() {
		assert.NoError(t, v.Validate(body), "%s", body)
	}
	t.Logf("types published: %v", seen)
}

// TestEvents_BrokerDown30sUnderLoad_NothingLostOrderKept_AlertFiresAndClears kills the broker for
// 30 s while shoppers keep ordering: orders go on (they never wait for the broker), the relay
// stops and the outbox grows, Prometheus (with the product's rules, scraping the worker) fires
// CheckoutEventBrokerUnreachable; once the broker is back the relay goes on by itself, every
// event reaches the stream once and in its order's order, and the alert clears.
func TestEvents_BrokerDown30sUnderLoad_NothingLostOrderKept_AlertFiresAndClears(t *testing.T) {
	t.Parallel()
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
	s := startStack(t, stackOptions{env: map[string]string{"NATS_URL": srv.URL}})

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prom, err := devprometheus.Start(ctx, devprometheus.Options{Dir: t.TempDir(), Interval: time.Second,
		Targets: map[string][]string{"checkout": {strings.TrimSuffix(strings.TrimPrefix(s.metrics, "http://"), "/metrics")}},
		Rules:   []string{"../" + devprometheus.RulesFile}})
	require.NoError(t, err)
	t.Cleanup(prom.Stop)
	alert := func() string { // the alert's state: "" (inactive), pending or firing
		state, err := prom.AlertState(ctx, "CheckoutEventBrokerUnreachable")
		require.NoError(t, err)
		return state
	}

	// Shoppers order paid-at-once orders of three SKUs, one after another, until told to stop.
	skus := []int64{s.proofSKU("LOAD-1", 100000), s.proofSKU("LOAD-2", 100000), s.proofSKU("LOAD-3", 100000)}
	stop := make(chan struct{})
	var placed atomic.Int64
	var load sync.WaitGroup
	for w := range 3 {
		load.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				sh := s.shopper(int64(70000 + w*10000 + i))
				sh.fill(map[int64]int32{skus[(w+i)%3]: 1})
				r := sh.order("k-"+randomHex(6), sh.preview(), "tok_ok")
				if assert.Equal(t, http.StatusCreated, r.status, r.raw) {
					placed.Add(1)
				}
			}
		})
	}
	time.Sleep(3 * time.Second)
	srv.Kill()
	down := time.Now()
	before := placed.Load()
	require.Eventually(t, func() bool { return alert() == "firing" }, 30*time.Second, 250*time.Millisecond,
		"the alert fires while the broker is down")
	time.Sleep(time.Until(down.Add(30 * time.Second)))
	assert.Greater(t, placed.Load()-before, int64(5), "orders went on while the broker was down")
	assert.Positive(t, s.scalar(`SELECT count(*) FROM outbox_events WHERE published_at IS NULL`), "the outbox held them")
	srv = startBroker()
	time.Sleep(3 * time.Second)
	close(stop)
	load.Wait()

	s.waitOutboxPublished()
	require.Eventually(t, func() bool { return alert() == "" }, time.Minute, 250*time.Millisecond,
		"the alert clears once the relay has caught up")

	ids := map[string]int{}
	last := map[string]int64{}
	for _, body := range s.streamed() {
		e, err := events.Decode(body)
		require.NoError(t, err)
		ids[e.ID]++
		id, _ := strconv.ParseInt(e.ID, 10, 64)
		require.Greater(t, id, last[e.PartitionKey], "%s: in order", e.PartitionKey)
		last[e.PartitionKey] = id
	}
	rows, err := s.pool.Query(s.ctx, `SELECT id::text FROM outbox_events`)
	require.NoError(t, err)
	want, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Len(t, ids, len(want), "the stream holds as many events as the outbox wrote")
	for _, id := range want {
		assert.Equal(t, 1, ids[id], "event %s: once", id)
	}
	t.Logf("%d orders (%d during the outage), %d events", placed.Load(), placed.Load()-before, len(want))
}
