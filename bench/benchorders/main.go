// Command benchorders measures POST /api/v1/orders latency on the dev stack (`checkout-dev dev`, as
// `make run` starts it, on spare ports and its own data folder) at 1 and 20 concurrent shoppers,
// beside the dev server's own floor measured in the same run: an empty workflow started the same
// way (Update-with-Start, conflict policy use-existing, waiting for the update's result).
// It writes its section of docs/benchmarks.md. `make bench-orders` runs it.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/dev/benchkit"
)

const (
	startMarker = "<!-- orders-bench:start -->"
	endMarker   = "<!-- orders-bench:end -->"
)

func main() {
	perRun := flag.Int("orders", 300, "orders per shopper count (and empty workflows for the floor)")
	rounds := flag.Int("rounds", 3, "rounds of the tracing comparison (0: none)")
	traceOrders := flag.Int("trace-orders", 150, "orders per tracing mode, shopper count and round")
	out := flag.String("out", "docs/benchmarks.md", "the document to write the sections into")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("benchorders: ")
	if err := run(*perRun, *rounds, *traceOrders, *out); err != nil {
		log.Fatal(err)
	}
}

var hc = &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

func call(method, url, token string, headers map[string]string, body any) (int, map[string]any, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out, nil
}

// shopper is ready to order: an address and a cart with one unit, priced.
type shopper struct {
	token   string
	address int64
	pv      string
}

func newShopper(s *benchkit.Stack, id int64) (shopper, error) {
	tok, err := auth.Mint([]byte(s.Secret), auth.Principal{UserID: id, Role: auth.RoleShopper}, time.Hour)
	if err != nil {
		return shopper{}, err
	}
	sh := shopper{token: tok}
	code, body, err := call("POST", s.Base+"/api/v1/addresses", tok, nil, map[string]any{"city": "Istanbul",
		"line1": "Bench 1", "lat": 41.0, "lon": 29.0})
	if err != nil || code != 201 {
		return sh, fmt.Errorf("address: %d %v %v", code, body, err)
	}
	sh.address = int64(body["addressId"].(float64))
	if code, body, err = call("PUT", s.Base+"/api/v1/cart/items/74", tok, nil, map[string]any{"sellerId": 42, "quantity": 1}); err != nil || code != 200 {
		return sh, fmt.Errorf("cart: %d %v %v", code, body, err)
	}
	if code, body, err = call("POST", s.Base+"/api/v1/checkout/preview", tok, nil, map[string]any{}); err != nil || code != 200 {
		return sh, fmt.Errorf("preview: %d %v %v", code, body, err)
	}
	sh.pv = body["priceVersion"].(string)
	return sh, nil
}

type result struct {
	name    string
	clients int
	lat     []time.Duration
	errors  int
	elapsed time.Duration
}

func (r result) pct(p float64) float64 {
	s := slices.Clone(r.lat)
	slices.Sort(s)
	return benchkit.QuantileMs(s, p)
}

func (r result) rate() float64 { return float64(len(r.lat)) / r.elapsed.Seconds() }

// measure runs n operations from clients goroutines and collects their latencies.
func measure(name string, clients, n int, op func(i int) error) result {
	r := result{name: name, clients: clients}
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan int)
	start := time.Now()
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				t := time.Now()
				err := op(i)
				d := time.Since(t)
				mu.Lock()
				if err != nil {
					r.errors++
					if r.errors <= 3 {
						log.Printf("%s: %v", name, err)
					}
				} else {
					r.lat = append(r.lat, d)
				}
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	r.elapsed = time.Since(start)
	return r
}

// placeOrder places sh's order under key, as a shopper does.
func placeOrder(s *benchkit.Stack, key string, sh shopper) error {
	code, body, err := call("POST", s.Base+"/api/v1/orders", sh.token, map[string]string{"Idempotency-Key": key},
		map[string]any{"priceVersion": sh.pv, "addressId": sh.address, "paymentMethodToken": "tok_ok"})
	if err != nil {
		return err
	}
	if code != 201 {
		return fmt.Errorf("POST /orders: %d %v", code, body)
	}
	return nil
}

// stock gives the stack's SKU 74 enough stock that every order is served: the figure is placing
// an order, not refusing one.
func stock(s *benchkit.Stack) error {
	seller, err := auth.Mint([]byte(s.Secret), auth.Principal{UserID: 1042, Role: auth.RoleSeller, SellerID: 42}, time.Hour)
	if err != nil {
		return err
	}
	code, body, err := call("PUT", s.Base+"/seller-api/v1/stocks", seller, nil, []map[string]any{{"sku": "S-74",
		"warehouseId": 1, "quantity": 1_000_000, "sourceUpdatedAt": time.Now().UTC().Format(time.RFC3339Nano)}})
	if err != nil || code != 200 {
		return fmt.Errorf("stock: %d %v %v", code, body, err)
	}
	return nil
}

func run(n, rounds, traceOrders int, out string) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log.Printf("starting the dev stack")
	s, err := benchkit.StartStack(ctx, "checkout-bench-orders-")
	if err != nil {
		return err
	}
	defer s.Stop()

	fl, err := benchkit.StartFloor(s)
	if err != nil {
		return err
	}
	defer fl.Close()
	floorRun := ""
	floor := func(i int) error { return fl.Run(ctx, fmt.Sprintf("floor-%s-%d", floorRun, i)) }

	if err := stock(s); err != nil {
		return err
	}

	var results []result
	for round, clients := range []int{1, 20} {
		// Shoppers are prepared before timing: the figure is POST /orders alone.
		log.Printf("preparing %d shoppers", n)
		shoppers := make([]shopper, n)
		prep := measure("prepare", 8, n, func(i int) error {
			var err error
			shoppers[i], err = newShopper(s, int64(100000*(round+1)+i))
			return err
		})
		if prep.errors > 0 {
			return fmt.Errorf("%d shoppers could not be prepared", prep.errors)
		}
		floorRun = fmt.Sprintf("warm-%d", round)
		_ = measure("warm-up", clients, 20, floor)
		floorRun = strconv.Itoa(round)
		log.Printf("floor at %d clients", clients)
		results = append(results, measure("empty workflow (Update-with-Start)", clients, n, floor))
		log.Printf("orders at %d shoppers", clients)
		results = append(results, measure("POST /api/v1/orders (tok_ok)", clients, n, func(i int) error {
			return placeOrder(s, fmt.Sprintf("bench-%d-%d", round, i), shoppers[i])
		}))
	}
	for _, r := range results {
		if r.errors > 0 {
			return fmt.Errorf("%s at %d: %d errors", r.name, r.clients, r.errors)
		}
	}
	if err := write(out, results, n); err != nil {
		return err
	}
	if rounds == 0 {
		return nil
	}

	// What tracing costs: the stack above (tracing off) beside two traced ones.
	started := time.Now()
	modes, err := tracingModes(ctx, s)
	for _, m := range modes[1:] {
		defer m.stack.Stop()
	}
	if err != nil {
		return err
	}
	for _, m := range modes[1:] {
		if err := stock(m.stack); err != nil {
			return err
		}
	}
	cells, err := measureTracing(modes, rounds, traceOrders, placeOrder)
	if err != nil {
		return err
	}
	return writeTracing(out, modes, cells, rounds, traceOrders, started)
}

func write(path string, rs []result, n int) error {
	var b strings.Builder
	w := func(format string, args ...any) { b.WriteString(fmt.Sprintf(format, args...)) }
	w("%s\n## Placing an order: POST /api/v1/orders beside the Temporal floor\n\n", startMarker)
	w("Measured %s on %d CPUs (%s), %s, PostgreSQL cluster and Temporal dev server as `make run` starts them "+
		"(`checkout-dev dev`: SQLite in WAL mode, eager activities, one task-queue partition), on ports of their own.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.NumCPU(), benchkit.CPUModel(), runtime.Version())
	w("Command: `make bench-orders` (`bin/benchorders -orders %d`). The floor is an empty workflow "+
		"started the same way as an order (Update-with-Start, conflict policy use-existing, waiting for the update's "+
		"result) from a client in the benchmark's process; the order is the whole request as a shopper sends it "+
		"(`tok_ok`, one line; shoppers' carts and previews prepared beforehand): HTTP, validation, idempotency "+
		"lookup, Update-with-Start, and in the worker the price check, order row, reservation, authorization, "+
		"the recorded answer and, the order being paid at once and so decided in the same workflow task, confirm, "+
		"capture and the order's CONFIRMED row (no hold child: the order never waits). %d of each per row.\n\n", n, n)
	w("| what | concurrent | p50 ms | p99 ms | per second |\n|---|---:|---:|---:|---:|\n")
	for _, r := range rs {
		w("| %s | %d | %.1f | %.1f | %.0f |\n", r.name, r.clients, r.pct(0.5), r.pct(0.99), r.rate())
	}
	ratio := rs[1].pct(0.5) / rs[0].pct(0.5)
	verdict := "met"
	if ratio > 2 {
		verdict = "missed"
	}
	w("\nAt 1 shopper, p50 of POST /orders is %.2f× the floor's p50 (target ≤ 2×: %s).\n%s\n", ratio, verdict, endMarker)

	fmt.Print(b.String())
	return benchkit.WriteSection(path, startMarker, endMarker, b.String())
}
