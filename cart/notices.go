package cart

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// Notices announce committed cart writes to every API process's cache over the event broker's
// core subject (no stream: a notice is worth something only to a cache subscribed now). Payload:
// "<cart id> <version>" (the row holds that version: a cached copy of it or newer is still right)
// or "<cart id>" (deleted, or changed with an outcome this process does not know: drop it). A nil
// *Notices announces nothing.
//
// They replaced a trigger's pg_notify on every cart write, whose commit-time lock is one for the
// whole PostgreSQL cluster and made concurrent cart writes commit one at a time
// (docs/benchmarks.md, cart section).
type Notices struct {
	conn    *nats.Conn
	subject string
	sent    atomic.Uint64
	failed  atomic.Uint64
}

// NewNotices announces on subject over conn; nil when conn is nil.
func NewNotices(conn *nats.Conn, subject string) *Notices {
	if conn == nil {
		return nil
	}
	return &Notices{conn: conn, subject: subject}
}

// changed announces a cart's new version (version < 0: drop the cart). A notice the connection
// cannot take is counted and lost: subscribers that were cut off cleared their caches, and MaxAge
// bounds the rest.
func (n *Notices) changed(id string, version int64) {
	if n == nil {
		return
	}
	payload := id
	if version >= 0 {
		payload += " " + strconv.FormatInt(version, 10)
	}
	if err := n.conn.Publish(n.subject, []byte(payload)); err != nil {
		n.failed.Add(1)
		return
	}
	n.sent.Add(1)
}

// Counts are the notices sent and those the connection refused.
func (n *Notices) Counts() (sent, failed uint64) {
	if n == nil {
		return 0, 0
	}
	return n.sent.Load(), n.failed.Load()
}

// Reconnect back-off of the subscription.
const (
	reconnectMin = 100 * time.Millisecond
	reconnectMax = 5 * time.Second
)

// errDropped: the broker's connection dropped notices for this subscriber (it was too slow).
var errDropped = errors.New("notices were dropped for a slow subscriber")

// Run keeps the cache subscribed to the notices until ctx ends, and applies every one. The cache
// serves from the moment the subscription is in place; when the connection is lost, stops
// answering or drops a notice, the cache is cleared and serves nothing until it is subscribed (and
// proved alive) again. A nil cache returns at once. Run returns nil when ctx ends: a cache that
// cannot subscribe only costs database reads, never availability.
func (c *Cache) Run(ctx context.Context) error {
	if c == nil {
		return nil
	}
	if c.opts.Conn == nil {
		<-ctx.Done()
		return nil
	}
	wait := reconnectMin
	for first := true; ; first = false {
		if !first {
			c.reconnects.Add(1)
		}
		subscribed, err := c.subscribe(ctx)
		c.lose()
		if ctx.Err() != nil {
			return nil
		}
		if subscribed {
			wait = reconnectMin
		}
		c.log.Warn("cart cache: not subscribed to cart notices; the cache is cleared and bypassed until it is again",
			"error", err, "retry_in", wait.String())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, reconnectMax)
	}
}

// subscribe runs one subscription until it fails or ctx ends; subscribed reports whether it got as
// far as serving.
func (c *Cache) subscribe(ctx context.Context) (subscribed bool, err error) {
	conn := c.opts.Conn
	// Status changes stop the cache at once (a disconnect is a gap in the notices), before the
	// next heartbeat would find out.
	status := conn.StatusChanged(nats.DISCONNECTED, nats.RECONNECTING, nats.CLOSED)
	defer conn.RemoveStatusListener(status)
	if !conn.IsConnected() {
		return false, errors.New("not connected to the broker")
	}
	ch := make(chan *nats.Msg, 1<<16)
	sub, err := conn.ChanSubscribe(c.opts.Subject, ch)
	if err != nil {
		return false, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	// The server has the subscription once it answers a round trip: from then on every notice
	// published after that reaches this cache, and the cache is empty (cleared when the previous
	// subscription was lost, or new): it may serve.
	start := time.Now()
	if err := conn.FlushTimeout(2 * c.opts.Heartbeat); err != nil {
		return false, err
	}
	c.up(start)
	c.log.Info("cart cache: subscribed to cart notices", "subject", c.opts.Subject)

	tick := time.NewTicker(c.opts.Heartbeat)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case st := <-status:
			return true, errors.New("broker connection " + strings.ToLower(st.String()))
		case m := <-ch:
			c.apply(string(m.Data))
		case <-tick.C:
			// Heartbeat: a round trip proves the connection alive, and the broker sends what it
			// holds for this subscriber before it answers, and the client puts those notices in
			// ch before it reads the answer; once they are applied the cache is as fresh as at
			// the start of the round trip.
			proof := time.Now()
			if err := conn.FlushTimeout(2 * c.opts.Heartbeat); err != nil {
				return true, err
			}
			if n, _ := sub.Dropped(); n > 0 {
				return true, errDropped
			}
			for drained := false; !drained; {
				select {
				case m := <-ch:
					c.apply(string(m.Data))
				default:
					drained = true
				}
			}
			c.renew(proof)
			c.heartbeats.Add(1)
		}
	}
}

// apply reads one notice: "<cart id> <version>" or "<cart id>".
func (c *Cache) apply(payload string) {
	if i := strings.LastIndexByte(payload, ' '); i > 0 {
		if v, err := strconv.ParseInt(payload[i+1:], 10, 64); err == nil && v >= 0 {
			c.announced(payload[:i], v)
			return
		}
	}
	c.announced(payload, -1)
}

// renew extends the liveness lease from a proof that began at from.
func (c *Cache) renew(from time.Time) {
	c.leaseUntil.Store(from.Add(3 * c.opts.Heartbeat).UnixNano())
}

// up switches the cache on: it is subscribed, and proved itself alive at proof.
func (c *Cache) up(proof time.Time) {
	c.renew(proof)
	c.listening.Store(true)
	c.publish(true)
}

// lose switches the cache off and clears it: from now on nothing is served or filled until a
// new subscription is in place. Listening and WaitListening report the loss once the cache is
// clear.
func (c *Cache) lose() {
	c.leaseUntil.Store(0)
	c.listening.Store(false)
	c.clear()
	c.publish(false)
}

// publish makes a change of the subscribed state visible to Listening and WaitListening.
func (c *Cache) publish(on bool) {
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	if c.published == on {
		return
	}
	c.published = on
	close(c.stateCh)
	c.stateCh = make(chan struct{})
}

// Listening reports whether the cache is subscribed to the notices (and so may serve); false once
// a lost subscription has cleared it.
func (c *Cache) Listening() bool {
	if c == nil {
		return false
	}
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	return c.published
}

// WaitListening blocks until the cache's subscribed state is want, or ctx ends.
func (c *Cache) WaitListening(ctx context.Context, want bool) error {
	if c == nil {
		if want {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}
	for {
		c.stateMu.Lock()
		now, ch := c.published, c.stateCh
		c.stateMu.Unlock()
		if now == want {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
