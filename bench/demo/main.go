// Command demo is `make demo`: against a running `make run` stack, one order of each kind placed
// through the public API as shoppers, their browsers and ops would — paid at once, 3-D Secure
// approved, 3-D Secure declined, left at 3-D Secure until its hold expires (only when the stack's
// hold is short enough to wait for), and a paid order one of whose units ops cancel afterwards —
// each printed with how it ended, its payment and the events the broker carried for it.
//
// It finds the stack as `make attack` does (PUBLIC_BASE_URL, DATA_DIR's development secrets, which
// mint its tokens) and reads the events from the stack's NATS JetStream stream (NATS_URL, or
// NATS_PORT on 127.0.0.1). Each order is a new shopper's, with an address of its own, so a run
// meets no shopper's open-order cap and can be repeated.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/marketplace/checkout/events"
	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/dev/attack"
	"github.com/marketplace/checkout/loadgen"
)

func main() {
	base := flag.String("base", "", "the API's URL, loopback only (default: make run's, PUBLIC_BASE_URL's, http://localhost:8080)")
	data := flag.String("data", "", "make run's data folder, with its dev-secrets.json (default: DATA_DIR's, .data)")
	natsURL := flag.String("nats", "", "the event broker (default: NATS_URL, or make run's nats://127.0.0.1:NATS_PORT)")
	sku := flag.Int64("sku", 74, "the demo SKU every order buys (seller 42's or 43's: 71–90)")
	wait := flag.Duration("wait-hold", 2*time.Minute, "wait for an order's hold to expire only when the stack's hold is this short or shorter")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("demo: ")

	flags := map[string]string{"DATA_DIR": *data, "PUBLIC_BASE_URL": *base}
	getenv := func(k string) string {
		if v := flags[k]; v != "" {
			return v
		}
		return os.Getenv(k)
	}
	t, err := attack.DevTarget(getenv)
	if err != nil {
		log.Fatal(err)
	}
	if err := loadgen.CheckLoopback(t.Base); err != nil {
		log.Fatal(err)
	}
	seller := int64(0)
	if *sku >= 71 && *sku <= 81 {
		seller = 42
	} else if *sku >= 82 && *sku <= 90 {
		seller = 43
	} else {
		log.Fatalf("-sku %d: a demo SKU, 71–90", *sku)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	d := newDemo(t, *sku, seller, *wait, os.Stdout)
	if *natsURL == "" {
		*natsURL = os.Getenv("NATS_URL")
	}
	if *natsURL == "" {
		port := os.Getenv("NATS_PORT")
		if port == "" {
			port = "4222"
		}
		*natsURL = "nats://127.0.0.1:" + port
	}
	prefix := os.Getenv("EVENTS_PREFIX")
	if prefix == "" {
		prefix = "checkout"
	}
	d.events, err = watch(ctx, *natsURL, prefix)
	if err != nil {
		fmt.Fprintf(d.out, "(events not shown: %v)\n", err)
	} else {
		defer d.events.stop()
	}
	if !d.placeAll(ctx) {
		os.Exit(1)
	}
}

// newDemo is a run against target's stack: orders of sku (seller's), waiting for a hold to end only
// when the stack's is at most holdWait, printed to out. Each run's shoppers and keys are its own.
func newDemo(target attack.Target, sku, seller int64, holdWait time.Duration, out io.Writer) *demo {
	return &demo{base: strings.TrimRight(target.Base, "/"), keys: target.Keys, sku: sku, seller: seller, holdWait: holdWait,
		run: fmt.Sprintf("%06x", rand.IntN(1<<24)), user: 3_000_000_000 + rand.Int64N(1_000_000)*100,
		http: &http.Client{Timeout: 30 * time.Second}, out: out}
}

// demo is one run: where the stack is, how its tokens are minted, and what it prints.
type demo struct {
	base     string
	keys     auth.Keys
	sku      int64
	seller   int64
	holdWait time.Duration
	run      string // names this run's Idempotency-Keys
	user     int64  // the last shopper id used
	http     *http.Client
	events   *watcher
	out      io.Writer
}

// scenario is one kind of order: its token, what the shopper then does, and how it must end.
type scenario struct {
	name  string
	token string
	units int
	// then is what follows the answer: a 3-D Secure answer, nothing, ops' line cancellation.
	then string
	want string
}

var scenarios = []scenario{
	{name: "paid at once", token: "tok_ok", units: 1, want: "CONFIRMED"},
	{name: "3-D Secure, approved", token: "tok_3ds", units: 1, then: "approve", want: "CONFIRMED"},
	{name: "3-D Secure, declined", token: "tok_3ds", units: 1, then: "decline", want: "FAILED PAYMENT_DECLINED"},
	{name: "hold expired", token: "tok_3ds", units: 1, then: "abandon", want: "FAILED HOLD_EXPIRED"},
	{name: "a unit cancelled after payment", token: "tok_ok", units: 2, then: "line-cancel", want: "CONFIRMED"},
}

// placeAll places every scenario's order in turn and prints each; false when one did not end as
// it should.
func (d *demo) placeAll(ctx context.Context) bool {
	fmt.Fprintf(d.out, "make demo: one order of each kind through %s, each a new shopper's, each buying SKU %d (seller %d)\n",
		d.base, d.sku, d.seller)
	ok := true
	var hold time.Duration // the stack's hold, as the first order waiting at 3-D Secure shows it
	for _, s := range scenarios {
		if ctx.Err() != nil {
			return false
		}
		if s.then == "abandon" && hold > d.holdWait {
			fmt.Fprintf(d.out, "\n%s\n  skipped   this stack holds an order's stock for %s (HOLD_TTL), longer than -wait-hold (%s);\n"+
				"            under `HOLD_TTL=20s make run` the demo waits for one to end FAILED HOLD_EXPIRED\n",
				s.name, hold.Round(time.Second), d.holdWait)
			continue
		}
		res, err := d.place(ctx, s)
		if err != nil {
			ok = false
			fmt.Fprintf(d.out, "\n%s\n  FAILED: %v\n", s.name, err)
			continue
		}
		if res.hold > 0 && hold == 0 {
			hold = res.hold
		}
		d.print(s, res)
		if res.ended != s.want {
			ok = false
		}
	}
	return ok
}

// result is what became of one order.
type result struct {
	orderID int64
	placed  string         // what was ordered and the POST's answer
	steps   []string       // what happened after the answer
	ended   string         // the order's final status (and failure code)
	order   map[string]any // the order as its shopper reads it at the end
	hold    time.Duration  // how long the order's hold was when it was placed
}

func (d *demo) place(ctx context.Context, s scenario) (result, error) {
	var res result
	d.user++
	tok, err := d.keys.Mint(auth.Principal{UserID: d.user, Role: auth.RoleShopper}, time.Hour)
	if err != nil {
		return res, err
	}
	a, err := d.call(ctx, http.MethodPost, "/api/v1/addresses", tok, map[string]any{
		"city": "Istanbul", "line1": "Bağdat Caddesi 120, Kadıköy", "lat": 40.978, "lon": 29.063}, http.StatusCreated)
	if err != nil {
		return res, fmt.Errorf("address: %w", err)
	}
	addressID := a.num("addressId")
	if _, err := d.call(ctx, http.MethodPut, fmt.Sprintf("/api/v1/cart/items/%d", d.sku), tok,
		map[string]any{"sellerId": d.seller, "quantity": s.units}, http.StatusOK); err != nil {
		return res, fmt.Errorf("cart: %w", err)
	}
	p, err := d.call(ctx, http.MethodPost, "/api/v1/checkout/preview", tok, nil, http.StatusOK)
	if err != nil {
		return res, fmt.Errorf("preview: %w", err)
	}
	key := fmt.Sprintf("demo-%s-%d", d.run, d.user)
	placedAt := time.Now()
	o, err := d.call(ctx, http.MethodPost, "/api/v1/orders", tok, map[string]any{"priceVersion": p.str("priceVersion"),
		"addressId": addressID, "paymentMethodToken": s.token}, 0, "Idempotency-Key", key)
	if err != nil {
		return res, fmt.Errorf("order: %w", err)
	}
	res.orderID = o.num("orderId")
	if res.orderID == 0 {
		return res, fmt.Errorf("POST /api/v1/orders answered %d: %s", o.status, o.raw)
	}
	answered := fmt.Sprintf("%d %s", o.status, o.str("code"))
	if o.status == http.StatusCreated {
		answered = fmt.Sprintf("%d %s, payment %s", o.status, o.str("status"), o.str("payment", "status"))
	}
	res.placed = fmt.Sprintf("%d × SKU %d, %s %s, %s → %s", s.units, d.sku, p.str("total"), p.str("currency"), s.token, answered)
	if at, err := time.Parse(time.RFC3339Nano, o.str("holdExpiresAt")); err == nil {
		res.hold = at.Sub(placedAt)
	}

	switch s.then {
	case "approve", "decline":
		redirect := o.str("payment", "redirectUrl")
		if err := loadgen.CheckLoopback(redirect); err != nil {
			return res, err
		}
		if err := d.form(ctx, redirect, s.then); err != nil {
			return res, fmt.Errorf("3-D Secure page: %w", err)
		}
		res.steps = append(res.steps, fmt.Sprintf("%sd on the 3-D Secure page; the provider's signed webhook tells the order", s.then))
	case "abandon":
		res.steps = append(res.steps, fmt.Sprintf("left at the 3-D Secure page; its hold ends in %s", res.hold.Round(time.Second)))
	}
	within := time.Minute
	if s.then == "abandon" {
		within += res.hold
	}
	final, err := d.settle(ctx, tok, res.orderID, within)
	if err != nil {
		return res, err
	}
	if st := final.str("status"); st == "FAILED" || st == "CANCELLED" {
		// The order's row ends first; giving back its stock and money follows at once.
		if final, err = d.until(ctx, tok, res.orderID, 15*time.Second, func(a answer) bool {
			return !slices.Contains([]string{"PENDING", "AUTHORIZED", "REQUIRES_ACTION", "UNKNOWN"}, a.str("payment", "status"))
		}); err != nil {
			return res, err
		}
	}
	if s.then == "line-cancel" && final.str("status") == "CONFIRMED" {
		if final, err = d.cancelLine(ctx, tok, res.orderID, &res); err != nil {
			return res, err
		}
	}
	res.order = final.body
	res.ended = strings.TrimSpace(final.str("status") + " " + final.str("failureCode"))
	return res, nil
}

// settle waits for the order to leave PENDING_PAYMENT.
func (d *demo) settle(ctx context.Context, tok string, id int64, within time.Duration) (answer, error) {
	return d.until(ctx, tok, id, within, func(a answer) bool { return a.str("status") != "PENDING_PAYMENT" })
}

// until reads the order as its shopper does until done says so.
func (d *demo) until(ctx context.Context, tok string, id int64, within time.Duration, done func(answer) bool) (answer, error) {
	deadline := time.Now().Add(within)
	for {
		a, err := d.call(ctx, http.MethodGet, fmt.Sprintf("/api/v1/orders/%d", id), tok, nil, http.StatusOK)
		if err != nil || done(a) {
			return a, err
		}
		if time.Now().After(deadline) {
			return a, fmt.Errorf("order %d: still %s, payment %s, after %s", id, a.str("status"), a.str("payment", "status"), within)
		}
		select {
		case <-ctx.Done():
			return a, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// cancelLine: ops cancel one unit of the order's line after payment, as the seller cannot ship
// it, and wait for the refund.
func (d *demo) cancelLine(ctx context.Context, tok string, id int64, res *result) (answer, error) {
	ops, err := d.keys.Mint(auth.Principal{UserID: 950, Role: auth.RoleOps}, time.Hour)
	if err != nil {
		return answer{}, err
	}
	c, err := d.call(ctx, http.MethodPost, fmt.Sprintf("/api/v1/ops/orders/%d/lines/%d/cancel", id, d.sku), ops,
		map[string]any{"units": 1, "reason": "seller_cannot_ship"}, 0, "Idempotency-Key", fmt.Sprintf("demo-%s-%d-line", d.run, id))
	if err != nil {
		return answer{}, fmt.Errorf("line cancellation: %w", err)
	}
	if c.status != http.StatusOK && c.status != http.StatusAccepted {
		return answer{}, fmt.Errorf("line cancellation answered %d: %s", c.status, c.raw)
	}
	res.steps = append(res.steps, fmt.Sprintf("ops cancelled 1 unit (seller_cannot_ship): %d, cancellation %s, refund %s",
		c.status, c.str("cancellation", "status"), c.str("cancellation", "refund")))
	return d.until(ctx, tok, id, time.Minute, func(a answer) bool {
		r := a.str("totals", "refunded")
		return r != "" && r != "0.00"
	})
}

func (d *demo) print(s scenario, res result) {
	o := answer{body: res.order}
	fmt.Fprintf(d.out, "\n%s: order %d\n", s.name, res.orderID)
	fmt.Fprintf(d.out, "  placed    %s\n", res.placed)
	for _, st := range res.steps {
		fmt.Fprintf(d.out, "  then      %s\n", st)
	}
	verdict := "as it should"
	if res.ended != s.want {
		verdict = "UNEXPECTED: should be " + s.want
	}
	fmt.Fprintf(d.out, "  ended     %s (%s)\n", res.ended, verdict)
	fmt.Fprintf(d.out, "  payment   %s: captured %s, refunded %s %s",
		o.str("payment", "status"), o.str("totals", "captured"), o.str("totals", "refunded"), o.str("totals", "currency"))
	if o.str("totals", "cancelled") != "0.00" {
		fmt.Fprintf(d.out, "; kept %s of %s", o.str("totals", "kept"), o.str("totals", "ordered"))
	}
	fmt.Fprintln(d.out)
	if d.events != nil {
		// The relay publishes within a fraction of a second of each commit: wait for the last
		// ones the order's end writes.
		want := map[string][]string{"CONFIRMED": {events.OrderConfirmed}, "FAILED": {events.OrderFailed}}[o.str("status")]
		if s.then == "line-cancel" {
			want = append(want, events.OrderLineCancelled, events.PaymentRefunded)
		}
		seen := d.events.await(res.orderID, want, 5*time.Second)
		fmt.Fprintf(d.out, "  events    %s\n", strings.Join(seen, ", "))
	}
}

// answer is an API answer: its status and JSON body.
type answer struct {
	status int
	body   map[string]any
	raw    []byte
}

func (a answer) at(path ...string) any {
	var v any = a.body
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func (a answer) str(path ...string) string {
	switch v := a.at(path...).(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return ""
}

func (a answer) num(path ...string) int64 {
	v, _ := a.at(path...).(float64)
	return int64(v)
}

// call sends a JSON request with the bearer token; want, when not 0, is the only status taken as
// an answer (any other is an error naming it).
func (d *demo) call(ctx context.Context, method, path, token string, body any, want int, headers ...string) (answer, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return answer{}, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, d.base+path, r)
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := d.http.Do(req)
	if err != nil {
		return answer{}, fmt.Errorf("%s %s: %w (is make run running?)", method, path, err)
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode}
	if a.raw, err = io.ReadAll(resp.Body); err != nil {
		return a, err
	}
	_ = json.Unmarshal(a.raw, &a.body)
	if want != 0 && a.status != want {
		return a, fmt.Errorf("%s %s answered %d: %s", method, path, a.status, bytes.TrimSpace(a.raw))
	}
	return a, nil
}

// form posts what the 3-D Secure page's button sends.
func (d *demo) form(ctx context.Context, page, result string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, page, strings.NewReader(url.Values{"result": {result}}.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := d.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %d", page, resp.StatusCode)
	}
	return nil
}

// watcher collects the order and payment events the stream carries from the start of the run,
// by order id.
type watcher struct {
	b    *events.Broker
	it   jetstream.MessagesContext
	mu   sync.Mutex
	seen map[int64][]string
}

func watch(ctx context.Context, natsURL, prefix string) (*watcher, error) {
	b, err := events.Connect(events.Options{URL: natsURL, Prefix: prefix, Name: "checkout-demo"})
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cons, err := b.JetStream().OrderedConsumer(cctx, events.StreamName(prefix),
		jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy})
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("stream %s at %s: %w", events.StreamName(prefix), natsURL, err)
	}
	it, err := cons.Messages()
	if err != nil {
		b.Close()
		return nil, err
	}
	w := &watcher{b: b, it: it, seen: map[int64][]string{}}
	go func() {
		for {
			m, err := it.Next()
			if err != nil {
				if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
					return
				}
				continue
			}
			e, err := events.Decode(m.Data())
			if err != nil || strings.HasPrefix(e.Type, "stock.") || strings.HasPrefix(e.Type, "cart.") {
				continue
			}
			var data struct {
				OrderID int64 `json:"orderId"`
			}
			if json.Unmarshal(e.Data, &data) != nil || data.OrderID == 0 {
				continue
			}
			w.mu.Lock()
			w.seen[data.OrderID] = append(w.seen[data.OrderID], e.Type)
			w.mu.Unlock()
		}
	}()
	return w, nil
}

// await returns the order's events once every wanted type has arrived, or what arrived within the
// time.
func (w *watcher) await(orderID int64, want []string, within time.Duration) []string {
	deadline := time.Now().Add(within)
	for {
		w.mu.Lock()
		seen := slices.Clone(w.seen[orderID])
		w.mu.Unlock()
		all := true
		for _, t := range want {
			all = all && slices.Contains(seen, t)
		}
		if all || time.Now().After(deadline) {
			if len(seen) == 0 {
				return []string{"(none yet)"}
			}
			return seen
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (w *watcher) stop() {
	w.it.Stop()
	w.b.Close()
}
