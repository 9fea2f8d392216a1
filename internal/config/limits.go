package config

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// RateLimit is one rate limit: up to Burst requests at once, refilled evenly to Burst every Per
// (a token bucket). The zero value is no limit.
type RateLimit struct {
	Burst int
	Per   time.Duration
}

// Off says the limit is turned off.
func (r RateLimit) Off() bool { return r.Burst == 0 }

func (r RateLimit) String() string {
	if r.Off() {
		return "off"
	}
	return strconv.Itoa(r.Burst) + "/" + r.Per.String()
}

// RateLimits are the API's rate limits by route group, keyed by the authenticated user (a seller's
// by its seller id) or by the client's address. Each API process keeps its own counts in memory.
type RateLimits struct {
	OrdersUser, OrdersIP       RateLimit
	CartUser, CartIP           RateLimit
	PreviewUser, PreviewIP     RateLimit
	GuestCartsIP               RateLimit
	AddressesUser, AddressesIP RateLimit
	SellerUser, SellerIP       RateLimit
	WebhookFailuresIP          RateLimit
}

// rateLimitSettings are the settings of the rate limits and their defaults: generous enough that
// a campaign's shoppers, the load generator and the benchmarks (every client on one address) are
// never limited, while one user or one address flooding a write endpoint is.
var rateLimitSettings = []struct {
	key, def string
	field    func(*RateLimits) *RateLimit
}{
	{"RATE_LIMIT_ORDERS_USER", "20/1m", func(r *RateLimits) *RateLimit { return &r.OrdersUser }},
	{"RATE_LIMIT_ORDERS_IP", "300/1s", func(r *RateLimits) *RateLimit { return &r.OrdersIP }},
	{"RATE_LIMIT_CART_USER", "60/10s", func(r *RateLimits) *RateLimit { return &r.CartUser }},
	{"RATE_LIMIT_CART_IP", "1000/1s", func(r *RateLimits) *RateLimit { return &r.CartIP }},
	{"RATE_LIMIT_PREVIEW_USER", "30/1m", func(r *RateLimits) *RateLimit { return &r.PreviewUser }},
	{"RATE_LIMIT_PREVIEW_IP", "300/1s", func(r *RateLimits) *RateLimit { return &r.PreviewIP }},
	{"RATE_LIMIT_GUEST_CARTS_IP", "300/1m", func(r *RateLimits) *RateLimit { return &r.GuestCartsIP }},
	{"RATE_LIMIT_ADDRESSES_USER", "10/1m", func(r *RateLimits) *RateLimit { return &r.AddressesUser }},
	{"RATE_LIMIT_ADDRESSES_IP", "300/1s", func(r *RateLimits) *RateLimit { return &r.AddressesIP }},
	{"RATE_LIMIT_SELLER", "100/10s", func(r *RateLimits) *RateLimit { return &r.SellerUser }},
	{"RATE_LIMIT_SELLER_IP", "300/1s", func(r *RateLimits) *RateLimit { return &r.SellerIP }},
	{"RATE_LIMIT_WEBHOOK_FAILURES_IP", "20/1m", func(r *RateLimits) *RateLimit { return &r.WebhookFailuresIP }},
}

func (p *parser) rateLimits() RateLimits {
	var out RateLimits
	for _, s := range rateLimitSettings {
		v := p.str(s.key, s.def)
		r, err := ParseRateLimit(v)
		if err != nil {
			p.errs = append(p.errs, fmt.Errorf("%s=%q: %w", s.key, v, err))
			r, _ = ParseRateLimit(s.def)
		}
		*s.field(&out) = r
	}
	return out
}

// ParseRateLimit reads "N/period" (up to N at once, N per period on average: "20/1m", "300/1s",
// "300/s") or "off" (also "0").
func ParseRateLimit(v string) (RateLimit, error) {
	v = strings.TrimSpace(v)
	if v == "off" || v == "0" {
		return RateLimit{}, nil
	}
	n, per, ok := strings.Cut(v, "/")
	burst, err := strconv.Atoi(strings.TrimSpace(n))
	if !ok || err != nil || burst < 1 || burst > 1_000_000 {
		return RateLimit{}, fmt.Errorf("want N/period such as 20/1m (N between 1 and 1000000), or off")
	}
	per = strings.TrimSpace(per)
	if per == "s" || per == "m" || per == "h" {
		per = "1" + per
	}
	d, err := time.ParseDuration(per)
	if err != nil || d < time.Millisecond || d > 24*time.Hour {
		return RateLimit{}, fmt.Errorf("the period is a duration between 1ms and 24h, such as 1s or 1m")
	}
	return RateLimit{Burst: burst, Per: d}, nil
}

// trustedProxies reads TRUSTED_PROXIES: addresses or CIDR ranges, comma-separated.
func (p *parser) trustedProxies() []*net.IPNet {
	var out []*net.IPNet
	for _, v := range p.list("TRUSTED_PROXIES") {
		cidr := v
		if ip := net.ParseIP(v); ip != nil && ip.To4() != nil {
			cidr += "/32"
		} else if ip != nil {
			cidr += "/128"
		}
		_, n, err := net.ParseCIDR(cidr)
		if err != nil {
			p.errs = append(p.errs, fmt.Errorf("TRUSTED_PROXIES: %q is neither an address nor a CIDR range", v))
			continue
		}
		out = append(out, n)
	}
	return out
}
