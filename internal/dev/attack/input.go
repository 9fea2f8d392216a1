package attack

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/marketplace/checkout/payment"
)

// alive: the API still answers after an attack that might have hurt it.
func (r *Run) alive(ctx context.Context, out Outcome) Outcome {
	if out.Verdict != Pass {
		return out
	}
	a, err := r.call(ctx, http.MethodGet, "/healthz", "", nil)
	if err != nil || a.status != http.StatusOK {
		return fail("the API no longer answers /healthz after the attack: %v %s", err, a)
	}
	return out
}

// rawExchange writes a request as given on a connection of its own to the API and reads the
// status line of the answer (the connection may also be closed on it: status 0).
func (r *Run) rawExchange(ctx context.Context, head string) (int, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", hostOf(r.T.Base))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := io.WriteString(conn, head); err != nil && !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, nil // closed without an answer: refused all the same
	}
	defer resp.Body.Close()
	return resp.StatusCode, nil
}

// notServed: an answer to a request the API must not serve: a 4xx, or the connection closed on
// it; never a 2xx, 3xx or 5xx.
func notServed(status int) bool { return status == 0 || status >= 400 && status < 500 }

// metricsHold says whether the process's /metrics holds s (false when the target gives none).
func (r *Run) metricsHold(ctx context.Context, s string) (bool, error) {
	if r.T.MetricsURL == "" {
		return false, nil
	}
	a, err := r.do(ctx, request{method: http.MethodGet, base: r.T.MetricsURL})
	if err != nil {
		return false, err
	}
	if a.status != http.StatusOK {
		return false, fmt.Errorf("/metrics: %d", a.status)
	}
	return strings.Contains(a.raw, s), nil
}

var inputAttacks = []Attack{
	{Name: "body-oversized", Kind: KindAPI, What: "a 2 MiB body is 413 PAYLOAD_TOO_LARGE",
		Run: func(ctx context.Context, r *Run) Outcome {
			body := `{"city":"Istanbul","line1":"` + strings.Repeat("x", 2<<20) + `","lat":41,"lon":28}`
			a, err := r.call(ctx, http.MethodPost, "/api/v1/addresses", r.shopper(6), body)
			return r.alive(ctx, refused(a, err, http.StatusRequestEntityTooLarge, "PAYLOAD_TOO_LARGE"))
		}},
	{Name: "body-deeply-nested", Kind: KindAPI, What: "a body nested 100,000 arrays deep is 400, and the API answers on",
		Run: func(ctx context.Context, r *Run) Outcome {
			body := strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000)
			a, err := r.call(ctx, http.MethodPost, "/api/v1/addresses", r.shopper(6), body)
			return r.alive(ctx, anyRefusal(a, err, refusalOf{http.StatusBadRequest, "INVALID_JSON"},
				refusalOf{http.StatusBadRequest, "VALIDATION_FAILED"}))
		}},
	{Name: "body-nul-and-trailing", Kind: KindAPI, What: "text holding U+0000, or a second JSON value after the body, is 400",
		Run: func(ctx context.Context, r *Run) Outcome {
			a, err := r.call(ctx, http.MethodPost, "/api/v1/addresses", r.shopper(6),
				`{"city":"Istanbul","line1":"a\u0000b","lat":41.01,"lon":28.97}`)
			if out := refused(a, err, http.StatusBadRequest, "VALIDATION_FAILED"); out.Verdict != Pass {
				return out
			}
			a, err = r.call(ctx, http.MethodPost, "/api/v1/addresses", r.shopper(6),
				`{"city":"Istanbul","line1":"a","lat":41.01,"lon":28.97} {"city":"x"}`)
			return refused(a, err, http.StatusBadRequest, "INVALID_JSON")
		}},
	{Name: "cart-bad-quantities", Kind: KindAPI, What: "negative, huge, fractional and quoted quantities are 400",
		Run: withOrder(func(ctx context.Context, r *Run, f *fixtures) Outcome {
			for _, q := range []string{"-1", "1001", "1e12", "1.5", `"2"`} {
				a, err := r.call(ctx, http.MethodPut, fmt.Sprintf("/api/v1/cart/items/%d", f.sku), r.shopper(7),
					`{"sellerId":42,"quantity":`+q+`}`)
				if out := refused(a, err, http.StatusBadRequest, "VALIDATION_FAILED"); out.Verdict != Pass {
					return fail("quantity %s: %s", q, out.Detail)
				}
			}
			return pass("400 VALIDATION_FAILED for each")
		})},
	{Name: "cart-units-per-line", Kind: KindAPI, What: "more units of a SKU than its maxPerOrder is 422 CART_LIMIT",
		Run: withOrder(func(ctx context.Context, r *Run, f *fixtures) Outcome {
			a, err := r.call(ctx, http.MethodPut, fmt.Sprintf("/api/v1/cart/items/%d", f.sku), r.shopper(7),
				map[string]any{"sellerId": 42, "quantity": 6})
			return refused(a, err, http.StatusUnprocessableEntity, "CART_LIMIT")
		})},
	{Name: "cart-line-limit", Kind: KindAPI, What: "one line more than the cart's line limit is 422 CART_LIMIT",
		Run: func(ctx context.Context, r *Run) Outcome {
			shopper := r.shopper(8)
			c, err := r.call(ctx, http.MethodGet, "/api/v1/cart", shopper, nil)
			limit := int(c.num("limits", "linesPerCart"))
			if err != nil || limit < 1 {
				return fail("the cart names no line limit: %v %s", err, c)
			}
			if limit > 200 {
				return skip("the cart takes %d lines: too many SKUs to make", limit)
			}
			rows := make([]map[string]any, limit+1)
			for i := range rows {
				rows[i] = map[string]any{"sku": fmt.Sprintf("ATK-LINE-%03d", i+1), "title": "Attack suite line",
					"price": "1.00", "currency": "TRY", "maxPerOrder": 5}
			}
			made, err := r.call(ctx, http.MethodPut, "/seller-api/v1/skus", r.seller(42), rows)
			results, _ := made.at("results").([]any)
			if err != nil || made.status != http.StatusOK || len(results) != len(rows) {
				return fail("set-up: the SKUs: %v %s", err, made)
			}
			var last answer
			for i, res := range results {
				id := int64(res.(map[string]any)["skuId"].(float64))
				last, err = r.call(ctx, http.MethodPut, fmt.Sprintf("/api/v1/cart/items/%d", id), shopper,
					map[string]any{"sellerId": 42, "quantity": 1})
				if err != nil {
					return failed("line", err)
				}
				if i < limit && last.status != http.StatusOK {
					return fail("line %d of %d: %s", i+1, limit, last)
				}
			}
			return refused(last, nil, http.StatusUnprocessableEntity, "CART_LIMIT")
		}},
	{Name: "order-bad-idempotency-key", Kind: KindAPI, What: "an Idempotency-Key of 300 characters, or with a space, is 400",
		Run: withOrder(func(ctx context.Context, r *Run, f *fixtures) Outcome {
			for _, key := range []string{strings.Repeat("k", 300), "a key"} {
				a, err := r.call(ctx, http.MethodPost, "/api/v1/orders", f.b, map[string]any{"priceVersion": "pv_x",
					"addressId": f.bAddress, "paymentMethodToken": "tok_ok"}, "Idempotency-Key", key)
				if out := refused(a, err, http.StatusBadRequest, "VALIDATION_FAILED"); out.Verdict != Pass {
					return fail("key %q: %s", short(key, 20), out.Detail)
				}
			}
			return pass("400 VALIDATION_FAILED for each")
		})},

	{Name: "header-huge", Kind: KindAPI, What: "256 KiB of request headers are refused (431, or 400 by the load balancer), never served",
		Run: func(ctx context.Context, r *Run) Outcome {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.T.Base+"/api/v1/cart", nil)
			if err != nil {
				return failed("request", err)
			}
			req.Header.Set("X-Padding", strings.Repeat("a", 256<<10))
			resp, err := r.http.Do(req)
			status := 0
			if err == nil {
				status = resp.StatusCode
				resp.Body.Close()
			}
			if !notServed(status) {
				return fail("answered %d", status)
			}
			return r.alive(ctx, pass("%d", status))
		}},
	{Name: "method-made-up", Kind: KindAPI, What: "a made-up method is refused, and /metrics makes no series of it",
		Run: func(ctx context.Context, r *Run) Outcome {
			method := fmt.Sprintf("ATK%08X", rand.Uint32())
			a, err := r.call(ctx, method, "/api/v1/cart", "", nil)
			if err != nil {
				return failed("request", err)
			}
			if !notServed(a.status) {
				return fail("%s answered %s", method, a)
			}
			if held, err := r.metricsHold(ctx, method); err != nil || held {
				return fail("/metrics holds %s (or cannot be read: %v)", method, err)
			}
			return pass("%d; no series", a.status)
		}},
	{Name: "method-huge", Kind: KindAPI, What: "an 8 KiB method is refused, and /metrics makes no series of it",
		Run: func(ctx context.Context, r *Run) Outcome {
			method := "ATK" + strings.Repeat("M", 8<<10)
			status, err := r.rawExchange(ctx, method+" /api/v1/cart HTTP/1.1\r\nHost: "+hostOf(r.T.Base)+"\r\nConnection: close\r\n\r\n")
			if err != nil {
				return failed("request", err)
			}
			if !notServed(status) {
				return fail("answered %d", status)
			}
			if held, err := r.metricsHold(ctx, "ATKMMMM"); err != nil || held {
				return fail("/metrics holds the method (or cannot be read: %v)", err)
			}
			return r.alive(ctx, pass("%d; no series", status))
		}},
	{Name: "request-id-abuse", Kind: KindAPI, What: "a 4 KiB, or spaced, or markup X-Request-ID is replaced by an id of the API's",
		Run: func(ctx context.Context, r *Run) Outcome {
			for _, id := range []string{strings.Repeat("r", 4096), "a b c", "<script>x</script>"} {
				a, err := r.call(ctx, http.MethodGet, "/healthz", "", nil, "X-Request-ID", id)
				if err != nil {
					return failed("request", err)
				}
				got := a.header.Get("X-Request-ID")
				if got == id || !requestIDRe.MatchString(got) {
					return fail("sent %q, answered %q", short(id, 20), short(got, 40))
				}
			}
			a, err := r.call(ctx, http.MethodGet, "/healthz", "", nil, "X-Request-ID", "atk-"+r.id)
			if err != nil || a.header.Get("X-Request-ID") != "atk-"+r.id {
				return fail("a plain id of the client's is not kept: %v %q", err, a.header.Get("X-Request-ID"))
			}
			return pass("replaced; a plain one kept")
		}},
	{Name: "xff-spoofing", Kind: KindAPI,
		What: "bad webhook signatures, each with a made-up X-Forwarded-For, are all counted on the sender's own address",
		Run: func(ctx context.Context, r *Run) Outcome {
			for i := range 300 {
				body := r.event("pi_atk_xff", payment.StatusAuthorized)
				forged := fmt.Sprintf("203.0.113.%d, 198.51.100.%d", rand.IntN(250)+1, rand.IntN(250)+1)
				a, err := r.webhook(ctx, body, payment.Sign([]byte("not-the-provider-secret-0123456789abcdef"), body, time.Now()),
					"X-Forwarded-For", forged)
				if err != nil {
					return failed("request", err)
				}
				if out := anyRefusal(a, nil, signatureRefused...); out.Verdict != Pass {
					return out
				}
				if a.status == http.StatusTooManyRequests {
					return pass("limited after %d, whatever each named", i+1)
				}
			}
			return fail("300 bad signatures, each naming other addresses, were never limited: the API takes the client's X-Forwarded-For")
		}},

	{Name: "metrics-public-port", Kind: KindMetrics, What: "/metrics on the API's port is 404",
		Run: func(ctx context.Context, r *Run) Outcome {
			a, err := r.call(ctx, http.MethodGet, "/metrics", "", nil)
			if err != nil {
				return failed("request", err)
			}
			if a.status != http.StatusNotFound || strings.Contains(a.raw, "# HELP") {
				return fail("/metrics on the public port: %s", a)
			}
			return pass("404")
		}},
	{Name: "metrics-every-interface", Kind: KindMetrics, What: "the /metrics listener takes no connection on this host's other addresses",
		Run: func(ctx context.Context, r *Run) Outcome {
			if r.T.MetricsURL == "" {
				return skip("the target names no /metrics listener")
			}
			_, port, err := net.SplitHostPort(hostOf(r.T.MetricsURL))
			if err != nil {
				return failed("metrics address", err)
			}
			ips := outsideAddresses()
			if len(ips) == 0 {
				return skip("this host has no address but loopback")
			}
			for _, ip := range ips {
				d := net.Dialer{Timeout: 2 * time.Second}
				if c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(ip.String(), port)); err == nil {
					c.Close()
					return fail("/metrics takes connections on %s:%s", ip, port)
				}
			}
			return pass("refused on %d other address(es)", len(ips))
		}},
}

// outsideAddresses are this host's addresses that are not loopback.
func outsideAddresses() []net.IP {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []net.IP
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			out = append(out, n.IP)
		}
	}
	return out
}
