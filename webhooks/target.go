package webhooks

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// ErrForbiddenTarget refuses a URL whose host is, or resolves to, an address the checkout never
// sends to (outside dev): the checkout's own network is not the seller's to reach through it.
var ErrForbiddenTarget = errors.New("the address is not a public one")

// forbidden are the ranges no webhook goes to beyond those the standard library names private,
// loopback, link-local, multicast or unspecified: shared address space (carrier-grade NAT), the
// "this network" block, benchmarking, documentation and reserved ranges, and NAT64's well-known
// prefix (which reaches IPv4 addresses through a translator).
var forbidden = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"), netip.MustParsePrefix("100.64.0.0/10"), netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("240.0.0.0/4"), netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("2001:db8::/32"),
}

// Public reports whether a webhook may go to ip outside dev.
func Public(ip netip.Addr) bool {
	ip = ip.Unmap()
	if !ip.IsValid() || ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() {
		return false
	}
	for _, p := range forbidden {
		if p.Contains(ip) {
			return false
		}
	}
	return true
}

// Targets is what a seller's endpoint may point at. Outside dev only public addresses over
// HTTPS; AllowPrivate (dev alone) also lets http:// and this machine's own addresses through, so
// that a receiver started as docs/events.md says gets its events.
type Targets struct {
	AllowPrivate bool
	Resolver     *net.Resolver
}

// Check parses a registered URL and refuses what the checkout would never send to: not https
// (outside dev), credentials in it, a host that is, or resolves to, an address that is not public.
// A name is checked again at every connection (Client): a name that resolves elsewhere later
// gains nothing.
func (t Targets) Check(ctx context.Context, raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	switch {
	case err != nil || u.Host == "" || u.Opaque != "":
		return nil, errors.New("must be an absolute URL")
	case u.Scheme != "https" && !(t.AllowPrivate && u.Scheme == "http"):
		return nil, errors.New("must be https")
	case u.User != nil:
		return nil, errors.New("must not carry credentials")
	case u.Fragment != "":
		return nil, errors.New("must not carry a fragment")
	}
	if t.AllowPrivate {
		return u, nil
	}
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		if !Public(ip) {
			return nil, fmt.Errorf("%s: %w", host, ErrForbiddenTarget)
		}
		return u, nil
	}
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return nil, fmt.Errorf("%s: %w", host, ErrForbiddenTarget)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := t.resolver().LookupNetIP(rctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return nil, fmt.Errorf("%s does not resolve", host)
	}
	for _, a := range addrs {
		if !Public(a) {
			return nil, fmt.Errorf("%s resolves to %s: %w", host, a, ErrForbiddenTarget)
		}
	}
	return u, nil
}

func (t Targets) resolver() *net.Resolver {
	if t.Resolver != nil {
		return t.Resolver
	}
	return net.DefaultResolver
}

// Client is the HTTP client deliveries go through: the address it connects to is checked as the
// connection is made (whatever the name resolved to by then), no proxy, no redirect followed, a
// timeout on the whole exchange.
func (t Targets) Client(timeout time.Duration) *http.Client {
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second, Resolver: t.Resolver,
		Control: func(_, address string, _ syscall.RawConn) error {
			if t.AllowPrivate {
				return nil
			}
			ap, err := netip.ParseAddrPort(address)
			if err != nil || !Public(ap.Addr()) {
				return fmt.Errorf("connecting to %s: %w", address, ErrForbiddenTarget)
			}
			return nil
		}}
	transport := &http.Transport{Proxy: nil, DialContext: dialer.DialContext, ForceAttemptHTTP2: true,
		TLSHandshakeTimeout: 5 * time.Second, ResponseHeaderTimeout: timeout, MaxIdleConnsPerHost: 2,
		IdleConnTimeout: 90 * time.Second}
	return &http.Client{Transport: transport, Timeout: timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}
