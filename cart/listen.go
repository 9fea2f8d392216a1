package cart

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// ListenerApplicationName is the application_name of the cache's listening connection, as
// pg_stat_activity shows it.
const ListenerApplicationName = "checkout-cart-cache"

// Reconnect back-off of the listener.
const (
	reconnectMin = 100 * time.Millisecond
	reconnectMax = 5 * time.Second
)

// Run keeps the cache's listening connection until ctx ends, and applies every announcement to
// the cache. The cache serves from the moment LISTEN is in place; when the connection is lost or
// stops answering, the cache is cleared and serves nothing until a new connection listens again
// (retried with back-off). A nil cache returns at once. Run returns nil when ctx ends: a cache that
// cannot listen only costs database reads, never availability.
func (c *Cache) Run(ctx context.Context) error {
	if c == nil {
		return nil
	}
	wait := reconnectMin
	for first := true; ; first = false {
		if !first {
			c.reconnects.Add(1)
		}
		listened, err := c.listen(ctx)
		c.lose()
		if ctx.Err() != nil {
			return nil
		}
		if listened {
			wait = reconnectMin
		}
		c.log.Warn("cart cache: not listening; the cache is cleared and bypassed until it listens again",
			"error", err, "retry_in", wait.String())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, reconnectMax)
	}
}

// listen runs one listening connection until it fails or ctx ends; listened reports whether it
// got as far as listening.
func (c *Cache) listen(ctx context.Context) (listened bool, err error) {
	conn, err := c.connect(ctx)
	if err != nil {
		return false, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	start := time.Now()
	if _, err := conn.Exec(ctx, "LISTEN "+Channel); err != nil {
		return false, err
	}
	// From here every committed change is announced to this connection, and the cache is empty
	// (cleared when the previous connection was lost, or new): it may serve.
	c.pid.Store(conn.PgConn().PID())
	c.up(start)
	c.log.Info("cart cache: listening", "pid", conn.PgConn().PID())

	drained, cancel := context.WithCancel(context.Background())
	cancel()
	lastProof := start
	for {
		wctx, cancel := context.WithDeadline(ctx, lastProof.Add(c.opts.Heartbeat))
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if n != nil {
			c.apply(n.Payload)
		}
		switch {
		case err == nil:
			if time.Since(lastProof) < c.opts.Heartbeat {
				continue
			}
		case ctx.Err() != nil:
			return true, ctx.Err()
		case conn.IsClosed() || !errors.Is(err, context.DeadlineExceeded):
			return true, err
		}
		// Heartbeat: a round trip proves the connection alive, and PostgreSQL sends the
		// notifications it holds for this connection before it answers, so once they are applied
		// the cache is as fresh as at the start of the round trip.
		proof := time.Now()
		pctx, cancel := context.WithTimeout(ctx, 2*c.opts.Heartbeat)
		err = conn.Ping(pctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return true, ctx.Err()
			}
			return true, err
		}
		for {
			n, _ := conn.WaitForNotification(drained) // only what the round trip brought
			if n == nil {
				break
			}
			c.apply(n.Payload)
		}
		c.renew(proof)
		c.heartbeats.Add(1)
		lastProof = proof
	}
}

func (c *Cache) connect(ctx context.Context) (*pgx.Conn, error) {
	if c.opts.Connect != nil {
		return c.opts.Connect(ctx)
	}
	cfg := c.pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = ListenerApplicationName
	return pgx.ConnectConfig(ctx, cfg)
}

// apply reads one announcement: "<cart id> <version>", "<cart id>", or "*" for every cart.
func (c *Cache) apply(payload string) {
	if payload == "*" {
		c.notifications.Add(1)
		c.clear()
		return
	}
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

// up switches the cache on: its connection listens, and proved itself alive at proof.
func (c *Cache) up(proof time.Time) {
	c.renew(proof)
	c.listening.Store(true)
	c.publish(true)
}

// lose switches the cache off and clears it: from now on nothing is served or filled until a
// new connection listens. Listening and WaitListening report the loss once the cache is clear.
func (c *Cache) lose() {
	c.leaseUntil.Store(0)
	c.listening.Store(false)
	c.pid.Store(0)
	c.clear()
	c.publish(false)
}

// publish makes a change of the listening state visible to Listening and WaitListening.
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

// Listening reports whether the cache is listening (and so may serve); false once a lost
// connection has cleared it.
func (c *Cache) Listening() bool {
	if c == nil {
		return false
	}
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	return c.published
}

// ListenerPID is the PostgreSQL backend pid of the listening connection, 0 when not listening.
func (c *Cache) ListenerPID() uint32 {
	if c == nil {
		return 0
	}
	return c.pid.Load()
}

// WaitListening blocks until the cache's listening state is want, or ctx ends.
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
