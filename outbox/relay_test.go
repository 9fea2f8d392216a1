package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/events"
	"github.com/marketplace/checkout/internal/dev/demo"
	"github.com/marketplace/checkout/internal/dev/natsserver"
	"github.com/marketplace/checkout/internal/dev/pgserver"
	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/internal/metrics"
	"github.com/marketplace/checkout/outbox"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var quiet = slog.New(slog.NewJSONHandler(io.Discard, nil))

// broker connects to url with a stream prefix of the test's own and ensures its stream.
func broker(t *testing.T, url string) *events.Broker {
	t.Helper()
	b, err := events.Connect(events.Options{URL: url, Prefix: testenv.EventsPrefix(t), Replicas: 1,
		MaxAge: time.Hour, MaxBytes: 64 << 20, Name: t.Name(), Log: quiet})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, b.EnsureStream(ctx))
	return b
}

// insertShortfalls writes n order.stock_shortfall events of order aggregate, releasedUnits 1…n
// in order, each in its own transaction.
func insertShortfalls(t *testing.T, pool *pgxpool.Pool, aggregate int64, n int) {
	t.Helper()
	for i := 1; i <= n; i++ {
		payload, _ := json.Marshal(events.StockShortfall{OrderID: aggregate, SellerID: 42, SKUID: 77, WarehouseID: 1,
			ReleasedUnits: int32(i)})
		insertEvent(t, pool, aggregate, events.OrderStockShortfall, payload)
	}
}

// insertEvent writes one event of order aggregate, in its own transaction.
func insertEvent(t *testing.T, pool *pgxpool.Pool, aggregate int64, eventType string, payload []byte) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
		VALUES ('order', $1, $2, $3)`, strconv.FormatInt(aggregate, 10), eventType, payload)
	require.NoError(t, err)
}

// stored is every message of the broker's stream, in stream order.
func stored(t *testing.T, b *events.Broker) []events.Envelope {
	t.Helper()
	ctx := context.Background()
	s, err := b.JetStream().Stream(ctx, events.StreamName(b.Options().Prefix))
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	var out []events.Envelope
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		require.NoError(t, err)
		e, err := events.Decode(m.Data)
		require.NoError(t, err)
		assert.Equal(t, e.ID, m.Header.Get(jetstream.MsgIDHeader), "the broker's de-duplication id is the event's id")
		out = append(out, e)
	}
	return out
}

// outcome is what the relay recorded of the aggregate's event: its failed attempts, whether it was
// set aside, and its last error.
func outcome(t *testing.T, pool *pgxpool.Pool, aggregateID string) (attempts int, dead bool, lastError string) {
	t.Helper()
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT attempts, dead_at IS NOT NULL, coalesce(last_error, '')
		FROM outbox_events WHERE aggregate_id = $1`, aggregateID).Scan(&attempts, &dead, &lastError))
	return attempts, dead, lastError
}

// storedSubjects are the subjects of the events the broker's stream holds, in its order.
func storedSubjects(t *testing.T, b *events.Broker) []string {
	t.Helper()
	var subjects []string
	for _, e := range stored(t, b) {
		subjects = append(subjects, e.Subject)
	}
	return subjects
}

func unpublished(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT count(*) FROM outbox_events WHERE published_at IS NULL AND dead_at IS NULL`).Scan(&n))
	return n
}

func TestRelay_InOrderAndAPoisonEventIsSetAside(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	b := broker(t, testenv.NATSURL(t))
	insertShortfalls(t, pool, 1, 1)
	insertEvent(t, pool, 2, events.OrderStockShortfall,
		[]byte(`{"orderId": 2, "sellerId": 42, "skuId": 77, "warehouseId": 1, "releasedUnits": 9}`))
	insertShortfalls(t, pool, 3, 1)
	var seen []int64
	r := &outbox.Relay{Pool: pool, Broker: b, Log: quiet, MaxAttempts: 3,
		Handlers: map[string]outbox.Handler{events.OrderStockShortfall: func(_ context.Context, e outbox.Event) error {
			if e.AggregateID == "2" {
				return errors.New("downstream refuses")
			}
			seen = append(seen, e.ID)
			return nil
		}}}

	n, err := r.Once(ctx)
	require.Error(t, err)
	assert.NotErrorIs(t, err, outbox.ErrBroker)
	assert.Equal(t, 1, n, "the event before the failing one is published")
	for i := 0; i < 2; i++ {
		n, err = r.Once(ctx)
		require.Error(t, err)
		assert.Zero(t, n, "the events behind a failing one wait: order is kept")
	}
	n, err = r.Once(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, n, "after 3 attempts the failing event is set aside and the next one goes")
	assert.Len(t, seen, 2)
	assert.Less(t, seen[0], seen[1])

	attempts, dead, _ := outcome(t, pool, "2")
	assert.Equal(t, 3, attempts)
	assert.True(t, dead)
	assert.Zero(t, unpublished(t, pool))
	assert.Equal(t, []string{"order/1", "order/2", "order/3"}, storedSubjects(t, b),
		"the set-aside event reached the broker (its handler failed after), once, in its place")
}

// An event larger than the broker takes is refused the same way on every try: it is set aside at
// its first attempt, and the events behind it go on in the same batch instead of waiting out its
// attempts.
func TestRelay_AnEventTheBrokerRefuses_IsSetAsideAtOnce(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	b := broker(t, testenv.NATSURL(t))
	insertShortfalls(t, pool, 1, 1)
	huge, err := json.Marshal(map[string]any{"orderId": 2, "userId": 7, "status": "PENDING", "totalMinor": 100,
		"currency": "TRY", "placedAt": time.Now().UTC(), "items": []map[string]any{{"skuId": 77, "sellerId": 42,
			"title": strings.Repeat("x", 2<<20), "quantity": 1, "unitPriceMinor": 100}}})
	require.NoError(t, err)
	insertEvent(t, pool, 2, events.OrderCreated, huge)
	insertShortfalls(t, pool, 3, 1)
	r := &outbox.Relay{Pool: pool, Broker: b, Log: quiet, MaxAttempts: 20}

	n, err := r.Once(ctx)
	require.NoError(t, err, "not a broker that is down, nor a failure to back off from")
	assert.Equal(t, 2, n, "the events on either side of the refused one go in the same batch")

	attempts, dead, lastError := outcome(t, pool, "2")
	assert.Equal(t, 1, attempts)
	assert.True(t, dead)
	assert.Contains(t, lastError, "maximum payload")
	assert.Zero(t, unpublished(t, pool))
	assert.Equal(t, []string{"order/1", "order/3"}, storedSubjects(t, b))
}

// A relay that dies after the broker stored events and before it marked them (its transaction
// never commits) is followed by one that publishes them again: the broker keeps one copy of each.
func TestRelay_KilledBetweenPublishAndMark_TheBrokerKeepsEachEventOnce(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	b := broker(t, testenv.NATSURL(t))
	insertShortfalls(t, pool, 10, 30)

	ctx, kill := context.WithCancel(context.Background())
	dying := &outbox.Relay{Pool: pool, Broker: killAfter{b: b, n: new(atomic.Int32), after: 20, kill: kill}, Log: quiet}
	_, err := dying.Once(ctx)
	require.Error(t, err, "the relay died mid-batch")
	assert.Equal(t, 30, unpublished(t, pool), "it marked nothing")
	require.Len(t, stored(t, b), 20, "the broker stored what it was sent before the relay died")

	// The dead relay's transaction could not roll back on its cancelled context, so its connection
	// was closed; its backend holds the relay lock until it notices. A live relay tries again, as
	// Run does, until the lock is free.
	dups := &countDuplicates{b: b}
	next := &outbox.Relay{Pool: pool, Broker: dups, Log: quiet}
	var n int
	require.Eventually(t, func() bool {
		var err error
		n, err = next.Once(context.Background())
		require.NoError(t, err)
		return n > 0
	}, time.Minute, 20*time.Millisecond, "the next relay takes the lock once the dead one's session ends")
	assert.Equal(t, 30, n)
	assert.Equal(t, int32(20), dups.n.Load(), "the broker answered the 20 it had as duplicates")
	got := stored(t, b)
	require.Len(t, got, 30, "one copy of each event")
	for i, e := range got {
		var d events.StockShortfall
		require.NoError(t, json.Unmarshal(e.Data, &d))
		assert.EqualValues(t, i+1, d.ReleasedUnits, "in order")
	}
}

type killAfter struct {
	b     *events.Broker
	n     *atomic.Int32
	after int32
	kill  context.CancelFunc
}

func (k killAfter) Publish(ctx context.Context, e events.Envelope) (bool, error) {
	if k.n.Add(1) > k.after {
		k.kill()
		return false, context.Canceled
	}
	return k.b.Publish(ctx, e)
}

type countDuplicates struct {
	b *events.Broker
	n atomic.Int32
}

func (c *countDuplicates) Publish(ctx context.Context, e events.Envelope) (bool, error) {
	dup, err := c.b.Publish(ctx, e)
	if dup {
		c.n.Add(1)
	}
	return dup, err
}

// Many orders' events written at once, each order's one after another: the stream holds every
// order's events in the order they were written, each once.
func TestRelay_ConcurrentWriters_EachOrdersEventsInOrder(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	b := broker(t, testenv.NATSURL(t))
	ctx, cancel := context.WithCancel(context.Background())
	r := &outbox.Relay{Pool: pool, Broker: b, Log: quiet, Interval: 10 * time.Millisecond, BatchSize: 50}
	relays := sync.WaitGroup{}
	for range 2 { // two workers' relays take turns
		relays.Go(func() { _ = r.Run(ctx) })
	}
	const orders, each = 20, 25
	var writers sync.WaitGroup
	for o := range orders {
		writers.Go(func() { insertShortfalls(t, pool, int64(100+o), each) })
	}
	writers.Wait()
	require.Eventually(t, func() bool { return unpublished(t, pool) == 0 }, time.Minute, 50*time.Millisecond)
	cancel()
	relays.Wait()

	got := stored(t, b)
	require.Len(t, got, orders*each)
	next := map[string]int32{}
	for _, e := range got {
		var d events.StockShortfall
		require.NoError(t, json.Unmarshal(e.Data, &d))
		next[e.PartitionKey]++
		require.Equal(t, next[e.PartitionKey], d.ReleasedUnits, "%s: events in the order they were written", e.PartitionKey)
	}
	assert.Len(t, next, orders)
}

// The relays of releases before the broker still run (their workers drain their orders): they
// read the outbox table and mark its rows published without publishing anything. What their code
// writes there, and everything this release writes, must still reach the broker, each once.
func TestRelay_ARelayOfAnEarlierRelease_CannotTakeAnEventFromTheBroker(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	b := broker(t, testenv.NATSURL(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The earlier release's relay, statement for statement (db/queries/outbox.sql as released up to
	// build saga-6), marking everything it finds as fast as it can.
	var legacyMarked atomic.Int64
	legacyDone := make(chan struct{})
	go func() {
		defer close(legacyDone)
		for ctx.Err() == nil {
			_ = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				var locked bool
				if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock(2, 0)`).Scan(&locked); err != nil || !locked {
					return err
				}
				rows, err := tx.Query(ctx, `SELECT id, aggregate_type, aggregate_id, event_type, payload, created_at, attempts
					FROM outbox WHERE published_at IS NULL AND dead_at IS NULL ORDER BY id LIMIT $1`, 200)
				if err != nil {
					return err
				}
				ids, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (int64, error) {
					var id int64
					err := r.Scan(&id, nil, nil, nil, nil, nil, nil)
					return id, err
				})
				if err != nil || len(ids) == 0 {
					return err
				}
				legacyMarked.Add(int64(len(ids)))
				_, err = tx.Exec(ctx, `UPDATE outbox SET published_at = now() WHERE id = ANY ($1::bigint[]) AND published_at IS NULL`, ids)
				return err
			})
			time.Sleep(time.Millisecond)
		}
	}()
	r := &outbox.Relay{Pool: pool, Broker: b, Log: quiet, Interval: 10 * time.Millisecond}
	relayDone := make(chan struct{})
	go func() { _ = r.Run(ctx); close(relayDone) }()

	// An order to announce, as both releases' code does.
	require.NoError(t, demo.Load(ctx, pool))
	var orderID int64
	require.NoError(t, pool.QueryRow(ctx, `
		INSERT INTO orders (user_id, idempotency_key, request_hash, workflow_id, address_id, price_version, total_minor, currency, status)
		SELECT 7, 'k1', 'h', 'wf', a.id, 'pv', 39980, 'TRY', 'FAILED' FROM addresses a WHERE a.user_id = 7 LIMIT 1
		RETURNING id`).Scan(&orderID))
	_, err := pool.Exec(ctx, `INSERT INTO order_items (order_id, sku_id, seller_id, title, quantity, unit_price_minor, currency)
		VALUES ($1, 77, 42, 'Tea', 2, 19990, 'TRY')`, orderID)
	require.NoError(t, err)

	const each = 100
	var writers sync.WaitGroup
	writers.Go(func() { // the earlier release's code: its order events go into outbox
		for i := range each {
			payload, _ := json.Marshal(map[string]any{"orderId": orderID, "status": "FAILED", "code": fmt.Sprintf("C%d", i)})
			_, err := pool.Exec(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
				VALUES ('order', $1, 'order.failed', $2)`, strconv.FormatInt(orderID, 10), payload)
			assert.NoError(t, err)
		}
	})
	writers.Go(func() { insertShortfalls(t, pool, 5, each) }) // this release's
	writers.Wait()
	require.Eventually(t, func() bool { return unpublished(t, pool) == 0 }, time.Minute, 20*time.Millisecond)
	time.Sleep(200 * time.Millisecond) // the legacy relay has had its chance at everything
	cancel()
	<-legacyDone
	<-relayDone

	assert.Zero(t, legacyMarked.Load(), "the earlier release's relay found nothing to take")
	var inOutbox int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox`).Scan(&inOutbox))
	assert.Zero(t, inOutbox, "what the earlier release wrote moved to outbox_events")
	var got []events.Envelope
	for _, e := range stored(t, b) {
		if e.Type != events.StockChanged { // the demo data's stock
			got = append(got, e)
		}
	}
	require.Equal(t, 2*each, len(got), "every event of both releases reached the broker once")
	codes := 0
	for _, e := range got {
		if e.Type != events.OrderFailed {
			continue
		}
		var d events.Order
		require.NoError(t, json.Unmarshal(e.Data, &d))
		assert.Equal(t, fmt.Sprintf("C%d", codes), d.FailureCode, "in the order written")
		require.Len(t, d.Items, 1, "an earlier release's order event carries the order's lines, as this release's do")
		assert.EqualValues(t, 42, d.Items[0].SellerID)
		assert.Equal(t, "399.80", d.Total)
		codes++
	}
	assert.Equal(t, each, codes)
}

// A broker that is down stops the relay: nothing is marked, the broker's failures are counted,
// and once the broker is back (its store kept) the relay goes on by itself, in order, with
// nothing lost.
func TestRelay_BrokerDown_StopsAndResumesByItself(t *testing.T) {
	t.Parallel()
	testenv.SkipIfShort(t, "a nats-server of its own")
	pool := testenv.Pool(t)
	dir := t.TempDir()
	port, err := pgserver.FreePort()
	require.NoError(t, err)
	start := func() *natsserver.Server {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := natsserver.Start(ctx, natsserver.Options{Dir: dir, Port: port})
		require.NoError(t, err)
		return s
	}
	srv := start()
	t.Cleanup(func() { srv.Stop() })
	b := broker(t, srv.URL)
	m := metrics.New()
	r := &outbox.Relay{Pool: pool, Broker: b, Log: quiet, Interval: 10 * time.Millisecond, PublishTimeout: 500 * time.Millisecond,
		BrokerFailures: m.OutboxBrokerFailures, Prepare: b.EnsureStream}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	insertShortfalls(t, pool, 1, 10)
	require.Eventually(t, func() bool { return unpublished(t, pool) == 0 }, 30*time.Second, 20*time.Millisecond)

	srv.Kill()
	insertShortfalls(t, pool, 1, 10)
	require.Eventually(t, func() bool { return counterValue(t, m, "checkout_outbox_broker_failures_total") >= 2 },
		30*time.Second, 50*time.Millisecond, "the relay tries and counts its failures")
	assert.Equal(t, 10, unpublished(t, pool), "nothing is marked while the broker is down")

	srv = start()
	require.Eventually(t, func() bool { return unpublished(t, pool) == 0 }, 30*time.Second, 50*time.Millisecond,
		"the relay goes on by itself")
	got := stored(t, b)
	require.Len(t, got, 20)
	for i, e := range got {
		var d events.StockShortfall
		require.NoError(t, json.Unmarshal(e.Data, &d))
		assert.EqualValues(t, i%10+1, d.ReleasedUnits)
	}
}

func counterValue(t *testing.T, m *metrics.Metrics, name string) float64 {
	t.Helper()
	families, err := m.Registry.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

func TestRelay_Backlog_WaitingEventsAndTheOldestAge_AsGauges(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	m := metrics.New()
	r := &outbox.Relay{Pool: pool, Broker: broker(t, testenv.NATSURL(t)), Log: quiet, MaxAttempts: 1,
		Handlers: map[string]outbox.Handler{events.CartAbandoned: func(context.Context, outbox.Event) error { return errors.New("refused") }}}
	m.RegisterOutboxGauges(r)
	_, err := pool.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, created_at)
		VALUES ('cart', 'u:1', 'cart.abandoned', '{"cartId": "u:1", "userId": 1, "items": [], "lastActivityAt": "2026-01-01T00:00:00Z"}', now() - interval '45 seconds'),
		       ('order', '1', 'order.stock_shortfall', '{"orderId": 1, "sellerId": 42, "skuId": 77, "warehouseId": 1, "releasedUnits": 1}', now() - interval '40 seconds'),
		       ('order', '2', 'order.stock_shortfall', '{"orderId": 2, "sellerId": 42, "skuId": 77, "warehouseId": 1, "releasedUnits": 1}', now())`)
	require.NoError(t, err)

	gauges := func() map[string]float64 {
		out := map[string]float64{}
		families, err := m.Registry.Gather()
		require.NoError(t, err)
		for _, f := range families {
			if f.GetMetric()[0].GetGauge() != nil {
				out[f.GetName()] = f.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return out
	}
	before := gauges()
	assert.EqualValues(t, 3, before["checkout_outbox_pending_events"])
	assert.InDelta(t, 45, before["checkout_outbox_lag_seconds"], 5)
	assert.Zero(t, before["checkout_outbox_scrape_error"])

	_, err = r.Once(ctx)
	require.Error(t, err, "the first event is set aside")
	_, err = r.Once(ctx)
	require.NoError(t, err)
	after := gauges()
	assert.Zero(t, after["checkout_outbox_pending_events"], "published and set-aside events wait no more")
	assert.Zero(t, after["checkout_outbox_lag_seconds"])
}
