// Command benchcart is `make bench-cart`: GET /api/v1/cart of the dev stack driven by wrk, an
// independent load tool in its own process, beside GET /healthz through the same server (the same
// listener, middleware, access log and metrics, with no token, cart or database). Rounds alternate
// the two; each round's ratio is cart ÷ healthz. It runs once with the cart cache as `checkout api`
// runs it, and once with the cache off (every read goes to PostgreSQL), and reports the cache's hit
// rate, so that the figure is read with how much the cache did.
//
// It writes the "GET /api/v1/cart driven by wrk" section of docs/benchmarks.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/dev/benchkit"
)

const (
	startMarker = "<!-- cart-wrk:start -->"
	endMarker   = "<!-- cart-wrk:end -->"
)

// variants are the stacks the rounds run on.
var variants = []struct {
	name string
	env  []string
}{
	{"cache on", nil},
	{"cache off", []string{"CART_CACHE_ENTRIES=0"}},
}

// round is one wrk run's figures.
type round struct {
	perSecond    float64
	p50Ms, p99Ms float64
	errors       int64
}

type variantResult struct {
	name       string
	health     []round
	cart       []round
	hits, miss float64
}

func main() {
	users := flag.Int("users", 200, "shoppers, each with a cart of five lines; wrk's requests take their tokens in turn")
	conns := flag.Int("connections", 50, "wrk's open connections")
	threads := flag.Int("threads", 2, "wrk's threads")
	dur := flag.Duration("duration", 10*time.Second, "each round's length")
	rounds := flag.Int("rounds", 3, "rounds per variant, each one healthz run then one cart run")
	out := flag.String("out", "docs/benchmarks.md", "the document to write the section into")
	wrkBin := flag.String("wrk", "wrk", "the wrk binary")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("bench-cart: ")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := benchkit.ChdirModuleRoot(); err != nil {
		log.Fatal(err)
	}
	wrkVersion, err := exec.Command(*wrkBin, "-v").CombinedOutput()
	if len(wrkVersion) == 0 {
		log.Fatalf("%s: %v (make bench-cart installs it from Debian)", *wrkBin, err)
	}
	started, load := time.Now().UTC(), benchkit.LoadAverage()
	var results []variantResult
	for _, v := range variants {
		log.Printf("%s: starting the dev stack", v.name)
		env := append([]string{"RATE_LIMIT_CART_USER=off", "RATE_LIMIT_CART_IP=off"}, v.env...)
		st, err := benchkit.StartStack(ctx, "benchcart-", env...)
		if err != nil {
			log.Fatal(err)
		}
		r, err := runVariant(ctx, st, v.name, *wrkBin, *users, *conns, *threads, *dur, *rounds)
		st.Stop()
		if err != nil {
			log.Fatalf("%s: %v", v.name, err)
		}
		results = append(results, r)
	}
	section := render(results, started, load, firstLine(string(wrkVersion)), *users, *conns, *threads, *dur)
	fmt.Print(section)
	if *out != "" {
		if err := benchkit.WriteSection(*out, startMarker, endMarker, section); err != nil {
			log.Fatal(err)
		}
	}
}

func runVariant(ctx context.Context, st *benchkit.Stack, name, wrkBin string, users, conns, threads int,
	dur time.Duration, rounds int) (variantResult, error) {
	res := variantResult{name: name}
	tokens := make([]string, 0, users)
	hc := &http.Client{Timeout: 10 * time.Second}
	for u := range users {
		tok, err := auth.Mint([]byte(st.Secret), auth.Principal{UserID: int64(40_000 + u), Role: auth.RoleShopper}, 2*time.Hour)
		if err != nil {
			return res, err
		}
		tokens = append(tokens, tok)
		for sku := 71; sku <= 75; sku++ {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPut, fmt.Sprintf("%s/api/v1/cart/items/%d", st.Base, sku),
				strings.NewReader(`{"sellerId":42,"quantity":1}`))
			req.Header.Set("Authorization", "Bearer "+tok)
			req.Header.Set("Content-Type", "application/json")
			resp, err := hc.Do(req)
			if err != nil {
				return res, err
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return res, fmt.Errorf("PUT cart item: %d %s", resp.StatusCode, body)
			}
		}
	}
	script := filepath.Join(st.Dir, "cart.lua")
	if err := os.WriteFile(script, []byte(luaScript(tokens)), 0o644); err != nil {
		return res, err
	}
	hits0, miss0, err := cacheCounters(ctx, st.Metrics)
	if err != nil {
		return res, err
	}
	for r := range rounds {
		h, err := runWrk(ctx, wrkBin, st.Base+"/healthz", "", conns, threads, dur)
		if err != nil {
			return res, err
		}
		c, err := runWrk(ctx, wrkBin, st.Base+"/api/v1/cart", script, conns, threads, dur)
		if err != nil {
			return res, err
		}
		log.Printf("%s round %d: healthz %.0f/s, cart %.0f/s (%.2f×)", name, r+1, h.perSecond, c.perSecond, c.perSecond/h.perSecond)
		res.health, res.cart = append(res.health, h), append(res.cart, c)
	}
	hits1, miss1, err := cacheCounters(ctx, st.Metrics)
	if err != nil {
		return res, err
	}
	res.hits, res.miss = hits1-hits0, miss1-miss0
	return res, nil
}

// luaScript makes wrk send each request with the next shopper's token.
func luaScript(tokens []string) string {
	var b strings.Builder
	b.WriteString("local tokens = {\n")
	for _, t := range tokens {
		fmt.Fprintf(&b, "  %q,\n", t)
	}
	b.WriteString("}\nlocal i = 0\nrequest = function()\n  i = i + 1\n" +
		"  return wrk.format(\"GET\", nil, {[\"Authorization\"] = \"Bearer \" .. tokens[(i % #tokens) + 1]})\nend\n")
	return b.String()
}

var (
	reqsRe    = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	non2xxRe  = regexp.MustCompile(`Non-2xx or 3xx responses:\s+(\d+)`)
	socketRe  = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
	latencyRe = regexp.MustCompile(`(?m)^\s+(50|99)%\s+([0-9.]+)(us|ms|s)\s*$`)
)

func runWrk(ctx context.Context, bin, url, script string, conns, threads int, dur time.Duration) (round, error) {
	args := []string{"-t", strconv.Itoa(threads), "-c", strconv.Itoa(conns), "-d", dur.String(), "--latency"}
	if script != "" {
		args = append(args, "-s", script)
	}
	outb, err := exec.CommandContext(ctx, bin, append(args, url)...).CombinedOutput()
	if err != nil {
		return round{}, fmt.Errorf("wrk: %v: %s", err, outb)
	}
	return parseWrk(string(outb))
}

func parseWrk(out string) (round, error) {
	var r round
	m := reqsRe.FindStringSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("wrk's output has no Requests/sec: %s", out)
	}
	r.perSecond, _ = strconv.ParseFloat(m[1], 64)
	if m := non2xxRe.FindStringSubmatch(out); m != nil {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		r.errors += n
	}
	if m := socketRe.FindStringSubmatch(out); m != nil {
		for _, s := range m[1:] {
			n, _ := strconv.ParseInt(s, 10, 64)
			r.errors += n
		}
	}
	for _, m := range latencyRe.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		switch m[3] {
		case "us":
			v /= 1000
		case "s":
			v *= 1000
		}
		if m[1] == "50" {
			r.p50Ms = v
		} else {
			r.p99Ms = v
		}
	}
	return r, nil
}

func cacheCounters(ctx context.Context, metrics string) (hits, misses float64, err error) {
	err = benchkit.ScrapeMetrics(ctx, metrics, func(name string, _ map[string]string, v float64) {
		switch name {
		case "checkout_cart_cache_hits_total":
			hits += v
		case "checkout_cart_cache_misses_total":
			misses += v
		}
	})
	return hits, misses, err
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

func render(results []variantResult, started time.Time, load float64, wrkVersion string, users, conns, threads int,
	dur time.Duration) string {
	var b strings.Builder
	b.WriteString(startMarker + "\n## GET /api/v1/cart driven by wrk, beside /healthz through the same server\n\n")
	b.WriteString("Written by `make bench-cart` (bench/benchcart); running it again replaces this section.\n\n")
	fmt.Fprintf(&b, "- Command: `make bench-cart`, measured %s UTC on %d CPUs (%s), %s, load average %.1f before. "+
		"Load tool: %s, in its own process (%d threads, %d connections, %s a round).\n", started.Format("2006-01-02 15:04"),
		benchkit.OnlineCPUs(), benchkit.CPUModel(), runtime.Version(), load, wrkVersion, threads, conns, dur)
	fmt.Fprintf(&b, "- Server: `checkout-dev dev` (what `make run` starts; its PostgreSQL with fsync on), %d shoppers "+
		"with a five-line cart each, written through the API before the rounds; wrk sends each request with the "+
		"next shopper's token. The baseline is `GET /healthz` of the same server: the same listener, request id, "+
		"access log and metrics, with no token, no cart and no database. wrk, the server and PostgreSQL share the "+
		"CPUs. Rounds alternate healthz and cart; the ratio is each round's own.\n", users)
	if load > 1 {
		fmt.Fprintf(&b, "- **Disturbed run**: the load average was %.1f before it started (other work on the machine); "+
			"read only the ratios, each measured within one round.\n", load)
	}
	b.WriteString("- *cache on* is the cart cache as `checkout api` runs it; these carts were written through this " +
		"same process, which keeps its own writes, so its hit rate is the best case. *cache off* " +
		"(`CART_CACHE_ENTRIES=0`) sends every read to PostgreSQL: the case of a cart last written through " +
		"another replica, every time. A shop's traffic lies between the two.\n\n")
	b.WriteString("| variant | round | healthz req/s | cart req/s | **cart ÷ healthz** | healthz p50 / p99 ms | cart p50 / p99 ms | errors |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		for i := range r.cart {
			h, c := r.health[i], r.cart[i]
			fmt.Fprintf(&b, "| %s | %d | %.0f | %.0f | **%.2f** | %.2f / %.2f | %.2f / %.2f | %d |\n", r.name, i+1,
				h.perSecond, c.perSecond, c.perSecond/h.perSecond, h.p50Ms, h.p99Ms, c.p50Ms, c.p99Ms, h.errors+c.errors)
		}
	}
	b.WriteString("\n")
	for _, r := range results {
		ratios := make([]float64, len(r.cart))
		for i := range r.cart {
			ratios[i] = r.cart[i].perSecond / r.health[i].perSecond
		}
		sp := benchkit.SpreadOf(ratios)
		rate := 0.0
		if r.hits+r.miss > 0 {
			rate = r.hits / (r.hits + r.miss)
		}
		fmt.Fprintf(&b, "- **%s: cart ÷ healthz %.2f** (%.2f–%.2f over %d rounds); cart cache hit rate %.2f.\n",
			r.name, sp.Median, sp.Lo, sp.Hi, len(ratios), rate)
	}
	b.WriteString(endMarker + "\n")
	return b.String()
}
