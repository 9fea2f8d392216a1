package kafkasink_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/marketplace/checkout/events"
	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/kafkasink"
	"github.com/marketplace/checkout/outbox"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var quiet = slog.New(slog.NewJSONHandler(io.Discard, nil))

// setup is a test's database, its broker connection and an in-process Kafka whose topic
// checkout.events has the given partitions.
func setup(t *testing.T, partitions int32) (*pgxpool.Pool, *events.Broker, *kfake.Cluster) {
	t.Helper()
	pool := testenv.Pool(t)
	b, err := events.Connect(events.Options{URL: testenv.NATSURL(t), Prefix: testenv.EventsPrefix(t), Replicas: 1,
		MaxAge: time.Hour, MaxBytes: 64 << 20, Log: quiet})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, "checkout.events"))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	return pool, b, cluster
}

// TestSink_EveryEventOnceInOrderPerKey_OnAnInProcessKafka: events the relay published reach the
// Kafka topic — franz-go's in-process cluster (kfake), not a Kafka broker — each once, as the same
// CloudEvents envelope, keyed by its partition key and in order per key; a sink stopped and
// started again goes on from where it was.
func TestSink_EveryEventOnceInOrderPerKey_OnAnInProcessKafka(t *testing.T) {
	t.Parallel()
	pool, b, cluster := setup(t, 3)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	relay := &outbox.Relay{Pool: pool, Broker: b, Log: quiet, Interval: 10 * time.Millisecond, Prepare: b.EnsureStream}
	go func() { _ = relay.Run(ctx) }()
	write := func(orders, each int) {
		for o := range orders {
			for i := 1; i <= each; i++ {
				payload, _ := json.Marshal(events.StockShortfall{OrderID: int64(1 + o), SellerID: 42, SKUID: 77, WarehouseID: 1,
					ReleasedUnits: int32(i)})
				_, err := pool.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
					VALUES ('order', $1, 'order.stock_shortfall', $2)`, strconv.Itoa(1+o), payload)
				require.NoError(t, err)
			}
		}
	}
	run := func() (stop func()) {
		sink, err := kafkasink.New(b, kafkasink.Options{Brokers: cluster.ListenAddrs(), Topic: "checkout.events", Batch: 7}, quiet)
		require.NoError(t, err)
		sctx, scancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() { _ = sink.Run(sctx) })
		return func() { scancel(); wg.Wait(); sink.Close() }
	}
	stop := run()
	write(5, 10)
	read, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics("checkout.events"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	t.Cleanup(read.Close)
	var records []*kgo.Record
	poll := func(want int) {
		deadline := time.Now().Add(time.Minute)
		for len(records) < want && time.Now().Before(deadline) {
			pctx, pcancel := context.WithTimeout(ctx, time.Second)
			read.PollFetches(pctx).EachRecord(func(r *kgo.Record) { records = append(records, r) })
			pcancel()
		}
	}
	poll(50)
	stop() // the sink stops; more events come; a new one goes on from where the first was
	write(5, 10)
	stop = run()
	defer stop()
	poll(100)
	time.Sleep(500 * time.Millisecond)
	pctx, pcancel := context.WithTimeout(ctx, time.Second)
	read.PollFetches(pctx).EachRecord(func(r *kgo.Record) { records = append(records, r) })
	pcancel()

	require.Len(t, records, 100, "each event once")
	v, err := events.NewValidator()
	require.NoError(t, err)
	seen := map[string]bool{}
	last := map[string]int64{}
	for _, r := range records {
		require.NoError(t, v.Validate(r.Value), "the same envelope as on the broker")
		e, err := events.Decode(r.Value)
		require.NoError(t, err)
		assert.False(t, seen[e.ID], "event %s once", e.ID)
		seen[e.ID] = true
		assert.Equal(t, e.PartitionKey, string(r.Key), "keyed by the partition key")
		id, err := strconv.ParseInt(e.ID, 10, 64)
		require.NoError(t, err)
		assert.Greater(t, id, last[e.PartitionKey], "in order per key")
		last[e.PartitionKey] = id
		assert.Equal(t, events.ContentType, string(r.Headers[0].Value))
	}
}

// TestSink_TracedEvent_RecordCarriesTheSinksSpanOfIt: an event whose change was sampled is
// forwarded in a consumer span of its trace, and its Kafka record carries that span's traceparent
// header; an event of an unsampled change carries none.
func TestSink_TracedEvent_RecordCarriesTheSinksSpanOfIt(t *testing.T) {
	t.Parallel()
	pool, b, cluster := setup(t, 1)
	ctx := context.Background()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second) // the client's own 5 s can be too short under load
	defer cancel()
	require.NoError(t, b.EnsureStream(sctx))

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	for i, traceparent := range []string{"00-" + traceID + "-00f067aa0ba902b7-01", ""} {
		payload, _ := json.Marshal(events.StockShortfall{OrderID: 1, SellerID: 42, SKUID: 77, WarehouseID: 1, ReleasedUnits: int32(i + 1)})
		_, err := pool.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, traceparent)
			VALUES ('order', '1', 'order.stock_shortfall', $1, NULLIF($2, ''))`, payload, traceparent)
		require.NoError(t, err)
	}
	_, err := (&outbox.Relay{Pool: pool, Broker: b, Log: quiet}).Once(ctx)
	require.NoError(t, err)

	rec := tracetest.NewSpanRecorder()
	sink, err := kafkasink.New(b, kafkasink.Options{Brokers: cluster.ListenAddrs(), Topic: "checkout.events",
		Tracing: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))}, quiet)
	require.NoError(t, err)
	t.Cleanup(sink.Close)
	n, err := sink.Step(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n)

	read, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics("checkout.events"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	t.Cleanup(read.Close)
	var records []*kgo.Record
	for deadline := time.Now().Add(30 * time.Second); len(records) < 2 && time.Now().Before(deadline); {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		read.PollFetches(pctx).EachRecord(func(r *kgo.Record) { records = append(records, r) })
		pcancel()
	}
	require.Len(t, records, 2)
	spans := rec.Ended()
	require.Len(t, spans, 1, "a span for the traced event alone")
	assert.Equal(t, "process order.stock_shortfall", spans[0].Name())
	assert.Equal(t, traceID, spans[0].SpanContext().TraceID().String())
	header := func(r *kgo.Record, key string) string {
		for _, h := range r.Headers {
			if h.Key == key {
				return string(h.Value)
			}
		}
		return ""
	}
	assert.Equal(t, "00-"+traceID+"-"+spans[0].SpanContext().SpanID().String()+"-01", header(records[0], "traceparent"),
		"the traced event's record continues from the sink's span")
	assert.Empty(t, header(records[1], "traceparent"), "the untraced event's record has no trace context")
}
