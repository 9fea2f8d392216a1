package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Options say where the broker is and how the checkout's stream is kept. The stream's retention,
// replicas and limits are read from here alone (StreamConfig).
type Options struct {
	// URL lists the NATS servers, comma-separated (NATS_URL); a client reconnects to any of them.
	URL string
	// Prefix names the deployment's stream and subjects (EVENTS_PREFIX): stream <PREFIX>_EVENTS on
	// subjects <prefix>.events.<type>, cart notices on <prefix>.cart.changed.
	Prefix string
	// Replicas of the stream (1 on one server, 3 on a three-node cluster).
	Replicas int
	// MaxAge and MaxBytes bound what the stream keeps; past either, the oldest events go.
	MaxAge   time.Duration
	MaxBytes int64
	// Name is the connection's name as the server's monitoring shows it.
	Name string
	// Buffered keeps what is published while disconnected and sends it on reconnecting (cart
	// notices); without it a publish fails at once while disconnected (the relay, which must know).
	Buffered bool
	Log      *slog.Logger
}

// DuplicateWindow is how long the stream remembers an event id: a relay that published an event
// and died before recording it publishes it again within this window (its restart, or a
// database outage) and the stream keeps one copy. Past it a second copy is stored; every consumer
// of ours is idempotent by the event id as well.
const DuplicateWindow = 10 * time.Minute

// StreamName is the stream of the deployment named by prefix.
func StreamName(prefix string) string {
	return strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(prefix)) + "_EVENTS"
}

// Subject is where events of a type are published; SubjectsAll covers every event type.
func Subject(prefix, typ string) string { return prefix + ".events." + typ }

// CartSubject is the core subject (no stream) of the cart caches' notices.
func CartSubject(prefix string) string { return prefix + ".cart.changed" }

// SubjectsAll matches every event of the deployment's stream.
func SubjectsAll(prefix string) string { return prefix + ".events.>" }

// StreamConfig is the checkout's stream: every event, kept by limits (age and size, the oldest go
// first), on files, with the de-duplication window above.
func StreamConfig(o Options) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        StreamName(o.Prefix),
		Description: "The checkout's events (CloudEvents 1.0, docs/events.md)",
		Subjects:    []string{SubjectsAll(o.Prefix)},
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		MaxAge:      o.MaxAge,
		MaxBytes:    o.MaxBytes,
		Storage:     jetstream.FileStorage,
		Replicas:    max(o.Replicas, 1),
		Duplicates:  DuplicateWindow,
	}
}

// Broker is a process's connection to the event broker.
type Broker struct {
	opts      Options
	nc        *nats.Conn
	js        jetstream.JetStream
	connected atomic.Bool
}

// ErrNoBroker: no NATS_URL was given.
var ErrNoBroker = errors.New("NATS_URL is not set")

// Connect opens the connection. A broker that is down does not stop the process: the connection
// keeps trying (and reconnects after any loss), and what needs the broker waits meanwhile.
func Connect(o Options) (*Broker, error) {
	if o.URL == "" {
		return nil, ErrNoBroker
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	b := &Broker{opts: o}
	opts := []nats.Option{nats.Name(o.Name), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true),
		nats.ReconnectWait(250 * time.Millisecond), nats.ReconnectJitter(250*time.Millisecond, time.Second),
		nats.Timeout(2 * time.Second), nats.PingInterval(5 * time.Second), nats.MaxPingsOutstanding(2),
		nats.ConnectHandler(func(*nats.Conn) { b.connected.Store(true) }),
		nats.ReconnectHandler(func(c *nats.Conn) {
			b.connected.Store(true)
			o.Log.Info("event broker: reconnected", "server", c.ConnectedUrlRedacted())
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			b.connected.Store(false)
			if err != nil {
				o.Log.Warn("event broker: disconnected", "error", err)
			}
		}),
		nats.ClosedHandler(func(*nats.Conn) { b.connected.Store(false) }),
	}
	if !o.Buffered {
		opts = append(opts, nats.ReconnectBufSize(-1))
	}
	nc, err := nats.Connect(o.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("NATS_URL %s: %w", o.URL, err)
	}
	b.nc = nc
	b.connected.Store(nc.IsConnected())
	if b.js, err = jetstream.New(nc); err != nil {
		nc.Close()
		return nil, err
	}
	return b, nil
}

// Close drains nothing: what was not acknowledged is published again by its relay.
func (b *Broker) Close() {
	if b != nil && b.nc != nil {
		b.nc.Close()
	}
}

// Connected reports whether the connection is up now.
func (b *Broker) Connected() bool { return b != nil && b.connected.Load() }

// Options are the broker's.
func (b *Broker) Options() Options { return b.opts }

// Conn is the connection, for the core subjects (cart notices) and the consumers.
func (b *Broker) Conn() *nats.Conn { return b.nc }

// JetStream is the connection's JetStream context.
func (b *Broker) JetStream() jetstream.JetStream { return b.js }

// EnsureStream creates the stream or brings its configuration to StreamConfig; run at every
// start, it changes nothing when the stream is as configured.
func (b *Broker) EnsureStream(ctx context.Context) error {
	_, err := b.js.CreateOrUpdateStream(ctx, StreamConfig(b.opts))
	if err != nil {
		return fmt.Errorf("stream %s: %w", StreamName(b.opts.Prefix), err)
	}
	return nil
}

// ErrUnpublishable wraps a publish the broker refuses for the event itself, as it would on every
// try: larger than the server's max_payload. A broker that is down or slow answers otherwise, and
// so does a stream whose largest message was lowered from outside (StreamConfig sets none, and
// EnsureStream puts that back).
var ErrUnpublishable = errors.New("the broker refuses this event")

// Publish sends the envelope to its type's subject with the event id as the broker's
// de-duplication id, and returns once the stream has stored it (dup: it had already). The
// envelope travels in CloudEvents' structured mode; its trace context, if any, also goes as the
// message's traceparent and tracestate headers.
func (b *Broker) Publish(ctx context.Context, e Envelope) (dup bool, err error) {
	body, err := json.Marshal(e)
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrUnpublishable, err)
	}
	m := nats.NewMsg(Subject(b.opts.Prefix, e.Type))
	m.Data = body
	m.Header.Set("Content-Type", ContentType)
	if e.TraceParent != "" {
		m.Header.Set(HeaderTraceparent, e.TraceParent)
		if e.TraceState != "" {
			m.Header.Set(HeaderTracestate, e.TraceState)
		}
	}
	ack, err := b.js.PublishMsg(ctx, m, jetstream.WithMsgID(e.ID), jetstream.WithExpectStream(StreamName(b.opts.Prefix)))
	switch {
	case errors.Is(err, nats.ErrMaxPayload):
		return false, fmt.Errorf("%w: %d bytes of data: %v", ErrUnpublishable, len(body), err)
	case err != nil:
		return false, err
	}
	return ack.Duplicate, nil
}

// ContentType is the CloudEvents structured mode's, as every message carries it.
const ContentType = "application/cloudevents+json"

// Decode reads a message of the stream (or a webhook body) into its envelope.
func Decode(body []byte) (Envelope, error) {
	var e Envelope
	if err := json.Unmarshal(body, &e); err != nil {
		return Envelope{}, err
	}
	if e.SpecVersion != "1.0" || e.ID == "" || e.Type == "" {
		return Envelope{}, fmt.Errorf("not a CloudEvents 1.0 event")
	}
	return e, nil
}

// Fetch takes up to n messages from a pull consumer as soon as any are there: the first to come
// within wait, then, when the broker said more were waiting behind it, up to n-1 of those at once.
// (A plain fetch of n waits for all n or the whole wait, which would add its wait to every event's
// lag; asking for more when none waits is a round trip to the broker for nothing, and at a trickle
// of events that is most of them.)
func Fetch(c jetstream.Consumer, n int, wait time.Duration) ([]jetstream.Msg, error) {
	take := func(b jetstream.MessageBatch, err error) ([]jetstream.Msg, error) {
		if err != nil {
			return nil, err
		}
		var msgs []jetstream.Msg
		for m := range b.Messages() {
			msgs = append(msgs, m)
		}
		if err := b.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && len(msgs) == 0 {
			return nil, err
		}
		return msgs, nil
	}
	msgs, err := take(c.Fetch(1, jetstream.FetchMaxWait(wait)))
	if err != nil || len(msgs) == 0 || n == 1 {
		return msgs, err
	}
	if md, err := msgs[0].Metadata(); err == nil && md.NumPending == 0 {
		return msgs, nil
	}
	more, err := take(c.FetchNoWait(n - 1))
	if err != nil {
		return msgs, nil // the one fetched is applied; the rest comes next time
	}
	return append(msgs, more...), nil
}
