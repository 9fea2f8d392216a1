package loadgen

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/order"
)

// Report is what a run measured. The JSON form is the same as the table, for scripts.
type Report struct {
	BaseURL     string    `json:"baseUrl"`
	MetricsURL  string    `json:"metricsUrl,omitempty"`
	StartedAt   time.Time `json:"startedAt"`
	LoadSeconds float64   `json:"loadSeconds"`
	Shoppers    int       `json:"shoppers"`
	Mix         string    `json:"mix"`
	HotSKUs     []string  `json:"hotSkus"`
	HotShare    float64   `json:"hotShare"`
	CatalogSize int       `json:"catalogSize"`
	HoldTTL     string    `json:"holdTtl"`
	MeanLines   float64   `json:"meanLines"`
	HotOrders   int64     `json:"hotOrders"`
	// CampaignHot is the campaign on the hot SKUs (percent off; 0: none). CouponShare is the share
	// of orders placed with the run's coupon Coupon, CouponOrders how many were, and Coupons what
	// their previews said of it ("applies", or the reason it did not).
	CampaignHot  float64 `json:"campaignHot"`
	CouponShare  float64 `json:"couponShare"`
	Coupon       string  `json:"coupon,omitempty"`
	CouponOrders int64   `json:"couponOrders"`
	Coupons      []Count `json:"coupons,omitempty"`
	Requests     int64   `json:"requests"`
	RequestsPerS float64 `json:"requestsPerSecond"`
	Orders       int64   `json:"orders"`
	OrdersPerS   float64 `json:"ordersPerSecond"`
	// Browsed counts the visits that stopped after the preview, with Config.BrowseOnly.
	Browsed int64 `json:"browsed,omitempty"`
	// Stopped counts shoppers who gave up before POST /orders, by step and answer.
	Stopped []Count `json:"stopped"`
	// Answers counts orders by the answer to POST /orders; Finals by the status they ended in.
	Answers   []Count          `json:"answers"`
	Finals    []Count          `json:"finals"`
	Scenarios []ScenarioResult `json:"scenarios"`
	Endpoints []EndpointStats  `json:"endpoints"`
	Errors    []ErrorCount     `json:"errors"`
	// Repeats is how many orders were sent twice with one key; Mismatches lists the pairs whose
	// answers differed (there must be none).
	Repeats    int64    `json:"repeats"`
	Mismatches []string `json:"mismatches"`
	TopUps     int64    `json:"stockTopUps"`
	// TopUpFailures and SetupShortfalls should be 0: a shortfall means an earlier run's holds
	// exceeded the stock this run set.
	TopUpFailures   int64            `json:"stockTopUpFailures"`
	SetupShortfalls int              `json:"setupShortfalls"`
	Lag             *AvailabilityLag `json:"availabilityLag"`
	// Placed is every order placed, with Config.KeepOrders.
	Placed []PlacedOrder `json:"placed,omitempty"`
}

// PlacedOrder is one POST /api/v1/orders of a run: the shopper and the key it was placed with, the
// answer, the order and its final status, and how it went for the key.
type PlacedOrder struct {
	User     int64     `json:"user"`
	Key      string    `json:"key"`
	PlacedAt time.Time `json:"placedAt"`
	Scenario string    `json:"scenario"`
	// Answer is CREATED, the error code of the answer, or NO_ANSWER; Final is what the order ended
	// as (status/failure code), empty for an answer that placed nothing.
	Answer  string `json:"answer"`
	OrderID int64  `json:"orderId,omitempty"`
	Final   string `json:"final,omitempty"`
	// AsExpected: the order ended as its scenario says, or was refused for stock, for its coupon
	// or as BUSY (nothing placed).
	AsExpected bool `json:"asExpected"`
	// Faults counts the tries for the key that a fault answered (no answer, 502, 503, 504) before
	// its answer; Named lists every order the key's answers named: one at most.
	Faults int     `json:"faults"`
	Named  []int64 `json:"named,omitempty"`
}

// ScenarioResult compares what each scenario's orders became with what they should become.
type ScenarioResult struct {
	Scenario   string           `json:"scenario"`
	Expected   string           `json:"expected"`
	Orders     int64            `json:"orders"`
	OutOfStock int64            `json:"outOfStock"`
	AsExpected int64            `json:"asExpected"`
	Other      map[string]int64 `json:"other"`
	// Coupon counts orders refused for their coupon (409 COUPON_…): nothing was placed for them.
	Coupon int64 `json:"coupon"`
	// Busy counts orders still refused 503 BUSY (admission control) when the shopper gave up
	// retrying: nothing was placed for them.
	Busy int64 `json:"busy"`
}

// Unexpected is how many orders ended otherwise than their scenario says (refusals for stock
// for a busy checkout and for a coupon apart).
func (r Report) Unexpected() int64 {
	n := int64(0)
	for _, s := range r.Scenarios {
		for _, c := range s.Other {
			n += c
		}
	}
	return n
}

func (g *gen) report(start time.Time, seconds float64, shortfalls int) Report {
	r := Report{BaseURL: g.cfg.BaseURL, MetricsURL: g.cfg.MetricsURL, StartedAt: start.UTC(), LoadSeconds: seconds, Shoppers: g.cfg.Shoppers,
		Mix: g.cfg.Mix.String(), HotSKUs: hotCodes(g.cfg.HotSKUs), HotShare: g.cfg.HotShare, CatalogSize: g.cfg.CatalogSize,
		HoldTTL: g.cfg.HoldTTL.String(), HotOrders: g.hotN.Load(), Requests: g.rec.total(), Orders: g.placedN.Load(),
		Browsed:     g.browsedN.Load(),
		CampaignHot: g.cfg.CampaignHot, CouponShare: g.cfg.CouponShare, Coupon: g.promo.coupon, CouponOrders: g.couponN.Load(),
		Repeats: g.repeats.Load(), SetupShortfalls: shortfalls, Lag: g.lag.summary(), Mismatches: []string{}}
	r.RequestsPerS, r.OrdersPerS = rate(r.Requests, seconds), rate(r.Orders, seconds)
	if r.Orders > 0 {
		r.MeanLines = float64(g.linesN.Load()) / float64(r.Orders)
	}
	r.Stopped, r.Answers = g.stopped.counts(seconds), g.answers.counts(seconds)
	if r.Coupon != "" {
		r.Coupons = g.coupons.counts(seconds)
	}
	r.Endpoints, r.Errors = g.rec.endpoints(seconds), g.rec.errors()
	g.keeper.mu.Lock()
	r.TopUps, r.TopUpFailures = g.keeper.topUps, g.keeper.failures
	g.keeper.mu.Unlock()

	g.mu.Lock()
	defer g.mu.Unlock()
	r.Mismatches = append(r.Mismatches, g.mismatch...)
	var finals tally
	byScenario := map[string]*ScenarioResult{}
	for _, p := range g.placed {
		s := byScenario[p.scenario]
		if s == nil {
			s = &ScenarioResult{Scenario: p.scenario, Expected: expectedFinal(p.scenario), Other: map[string]int64{}}
			if p.scenario == ScenarioAbandon && !g.cfg.WaitAbandoned {
				s.Expected += " (" + string(order.StatusPendingPayment) + " while in its hold)"
			}
			byScenario[p.scenario] = s
		}
		s.Orders++
		final := p.final
		if final == "" {
			final = "answer " + p.answer
		}
		finals.add(final)
		expected := true
		switch {
		case final == expectedFinal(p.scenario):
			s.AsExpected++
		case p.answer == string(problem.OutOfStock):
			s.OutOfStock++
		case p.answer == codeBusy:
			s.Busy++
		case isCouponRefusal(p.answer):
			s.Coupon++
		case p.scenario == ScenarioAbandon && !g.cfg.WaitAbandoned && strings.HasPrefix(final, string(order.StatusPendingPayment)):
			s.AsExpected++ // still in its hold, as it should be
		default:
			s.Other[final]++
			expected = false
		}
		if g.cfg.KeepOrders {
			r.Placed = append(r.Placed, PlacedOrder{User: p.user, Key: p.key, PlacedAt: p.at.UTC(), Scenario: p.scenario,
				Answer: p.answer, OrderID: p.orderID, Final: p.final, AsExpected: expected, Faults: p.faults, Named: p.named})
		}
	}
	r.Finals = finals.counts(seconds)
	for _, name := range scenarios {
		if s := byScenario[name]; s != nil {
			r.Scenarios = append(r.Scenarios, *s)
		}
	}
	return r
}

// WriteText writes the report as tables.
func (r Report) WriteText(w io.Writer) error {
	b := &strings.Builder{}
	fmt.Fprintf(b, "Load run %s against %s: %.1f s of load, %d shoppers\n", r.StartedAt.Format(time.RFC3339),
		r.BaseURL, r.LoadSeconds, r.Shoppers)
	fmt.Fprintf(b, "  mix %s; hot SKUs %s in %.0f%% of orders (%d orders); catalog %d SKUs; %.2f lines per order; HOLD_TTL %s\n",
		r.Mix, strings.Join(r.HotSKUs, ", "), 100*r.HotShare, r.HotOrders, r.CatalogSize, r.MeanLines, r.HoldTTL)
	if r.CampaignHot > 0 {
		fmt.Fprintf(b, "  campaign on the hot SKUs: %g%% off\n", r.CampaignHot)
	}
	if r.Coupon != "" {
		fmt.Fprintf(b, "  coupon %s on %.0f%% of orders (%d orders)\n", r.Coupon, 100*r.CouponShare, r.CouponOrders)
	}
	b.WriteString("\n")

	table(b, []string{"", "count", "per s"}, [][]string{
		{"requests", fmt.Sprint(r.Requests), f1(r.RequestsPerS)},
		{"orders placed (POST /api/v1/orders)", fmt.Sprint(r.Orders), f1(r.OrdersPerS)},
	})
	b.WriteString("\nOrders by answer to POST /api/v1/orders\n")
	table(b, []string{"answer", "orders", "per s"}, countRows(r.Answers))
	b.WriteString("\nOrders by final status\n")
	table(b, []string{"final status", "orders", "per s"}, countRows(r.Finals))
	b.WriteString("\nScenarios (what each order should end as)\n")
	var rows [][]string
	for _, s := range r.Scenarios {
		other := make([]string, 0, len(s.Other))
		for k, n := range s.Other {
			other = append(other, fmt.Sprintf("%s %d", k, n))
		}
		sort.Strings(other)
		rows = append(rows, []string{s.Scenario, s.Expected, fmt.Sprint(s.Orders), fmt.Sprint(s.AsExpected),
			fmt.Sprint(s.OutOfStock), fmt.Sprint(s.Busy), fmt.Sprint(s.Coupon), orDash(strings.Join(other, ", "))})
	}
	table(b, []string{"scenario", "expected", "orders", "as expected", "out of stock", "refused busy", "refused coupon", "other"}, rows)
	if len(r.Coupons) > 0 {
		b.WriteString("\nPreviews with the coupon, by what they said of it\n")
		table(b, []string{"coupon", "previews", "per s"}, countRows(r.Coupons))
	}
	if len(r.Stopped) > 0 {
		b.WriteString("\nShoppers who stopped before ordering\n")
		table(b, []string{"step and answer", "shoppers", "per s"}, countRows(r.Stopped))
	}

	b.WriteString("\nLatency by endpoint (load phase)\n")
	rows = nil
	for _, e := range r.Endpoints {
		rows = append(rows, []string{e.Endpoint, fmt.Sprint(e.Requests), f1(e.PerSecond), ms(e.P50Ms), ms(e.P95Ms),
			ms(e.P99Ms), ms(e.MaxMs)})
	}
	table(b, []string{"endpoint", "requests", "per s", "p50 ms", "p95 ms", "p99 ms", "max ms"}, rows)

	b.WriteString("\nErrors by code\n")
	rows = nil
	for _, e := range r.Errors {
		status := fmt.Sprint(e.Status)
		if e.Status == 0 {
			status = "no answer"
		}
		kind := "fault"
		if e.Expected {
			kind = "expected"
		}
		rows = append(rows, []string{e.Endpoint, status, orDash(e.Code), fmt.Sprint(e.Count), kind})
	}
	if len(rows) == 0 {
		rows = [][]string{{"none", "", "", "", ""}}
	}
	table(b, []string{"endpoint", "status", "code", "count", ""}, rows)

	fmt.Fprintf(b, "\nIdempotency: %d orders sent twice with one key, %d different answers\n", r.Repeats, len(r.Mismatches))
	for _, m := range r.Mismatches {
		fmt.Fprintf(b, "  MISMATCH %s\n", m)
	}
	fmt.Fprintf(b, "Stock: %d top-ups by the seller (%d failed), %d shortfalls when setting the starting stock\n",
		r.TopUps, r.TopUpFailures, r.SetupShortfalls)
	if r.Lag != nil {
		fmt.Fprintf(b, "Availability projection lag (%s, sampled each second): max %.3f s, mean %.3f s over %d samples; pending changes max %.0f\n",
			metricLag, r.Lag.MaxSeconds, r.Lag.MeanSeconds, r.Lag.Samples, r.Lag.MaxPendingChanges)
	} else if r.MetricsURL == "" {
		fmt.Fprintln(b, "Availability projection lag: not sampled (no metrics URL)")
	} else {
		fmt.Fprintf(b, "Availability projection lag: %s not on %s\n", metricLag, r.MetricsURL)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func table(b *strings.Builder, head []string, rows [][]string) {
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	line := func(cells []string) {
		fmt.Fprintf(tw, "  %s\t", cells[0])
		for _, c := range cells[1:] {
			fmt.Fprintf(tw, "%s\t", c)
		}
		fmt.Fprintln(tw)
	}
	line(head)
	for _, r := range rows {
		line(r)
	}
	_ = tw.Flush()
}

func countRows(cs []Count) [][]string {
	rows := make([][]string, 0, len(cs))
	for _, c := range cs {
		rows = append(rows, []string{c.Outcome, fmt.Sprint(c.Orders), f1(c.PerSecond)})
	}
	return rows
}

func f1(v float64) string { return fmt.Sprintf("%.1f", v) }

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}
