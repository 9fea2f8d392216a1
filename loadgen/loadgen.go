// Package loadgen drives the real REST API as shoppers and sellers do, for load runs and the
// end-to-end load test: new shoppers with addresses and carts, checkout previews, orders with
// Idempotency-Keys (some sent twice), 3-D Secure answers on the provider's page, abandoned holds,
// declined cards, cancels and provider timeouts, while a seller keeps the shelves stocked. It
// measures what it sees — rates, latency per endpoint, answers by code — and never touches the
// database: the invariant auditor (package audit) judges what the run left behind.
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/order"
)

// ErrUnreachable: nothing answers at the base URL.
var ErrUnreachable = errors.New("no checkout API answers")

// gen is one run.
type gen struct {
	cfg    Config
	setup  *client // setup and the end's reads: not measured
	load   *client // the load phase: every request measured
	rec    *recorder
	cat    *catalog
	keeper *keeper
	promo  promotions

	next     atomic.Int64
	placedN  atomic.Int64
	browsedN atomic.Int64
	hotN     atomic.Int64
	couponN  atomic.Int64
	coupons  tally // previews with the coupon, by what they said of it
	linesN   atomic.Int64
	repeats  atomic.Int64
	answers  tally
	stopped  tally // shoppers who gave up before POST /orders, by step
	mu       sync.Mutex
	placed   []*placedOrder
	mismatch []string
	lag      lagSamples
}

// placedOrder is one POST /orders and what became of it.
type placedOrder struct {
	user     int64
	key      string
	at       time.Time
	scenario string
	answer   string
	orderID  int64
	hold     time.Time
	final    string
	// faults counts the tries for its key that a fault answered; named, the orders its answers
	// named.
	faults int
	named  []int64
}

// Run drives the API for cfg.Duration (or cfg.Orders orders), then waits for the orders to settle
// and reports. It refuses a base URL that is not on this machine. When ctx ends early, the report
// of what was measured comes with ctx's error.
func Run(ctx context.Context, cfg Config) (Report, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return Report{}, err
	}
	base := strings.TrimRight(cfg.BaseURL, "/")
	hc := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConns: 4 * cfg.Shoppers,
		MaxIdleConnsPerHost: 2*cfg.Shoppers + 8, IdleConnTimeout: 90 * time.Second}}
	g := &gen{cfg: cfg, rec: newRecorder(),
		setup: &client{base: base, http: hc, retryFor: cfg.RetryFor}}
	g.load = &client{base: base, http: hc, rec: g.rec, retryFor: cfg.RetryFor, observe: cfg.Observe}
	g.keeper = &keeper{g: g}

	if err := g.preflight(ctx); err != nil {
		return Report{}, err
	}
	shortfalls, err := g.setupCatalog(ctx)
	if err != nil {
		return Report{}, fmt.Errorf("setting up the catalog: %w", err)
	}
	if err := g.setupPromotions(ctx); err != nil {
		return Report{}, fmt.Errorf("setting up the coupon and the campaign: %w", err)
	}
	// The keeper's later counts are stamped just after the starting ones: no sale may come first.
	time.Sleep(stampSpan)

	if cfg.OnPhase != nil {
		cfg.OnPhase(PhaseLoad)
	}
	start := time.Now()
	stopAt := start.Add(cfg.Duration)
	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Go(func() { g.keeper.run(ctx, stop) })
	bg.Go(func() { g.sampleLag(ctx, stop) })
	endProgress := g.progress(start, stop, &bg)

	var wg sync.WaitGroup
	for i := range cfg.Shoppers {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(cfg.Seed, uint64(i)+1))
			zipf := rand.NewZipf(rnd, cfg.Zipf, 1, uint64(len(g.cat.regular)-1))
			for ctx.Err() == nil && time.Now().Before(stopAt) && !closed(cfg.Stop) {
				n := g.next.Add(1)
				if cfg.Orders > 0 && n > int64(cfg.Orders) {
					return
				}
				g.shop(ctx, rnd, zipf, n)
			}
		})
	}
	wg.Wait()
	loadSeconds := time.Since(start).Seconds()
	campaignErr := g.endCampaign(context.WithoutCancel(ctx))
	if cfg.OnPhase != nil {
		cfg.OnPhase(PhaseSettle)
	}
	close(stop)
	bg.Wait()
	endProgress()

	if ctx.Err() != nil {
		// Interrupted: what was measured so far, without the end's wait.
		return g.report(start, loadSeconds, shortfalls), ctx.Err()
	}
	if err := g.settle(ctx); err != nil {
		return g.report(start, loadSeconds, shortfalls), err
	}
	if campaignErr != nil {
		return g.report(start, loadSeconds, shortfalls), fmt.Errorf("ending the campaign on the hot SKUs: %w", campaignErr)
	}
	return g.report(start, loadSeconds, shortfalls), nil
}

// closed says whether c is closed; a nil channel never is.
func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// preflight fails clearly when the API is not there or not ready.
func (g *gen) preflight(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	a, err := g.setup.send(pctx, request{endpoint: "GET /readyz", method: http.MethodGet, url: "/readyz"})
	if err != nil {
		return fmt.Errorf("%w at %s (%v): start the stack with `make run` in another terminal, or point --base-url at it",
			ErrUnreachable, g.cfg.BaseURL, err)
	}
	if a.status != http.StatusOK {
		return fmt.Errorf("the API at %s is not ready (%d): %s", g.cfg.BaseURL, a.status, truncate(string(a.body), 300))
	}
	return nil
}

// cities are where shoppers live: most near the Istanbul warehouse.
var cities = []city{{"Istanbul", 41.01, 28.97, 0.6}, {"Ankara", 39.93, 32.86, 0.25}, {"Izmir", 38.42, 27.14, 0.15}}

type city struct {
	name     string
	lat, lon float64
	share    float64
}

func pickCity(u float64) city {
	acc := 0.0
	for _, c := range cities {
		acc += c.share
		if u < acc {
			return c
		}
	}
	return cities[len(cities)-1]
}

// line is one cart line of an order.
type line struct {
	s   *sku
	qty int32
}

// pickLines chooses the order's lines: 1 + Poisson(Lines-1) distinct SKUs, popular ones far more
// often (Zipf), and a hot SKU first in HotShare of the orders.
func (g *gen) pickLines(rnd *rand.Rand, zipf *rand.Zipf) []line {
	n := 1 + poisson(rnd, g.cfg.Lines-1)
	n = min(n, 10, len(g.cat.regular)+min(1, len(g.cat.hot)))
	var out []line
	seen := map[*sku]bool{}
	if len(g.cat.hot) > 0 && rnd.Float64() < g.cfg.HotShare {
		h := g.cat.hot[rnd.IntN(len(g.cat.hot))]
		out, seen[h] = append(out, line{s: h, qty: 1}), true
	}
	for tries := 0; len(out) < n && tries < 50; tries++ {
		s := g.cat.regular[zipf.Uint64()]
		if seen[s] {
			continue
		}
		seen[s] = true
		q := int32(1)
		switch u := rnd.Float64(); {
		case u < 0.05:
			q = 3
		case u < 0.20:
			q = 2
		}
		out = append(out, line{s: s, qty: min(q, s.maxPerOrder)})
	}
	return out
}

// poisson draws from a Poisson law of mean lambda (Knuth; lambda is small here).
func poisson(rnd *rand.Rand, lambda float64) int {
	if lambda <= 0 {
		return 0
	}
	l, k, p := math.Exp(-lambda), 0, 1.0
	for {
		p *= rnd.Float64()
		if p <= l {
			return k
		}
		k++
	}
}

func paymentToken(scenario string) string {
	switch scenario {
	case ScenarioOK:
		return "tok_ok"
	case ScenarioDecline:
		return "tok_decline"
	case ScenarioTimeout:
		return "tok_timeout"
	}
	return "tok_3ds"
}

type orderAnswer struct {
	OrderID int64  `json:"orderId"`
	Status  string `json:"status"`
	Code    string `json:"code"`
	Payment *struct {
		Status      string `json:"status"`
		RedirectURL string `json:"redirectUrl"`
	} `json:"payment"`
	HoldExpiresAt *time.Time `json:"holdExpiresAt"`
	Items         []struct {
		SKUID     int64 `json:"skuId"`
		Available int32 `json:"available"`
	} `json:"items"`
}

// shopperToken is the shopper's token: from the provider (Tokens), else minted to outlive the
// run.
func (g *gen) shopperToken(ctx context.Context, user int64) (string, error) {
	if g.cfg.Tokens != nil {
		return g.cfg.Tokens.Shopper(ctx, user)
	}
	return auth.Mint([]byte(g.cfg.JWTSecret), auth.Principal{UserID: user, Role: auth.RoleShopper},
		g.cfg.Duration+g.cfg.HoldTTL+g.cfg.Settle+time.Hour)
}

// shop is one shopper's visit, from a new account to the order and what follows it.
func (g *gen) shop(ctx context.Context, rnd *rand.Rand, zipf *rand.Zipf, n int64) {
	user := g.cfg.UserBase + n
	tok, err := g.shopperToken(ctx, user)
	if err != nil {
		g.stopped.add("token: " + err.Error())
		return
	}
	c := pickCity(rnd.Float64())
	a, err := g.load.send(ctx, request{endpoint: epAddress, method: http.MethodPost, url: "/api/v1/addresses", token: tok,
		json: map[string]any{"city": c.name, "line1": "Load street " + strconv.FormatInt(n, 10),
			"lat": c.lat + (rnd.Float64()-0.5)/10, "lon": c.lon + (rnd.Float64()-0.5)/10}})
	if !ok(a, err, http.StatusCreated) {
		g.stopped.add(failure("address", a, err))
		return
	}
	var addr struct {
		AddressID int64 `json:"addressId"`
	}
	_ = a.decode(&addr)

	lines := g.pickLines(rnd, zipf)
	for _, l := range lines {
		a, err := g.load.send(ctx, request{endpoint: epCartPut, method: http.MethodPut, token: tok,
			url:  "/api/v1/cart/items/" + strconv.FormatInt(l.s.id, 10),
			json: map[string]any{"sellerId": l.s.seller, "quantity": l.qty}})
		if !ok(a, err, http.StatusOK) {
			g.stopped.add(failure("cart", a, err))
			return
		}
	}
	if a, err := g.load.send(ctx, request{endpoint: epCartGet, method: http.MethodGet, url: "/api/v1/cart", token: tok}); !ok(a, err, http.StatusOK) {
		g.stopped.add(failure("cart view", a, err))
		return
	}
	// A shopper previewing with the coupon orders with it: the priceVersion names it.
	coupon := ""
	if g.promo.coupon != "" && rnd.Float64() < g.cfg.CouponShare {
		coupon = g.promo.coupon
	}
	previewBody := map[string]any{}
	if coupon != "" {
		previewBody["couponCode"] = coupon
	}
	a, err = g.load.send(ctx, request{endpoint: epPreview, method: http.MethodPost, url: "/api/v1/checkout/preview", token: tok,
		json: previewBody})
	if !ok(a, err, http.StatusOK) {
		g.stopped.add(failure("preview", a, err))
		return
	}
	var pv struct {
		PriceVersion string `json:"priceVersion"`
		Items        []struct {
			SKUID int64 `json:"skuId"`
			// Stock is the line's hint and Available its count, given only at or below the server's
			// LOW_STOCK_THRESHOLD; both are absent while ops have the preview's stock warnings
			// switched off.
			Stock     string `json:"stock"`
			Available *int32 `json:"available"`
		} `json:"items"`
		Coupon *struct {
			Applies bool   `json:"applies"`
			Reason  string `json:"reason"`
		} `json:"coupon"`
	}
	_ = a.decode(&pv)
	if coupon != "" {
		switch {
		case pv.Coupon == nil:
			g.coupons.add("not shown")
		case pv.Coupon.Applies:
			g.coupons.add("applies")
		default:
			g.coupons.add(pv.Coupon.Reason)
		}
	}
	for _, it := range pv.Items {
		low := it.Stock == "LOW_STOCK" || it.Stock == "OUT_OF_STOCK" || (it.Available != nil && *it.Available <= 0)
		if s := g.cat.byID[it.SKUID]; s != nil && (low || it.Available != nil && *it.Available <= s.lowWater) {
			g.keeper.low(s)
		}
	}

	if g.cfg.BrowseOnly {
		g.browsedN.Add(1)
		return
	}
	scenario := g.cfg.Mix.pick(rnd.Float64())
	key := "lg-" + g.cfg.RunID + "-" + strconv.FormatInt(n, 10)
	body := map[string]any{"priceVersion": pv.PriceVersion, "addressId": addr.AddressID,
		"paymentMethodToken": paymentToken(scenario)}
	if coupon != "" {
		body["couponCode"] = coupon
		g.couponN.Add(1)
	}
	g.placedN.Add(1)
	g.linesN.Add(int64(len(lines)))
	if lines[0].s.hot {
		g.hotN.Add(1)
	}
	repeat := rnd.Float64() < g.cfg.RepeatShare
	placedAt := time.Now()
	var first, second answer
	var ferr, serr error
	switch {
	case repeat && rnd.IntN(2) == 0: // a double click: both at once
		var both sync.WaitGroup
		both.Go(func() { first, ferr = g.placeOrder(ctx, epOrder, tok, key, body) })
		both.Go(func() { second, serr = g.placeOrder(ctx, epRepeat, tok, key, body) })
		both.Wait()
	case repeat: // a retry after the answer
		first, ferr = g.placeOrder(ctx, epOrder, tok, key, body)
		second, serr = g.placeOrder(ctx, epRepeat, tok, key, body)
	default:
		first, ferr = g.placeOrder(ctx, epOrder, tok, key, body)
	}
	if repeat {
		g.repeats.Add(1)
		if diff := sameAnswer(first, ferr, second, serr); diff != "" {
			g.mu.Lock()
			g.mismatch = append(g.mismatch, "key "+key+": "+diff)
			g.mu.Unlock()
		}
	}
	p := &placedOrder{user: user, key: key, at: placedAt, scenario: scenario,
		faults: first.faults + second.faults, named: namedOrders(first, second)}
	var oa orderAnswer
	if ferr == nil {
		_ = first.decode(&oa)
		p.orderID = oa.OrderID
	}
	p.answer = answerOutcome(first, ferr)
	g.answers.add(p.answer)
	g.mu.Lock()
	g.placed = append(g.placed, p)
	g.mu.Unlock()

	switch p.answer {
	case string(problem.OutOfStock):
		p.final = ended(order.StatusFailed, problem.OutOfStock)
		for _, it := range oa.Items {
			if s := g.cat.byID[it.SKUID]; s != nil {
				g.keeper.low(s)
			}
		}
		return
	case string(problem.PaymentDeclined):
		p.final = ended(order.StatusFailed, problem.PaymentDeclined)
		return
	case "CREATED":
	default:
		return
	}
	if oa.HoldExpiresAt != nil {
		p.hold = *oa.HoldExpiresAt
	} else {
		p.hold = time.Now().Add(g.cfg.HoldTTL)
	}
	redirect := ""
	if oa.Payment != nil {
		redirect = oa.Payment.RedirectURL
	}
	switch scenario {
	case Scenario3DSApprove, Scenario3DSDecline:
		result := "approve"
		if scenario == Scenario3DSDecline {
			result = "decline"
		}
		if err := CheckLoopback(redirect); err != nil {
			g.stopped.add("3-D Secure page not on this machine: " + redirect)
			break
		}
		_, _ = g.load.send(ctx, request{endpoint: epThreeDS, method: http.MethodPost, url: redirect,
			form: url.Values{"result": {result}}})
	case ScenarioCancel:
		_, _ = g.load.send(ctx, request{endpoint: epCancel, method: http.MethodPost, token: tok,
			url: "/api/v1/orders/" + strconv.FormatInt(p.orderID, 10) + "/cancel"})
	}
	_, _ = g.load.send(ctx, request{endpoint: epGetOrder, method: http.MethodGet, token: tok,
		url: "/api/v1/orders/" + strconv.FormatInt(p.orderID, 10)})
}

// placeOrder posts the order, and repeats it with the same key while the API says 503 (as its
// answer asks), a few times: after the answer's Retry-After when it is BUSY (up to 10 s, spread
// by a fifth so that refused shoppers do not come back together), after a short back-off
// otherwise.
func (g *gen) placeOrder(ctx context.Context, endpoint, tok, key string, body map[string]any) (answer, error) {
	h := http.Header{"Idempotency-Key": {key}}
	target := "/api/v1/orders"
	if g.cfg.OrderURL != "" {
		target = g.cfg.OrderURL
	}
	faults := 0
	if endpoint == epOrder {
		start := time.Now()
		token, _ := body["paymentMethodToken"].(string)
		defer func() {
			waited := time.Since(start)
			g.rec.wait(EndpointOrderShopper, waited)
			g.rec.wait(EndpointOrderPaidWith(token), waited)
		}()
	}
	for attempt := 0; ; attempt++ {
		a, err := g.load.send(ctx, request{endpoint: endpoint, method: http.MethodPost, url: target,
			token: tok, header: h, json: body})
		faults += a.faults
		a.faults = faults
		// With RetryFor, send has already ridden out the faults: only BUSY is waited out here.
		if err != nil || a.status != http.StatusServiceUnavailable || a.code == "PAYMENT_UNAVAILABLE" || a.givenUp() || attempt == 4 ||
			(g.cfg.RetryFor > 0 && a.code != codeBusy) {
			return a, err
		}
		if a.code != codeBusy {
			faults++
			a.faults = faults
		}
		wait := time.Duration(attempt+1) * 300 * time.Millisecond
		if a.code == codeBusy {
			wait = min(max(a.retryAfter, time.Second), 10*time.Second)
			wait += time.Duration(rand.Int64N(int64(wait / 5)))
		}
		select {
		case <-ctx.Done():
			return a, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// namedOrders are the orders the answers to one key named, each once.
func namedOrders(answers ...answer) []int64 {
	var out []int64
	for _, a := range answers {
		var o orderAnswer
		if a.status == 0 || a.decode(&o) != nil || o.OrderID == 0 || slices.Contains(out, o.OrderID) {
			continue
		}
		out = append(out, o.OrderID)
	}
	return out
}

// sameAnswer compares two answers to one key: they must name the same order with the same
// outcome. It returns what differs.
func sameAnswer(a answer, aerr error, b answer, berr error) string {
	if aerr != nil || berr != nil || a.code == codeBusy || b.code == codeBusy {
		return "" // no answer to compare: a BUSY refusal is nobody's answer, the key's comes later
	}
	var x, y orderAnswer
	_ = a.decode(&x)
	_ = b.decode(&y)
	switch {
	case a.status != b.status || a.code != b.code:
		return fmt.Sprintf("%d %s then %d %s", a.status, a.code, b.status, b.code)
	case x.OrderID != y.OrderID:
		return fmt.Sprintf("order %d then order %d", x.OrderID, y.OrderID)
	case x.Payment != nil && y.Payment != nil && (x.Payment.Status != y.Payment.Status || x.Payment.RedirectURL != y.Payment.RedirectURL):
		return fmt.Sprintf("payment %s then %s", x.Payment.Status, y.Payment.Status)
	}
	return ""
}

func answerOutcome(a answer, err error) string {
	switch {
	case err != nil:
		return "NO_ANSWER"
	case a.status == http.StatusCreated:
		return "CREATED"
	case a.code != "":
		return a.code
	}
	return "HTTP_" + strconv.Itoa(a.status)
}

func ok(a answer, err error, want int) bool { return err == nil && a.status == want }

func failure(step string, a answer, err error) string {
	if err != nil {
		return step + ": no answer"
	}
	return fmt.Sprintf("%s: %d %s", step, a.status, a.code)
}

// progress rewrites one status line on cfg.Progress every half second while the load runs: time
// out of the run's duration, orders and requests so far and their rates. It returns a function
// that ends the line.
func (g *gen) progress(start time.Time, stop <-chan struct{}, bg *sync.WaitGroup) func() {
	if g.cfg.Progress == nil {
		return func() {}
	}
	line := func() {
		el := time.Since(start)
		placed, total := g.placedN.Load(), g.rec.total()
		fmt.Fprintf(g.cfg.Progress, "\rload %3.0f/%.0f s · orders %d (%.1f/s) · requests %d (%.0f/s)   ",
			min(el, g.cfg.Duration).Seconds(), g.cfg.Duration.Seconds(), placed, float64(placed)/el.Seconds(), total,
			float64(total)/el.Seconds())
	}
	bg.Go(func() {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				line()
			}
		}
	})
	return func() {
		line()
		fmt.Fprintln(g.cfg.Progress)
	}
}

// settle waits for the abandoned holds to expire (when asked) and reads every placed order's
// final status.
func (g *gen) settle(ctx context.Context) error {
	g.mu.Lock()
	placed := append([]*placedOrder{}, g.placed...)
	g.mu.Unlock()
	if g.cfg.WaitAbandoned {
		var latest time.Time
		for _, p := range placed {
			if p.scenario == ScenarioAbandon && p.answer == "CREATED" && p.hold.After(latest) {
				latest = p.hold
			}
		}
		if wait := time.Until(latest) + 2*time.Second; !latest.IsZero() && wait > 0 {
			if g.cfg.Progress != nil {
				fmt.Fprintf(g.cfg.Progress, "\nwaiting %s for the abandoned orders' holds to expire\n", wait.Round(time.Second))
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(wait):
			}
		}
	}
	deadline := time.Now().Add(g.cfg.Settle)
	work := make(chan *placedOrder)
	var wg sync.WaitGroup
	for range g.cfg.Shoppers {
		wg.Go(func() {
			for p := range work {
				g.readFinal(ctx, p, deadline)
			}
		})
	}
	for _, p := range placed {
		if p.answer == "CREATED" {
			work <- p
		}
	}
	close(work)
	wg.Wait()
	return ctx.Err()
}

// readFinal reads an order until it is final (or, for an abandoned order not waited for, once).
func (g *gen) readFinal(ctx context.Context, p *placedOrder, deadline time.Time) {
	for {
		var a answer
		tok, err := g.shopperToken(ctx, p.user)
		if err == nil {
			a, err = g.setup.send(ctx, request{endpoint: epGetOrder, method: http.MethodGet, token: tok,
				url: "/api/v1/orders/" + strconv.FormatInt(p.orderID, 10)})
		}
		var o struct {
			Status      string  `json:"status"`
			FailureCode *string `json:"failureCode"`
		}
		if err == nil && a.status == http.StatusOK && a.decode(&o) == nil {
			p.final = o.Status
			if o.FailureCode != nil && *o.FailureCode != "" {
				p.final += "/" + *o.FailureCode
			}
			if order.Status(o.Status).Final() {
				return
			}
			if p.scenario == ScenarioAbandon && !g.cfg.WaitAbandoned && time.Now().Before(p.hold) {
				p.final += " (in its hold)"
				return
			}
		} else if err != nil {
			p.final = "UNREADABLE"
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// expectedFinal is the final status each scenario should end in.
func expectedFinal(scenario string) string {
	switch scenario {
	case ScenarioOK, Scenario3DSApprove, ScenarioTimeout:
		return string(order.StatusConfirmed)
	case Scenario3DSDecline, ScenarioDecline:
		return ended(order.StatusFailed, problem.PaymentDeclined)
	case ScenarioAbandon:
		return ended(order.StatusFailed, problem.HoldExpired)
	case ScenarioCancel:
		return ended(order.StatusCancelled, problem.CancelledByShopper)
	}
	return ""
}

// ended is how the report writes an order's end: its status and why.
func ended(s order.Status, why problem.Code) string { return string(s) + "/" + string(why) }
