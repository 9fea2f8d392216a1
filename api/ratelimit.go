package api

import (
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/time/rate"

	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/internal/problem"
)

// Route groups of the rate limits: the group label of checkout_rate_limited_total.
const (
	groupOrders     = "orders"
	groupCart       = "cart"
	groupPreview    = "preview"
	groupGuestCarts = "guest_carts"
	groupAddresses  = "addresses"
	groupSeller     = "seller"
	groupWebhook    = "webhook_failures"
)

// limiter is one rate limit: a token bucket (golang.org/x/time/rate) per key, in this process's
// memory. A bucket left alone long enough to be full again is the same as a new one, so idle
// buckets are dropped as the limiter goes.
type limiter struct {
	limit rate.Limit
	burst int
	idle  time.Duration // how long an empty bucket takes to fill

	mu        sync.Mutex
	buckets   map[string]*bucket
	nextSweep time.Time
}

type bucket struct {
	lim  *rate.Limiter
	seen time.Time
}

// newLimiter is nil (no limit) for a limit that is off.
func newLimiter(r config.RateLimit) *limiter {
	if r.Off() {
		return nil
	}
	return &limiter{limit: rate.Limit(float64(r.Burst) / r.Per.Seconds()), burst: r.Burst, idle: r.Per,
		buckets: map[string]*bucket{}}
}

// bucket returns key's bucket, made full when new, and drops idle ones now and then.
func (l *limiter) bucket(key string, now time.Time) *rate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.After(l.nextSweep) {
		for k, b := range l.buckets {
			if now.Sub(b.seen) > l.idle {
				delete(l.buckets, k)
			}
		}
		l.nextSweep = now.Add(max(l.idle, 10*time.Second))
	}
	b := l.buckets[key]
	if b == nil {
		b = &bucket{lim: rate.NewLimiter(l.limit, l.burst)}
		l.buckets[key] = b
	}
	b.seen = now
	return b.lim
}

// reserve takes one request from key's bucket. When the bucket is empty nothing is taken, and
// the answer is how long until it holds one again.
func (l *limiter) reserve(key string, now time.Time) (*rate.Reservation, time.Duration) {
	r := l.bucket(key, now).ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return nil, d
	}
	return r, 0
}

// limitGroup is one route group's limits: by user and by client address.
type limitGroup struct {
	name     string
	user, ip *limiter
}

func newLimitGroup(name string, user, ip config.RateLimit) *limitGroup {
	return &limitGroup{name: name, user: newLimiter(user), ip: newLimiter(ip)}
}

// rateLimits are the API's limits, one group per kind of write.
type rateLimits struct {
	orders, cart, preview, guestCarts, addresses, seller, webhookFailures *limitGroup
}

func newRateLimits(r config.RateLimits) rateLimits {
	return rateLimits{
		orders:          newLimitGroup(groupOrders, r.OrdersUser, r.OrdersIP),
		cart:            newLimitGroup(groupCart, r.CartUser, r.CartIP),
		preview:         newLimitGroup(groupPreview, r.PreviewUser, r.PreviewIP),
		guestCarts:      newLimitGroup(groupGuestCarts, config.RateLimit{}, r.GuestCartsIP),
		addresses:       newLimitGroup(groupAddresses, r.AddressesUser, r.AddressesIP),
		seller:          newLimitGroup(groupSeller, r.SellerUser, r.SellerIP),
		webhookFailures: newLimitGroup(groupWebhook, config.RateLimit{}, r.WebhookFailuresIP),
	}
}

// rateLimit is the middleware of a route group: a request over its user's or its address's limit
// is refused with 429 RATE_LIMITED before the handler runs.
func (s *Server) rateLimit(g *limitGroup) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if err := s.admit(c, g); err != nil {
				return err
			}
			return next(c)
		}
	}
}

// admit takes one request from the caller's buckets of g: the user's (when the request is
// authenticated; a seller counts as its seller id) and the client address's. A request refused by
// one limit takes nothing from the other.
func (s *Server) admit(c echo.Context, g *limitGroup) error {
	now := time.Now()
	var taken *rate.Reservation
	if p, ok := principal(c); ok && g.user != nil {
		key := "u" + strconv.FormatInt(p.UserID, 10)
		if p.SellerID != 0 {
			key = "s" + strconv.FormatInt(p.SellerID, 10)
		}
		r, wait := g.user.reserve(key, now)
		if wait > 0 {
			return s.rateLimited(c, g.name, "user", wait)
		}
		taken = r
	}
	if g.ip != nil {
		if _, wait := g.ip.reserve(clientKey(c), now); wait > 0 {
			if taken != nil {
				taken.CancelAt(now)
			}
			return s.rateLimited(c, g.name, "ip", wait)
		}
	}
	return nil
}

// rateLimited is the answer over a limit: 429 with Retry-After. The refusal is counted and logged
// with who was limited.
func (s *Server) rateLimited(c echo.Context, group, by string, wait time.Duration) error {
	s.Metrics.RateLimited.WithLabelValues(group, by).Inc()
	attrs := []slog.Attr{slog.String("request_id", requestID(c)), slog.String("group", group),
		slog.String("by", by), slog.String("client_ip", c.RealIP())}
	if p, ok := principal(c); ok {
		attrs = append(attrs, slog.Int64("user_id", p.UserID))
	}
	s.Log.LogAttrs(c.Request().Context(), slog.LevelInfo, "rate limited", attrs...)
	secs := setRetryAfter(c, max(wait, time.Second))
	return problem.New(problem.RateLimited, "too many requests; try again in "+secs+" s")
}

// clientKey is the client's address as the limits count it: an IPv4 address, or an IPv6 address's
// /64 (one host usually holds a whole /64, and would otherwise have 2^64 addresses to spread over).
func clientKey(c echo.Context) string {
	ip := net.ParseIP(c.RealIP())
	switch {
	case ip == nil:
		return c.RealIP()
	case ip.To4() != nil:
		return ip.To4().String()
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// IPExtractor is how the API learns the client's address: the connection's peer, unless the peer
// is one of the trusted proxies, whose X-Forwarded-For is read from the right, skipping trusted
// proxies, to the first address that is not one (the rightmost untrusted). Loopback and private
// addresses are trusted only when listed: a client cannot name its own address. A proxy is
// trusted by its exact address, never by a range its clients share.
func IPExtractor(trusted []*net.IPNet) echo.IPExtractor {
	if len(trusted) == 0 {
		return echo.ExtractIPDirect()
	}
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, n := range trusted {
		opts = append(opts, echo.TrustIPRange(n))
	}
	return echo.ExtractIPFromXFFHeader(opts...)
}
