package loadgen

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Scenarios: what a shopper does after the order is placed (the payment mix).
const (
	ScenarioOK          = "ok"          // tok_ok: authorized at once, confirmed
	Scenario3DSApprove  = "3ds-approve" // tok_3ds, then Approve on the provider's page
	Scenario3DSDecline  = "3ds-decline" // tok_3ds, then Decline on the provider's page
	ScenarioAbandon     = "abandon"     // tok_3ds, then nothing: the hold expires
	ScenarioDecline     = "decline"     // tok_decline: 402 at once
	ScenarioCancel      = "cancel"      // tok_3ds, then the shopper cancels
	ScenarioTimeout     = "timeout"     // tok_timeout: the provider does not answer, then is asked
	scenarioUnspecified = ""
)

// scenarios in report order.
var scenarios = []string{ScenarioOK, Scenario3DSApprove, Scenario3DSDecline, ScenarioAbandon, ScenarioDecline,
	ScenarioCancel, ScenarioTimeout}

// Mix is the share of each scenario (any scale; normalised).
type Mix map[string]float64

// CampaignMix is a November campaign: most pay, a fair share on 3-D Secure, some walk away or are
// declined, a few cancel, and the provider sometimes times out.
var CampaignMix = Mix{ScenarioOK: 35, Scenario3DSApprove: 25, Scenario3DSDecline: 5, ScenarioAbandon: 10,
	ScenarioDecline: 8, ScenarioCancel: 7, ScenarioTimeout: 10}

// ParseMix reads "campaign" or "ok=40,3ds-approve=30,abandon=10,...".
func ParseMix(s string) (Mix, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "campaign" {
		return CampaignMix, nil
	}
	m := Mix{}
	for _, part := range strings.Split(s, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("mix %q: want name=share, such as ok=40", part)
		}
		name = strings.TrimSpace(name)
		if !validScenario(name) {
			return nil, fmt.Errorf("mix: unknown scenario %q (one of %s)", name, strings.Join(scenarios, ", "))
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil || f < 0 {
			return nil, fmt.Errorf("mix: %s=%q is not a share ≥ 0", name, val)
		}
		m[name] += f
	}
	if m.total() <= 0 {
		return nil, errors.New("mix: every share is zero")
	}
	return m, nil
}

func validScenario(name string) bool {
	for _, s := range scenarios {
		if s == name {
			return true
		}
	}
	return false
}

func (m Mix) total() float64 {
	t := 0.0
	for _, v := range m {
		t += v
	}
	return t
}

// String writes the mix in percent, in report order.
func (m Mix) String() string {
	t := m.total()
	var parts []string
	for _, s := range scenarios {
		if m[s] > 0 {
			parts = append(parts, fmt.Sprintf("%s=%.0f%%", s, 100*m[s]/t))
		}
	}
	return strings.Join(parts, ",")
}

// pick returns the scenario for u in [0, 1).
func (m Mix) pick(u float64) string {
	t := m.total()
	acc := 0.0
	for _, s := range scenarios {
		acc += m[s] / t
		if u < acc {
			return s
		}
	}
	for i := len(scenarios) - 1; i >= 0; i-- {
		if m[scenarios[i]] > 0 {
			return scenarios[i]
		}
	}
	return scenarioUnspecified
}

// Tokens gives the tokens of shoppers (user ids) and sellers (seller ids) from an identity
// provider, each valid for a while yet.
type Tokens interface {
	Shopper(ctx context.Context, user int64) (string, error)
	Seller(ctx context.Context, seller int64) (string, error)
}

// Config is one load run. Zero values take the defaults of Defaults.
type Config struct {
	// BaseURL of the API; loopback only.
	BaseURL string
	// MetricsURL is the /metrics of the stack's worker (its METRICS_ADDR, never the API's port),
	// where the run samples the availability projection's lag; loopback only. Empty: not sampled.
	MetricsURL string
	// JWTSecret is the server's AUTH_JWT_SECRET: the generator mints its shoppers' and sellers'
	// tokens with it, as `checkout token` does, unless Tokens is set.
	JWTSecret string
	// Tokens, when set, is where the shoppers' and sellers' tokens come from: the identity
	// provider of a stack that takes no others (every stack but `checkout-dev dev`).
	Tokens Tokens
	// OpsToken is the token of the ops calls (a run's coupon and campaign), where the stack takes
	// ops only from its identity provider (`make cluster`); empty: minted with JWTSecret.
	OpsToken string

	// Shoppers is the concurrency: each shopper places one order after another.
	Shoppers int
	// Duration and Orders bound the run: no order starts after Duration, nor beyond Orders
	// (0: no count bound), nor once Stop (when set) is closed.
	Duration time.Duration
	Orders   int
	Stop     <-chan struct{}

	// The generator's own catalog: CatalogSize SKUs (codes LG-0001 …) of the Sellers, stocked with
	// Stock units in every warehouse, chosen by a Zipf law of exponent Zipf (> 1).
	CatalogSize int
	Zipf        float64
	Stock       int
	// HotSKUs are campaign SKUs (codes), stocked HotStock units in warehouse 1 only (one hot row
	// each), maxPerOrder 1; HotShare of the orders carry one of them.
	HotSKUs  []string
	HotShare float64
	HotStock int
	// CampaignHot, when above 0, is a campaign of that percentage off on the hot SKUs, started
	// through the ops API at setup and ended when the load phase ends.
	CampaignHot float64
	// CouponShare of the orders are previewed and placed with the run's coupon (made through the
	// ops API at setup: a percentage off with a cap, redemptions enough for every order).
	CouponShare float64
	// Lines is the mean number of lines per order (at least 1).
	Lines float64
	// Mix is the payment mix.
	Mix Mix
	// RepeatShare of the orders are sent again with the same Idempotency-Key (half at once, as a
	// double click, half after the answer, as a retry); the answers must match.
	RepeatShare float64
	// LowWater (a share of a SKU's stock) is when a preview's count shows a SKU low (the preview
	// gives counts only at or below the server's LOW_STOCK_THRESHOLD; its LOW_STOCK and
	// OUT_OF_STOCK hints count as low too); the seller's delivery of another stock's worth arrives
	// RestockLead later (an OUT_OF_STOCK answer orders one too).
	LowWater    float64
	RestockLead time.Duration

	// HoldTTL is the server's HOLD_TTL. WaitAbandoned waits, at the end, for the holds of the
	// abandoned orders to expire (and those orders to fail).
	HoldTTL       time.Duration
	WaitAbandoned bool
	// Settle bounds how long the end waits for the other orders to reach a final status.
	Settle time.Duration

	Sellers    []int64
	Warehouses []int32
	// UserBase is the first shopper id; every order is placed by a new shopper. Default: from the
	// clock, so that runs never share carts.
	UserBase int64
	// RunID prefixes the Idempotency-Keys; default from the clock.
	RunID string
	Seed  uint64

	// Progress, when set, shows the run's progress there on one line.
	Progress io.Writer

	// OrderURL, when set, is where orders are posted instead of BaseURL's /api/v1/orders (an
	// absolute URL on this machine), with the same headers and body: for benchmarks that put
	// another order path under the same shoppers (bench/benchcampaign, bench/benchcost). Everything else
	// still goes to BaseURL.
	OrderURL string
	// RetryFor, when above 0, makes every shopper (and the seller) a client that rides out a fault:
	// a request not answered at all, or answered 502, 503 or 504 other than BUSY or
	// PAYMENT_UNAVAILABLE, is sent again — an order with the same Idempotency-Key and body — after
	// the answer's Retry-After (or a back-off from 250 ms to 2 s), until it is answered otherwise or
	// RetryFor has passed since its first try. Every try is measured. 0: a request is sent once (an
	// order up to five times on a 503, as before).
	RetryFor time.Duration
	// Observe, when set, is told of every measured request as its answer (or failure) arrives: for
	// tools that set the answers on a timeline (internal/dev/chaos). It must be safe for concurrent use
	// and return quickly.
	Observe func(Observation)
	// KeepOrders lists every order placed in Report.Placed: its shopper and key, and each order
	// its answers named.
	KeepOrders bool
	// BrowseOnly makes every shopper stop after the preview: the visit (address, cart, preview)
	// without its order, counted in Report.Browsed. For benchmarks that set an order's cost
	// apart from what the shopper did before it.
	BrowseOnly bool

	// OnPhase, when set, is called with PhaseLoad as the shoppers start and PhaseSettle as the
	// load phase ends (before the end's wait), on the generator's goroutine: for tools that sample
	// the machine during the load phase only. It must return quickly.
	OnPhase func(phase string)
}

// Phases passed to Config.OnPhase.
const (
	PhaseLoad   = "load"
	PhaseSettle = "settle"
)

// Bounds of a run: the generator refuses anything larger.
const (
	MaxDuration = time.Hour
	MaxOrders   = 1_000_000
	MaxShoppers = 1000
	MaxCatalog  = 10_000
)

// Defaults returns the configuration of `make loadtest` (a 60-second campaign).
func Defaults() Config {
	return Config{
		BaseURL: "http://localhost:8080", Shoppers: 20, Duration: time.Minute,
		CatalogSize: 200, Zipf: 1.1, Stock: 500,
		HotSKUs: []string{"LG-HOT-1", "LG-HOT-2"}, HotShare: 0.3, HotStock: 60,
		Lines: 2.5, Mix: CampaignMix, RepeatShare: 0.05,
		LowWater: 0.1, RestockLead: 2 * time.Second,
		HoldTTL: 15 * time.Minute, Settle: time.Minute,
		Sellers: []int64{42, 43}, Warehouses: []int32{1, 2, 3},
	}
}

// withDefaults fills zero fields from Defaults.
func (c Config) withDefaults() Config {
	d := Defaults()
	c.BaseURL = cmp.Or(c.BaseURL, d.BaseURL)
	c.Shoppers = cmp.Or(c.Shoppers, d.Shoppers)
	c.Duration = cmp.Or(c.Duration, d.Duration)
	c.CatalogSize = cmp.Or(c.CatalogSize, d.CatalogSize)
	c.Zipf = cmp.Or(c.Zipf, d.Zipf)
	c.Stock = cmp.Or(c.Stock, d.Stock)
	c.HotStock = cmp.Or(c.HotStock, d.HotStock)
	c.Lines = cmp.Or(c.Lines, d.Lines)
	c.RestockLead = cmp.Or(c.RestockLead, d.RestockLead)
	c.LowWater = cmp.Or(c.LowWater, d.LowWater)
	c.HoldTTL = cmp.Or(c.HoldTTL, d.HoldTTL)
	c.Settle = cmp.Or(c.Settle, d.Settle)
	if c.HotSKUs == nil {
		c.HotSKUs = d.HotSKUs
	}
	if c.Mix == nil {
		c.Mix = d.Mix
	}
	if c.Sellers == nil {
		c.Sellers = d.Sellers
	}
	if c.Warehouses == nil {
		c.Warehouses = d.Warehouses
	}
	now := time.Now()
	if c.UserBase == 0 {
		c.UserBase = now.Unix() * 1_000_000
	}
	if c.RunID == "" {
		c.RunID = strconv.FormatInt(now.UnixMilli(), 36)
	}
	if c.Seed == 0 {
		c.Seed = uint64(now.UnixNano())
	}
	return c
}

// Validate refuses runs that are unbounded, nonsensical, or aimed anywhere but this machine.
func (c Config) Validate() error {
	var errs []error
	if err := CheckLoopback(c.BaseURL); err != nil {
		errs = append(errs, err)
	}
	if c.OrderURL != "" {
		if err := CheckLoopback(c.OrderURL); err != nil {
			errs = append(errs, fmt.Errorf("order URL: %w", err))
		}
	}
	if c.MetricsURL != "" {
		if err := CheckLoopback(c.MetricsURL); err != nil {
			errs = append(errs, fmt.Errorf("metrics URL: %w", err))
		}
	}
	if c.Tokens == nil && len(c.JWTSecret) < 16 {
		errs = append(errs, errors.New("the server's AUTH_JWT_SECRET (at least 16 characters) is needed to mint tokens"))
	}
	if c.Shoppers < 1 || c.Shoppers > MaxShoppers {
		errs = append(errs, fmt.Errorf("shoppers %d: between 1 and %d", c.Shoppers, MaxShoppers))
	}
	if c.Duration <= 0 || c.Duration > MaxDuration {
		errs = append(errs, fmt.Errorf("duration %s: above 0 and at most %s", c.Duration, MaxDuration))
	}
	if c.Orders < 0 || c.Orders > MaxOrders {
		errs = append(errs, fmt.Errorf("orders %d: between 0 (no count bound) and %d", c.Orders, MaxOrders))
	}
	if c.CatalogSize < 1 || c.CatalogSize > MaxCatalog {
		errs = append(errs, fmt.Errorf("catalog %d: between 1 and %d SKUs", c.CatalogSize, MaxCatalog))
	}
	if c.Zipf <= 1 {
		errs = append(errs, fmt.Errorf("zipf %g: must be above 1", c.Zipf))
	}
	if c.HotShare < 0 || c.HotShare > 1 || (c.HotShare > 0 && len(c.HotSKUs) == 0) {
		errs = append(errs, fmt.Errorf("hot share %g: between 0 and 1, with at least one hot SKU", c.HotShare))
	}
	if c.CampaignHot < 0 || c.CampaignHot >= 100 || (c.CampaignHot > 0 && len(c.HotSKUs) == 0) {
		errs = append(errs, fmt.Errorf("campaign on the hot SKUs %g%%: between 0 (none) and 100, with at least one hot SKU", c.CampaignHot))
	}
	if c.CouponShare < 0 || c.CouponShare > 1 {
		errs = append(errs, fmt.Errorf("coupon share %g: between 0 and 1", c.CouponShare))
	}
	if c.Stock < 1 || c.HotStock < 1 {
		errs = append(errs, errors.New("stock and hot stock: at least 1 unit"))
	}
	if c.Lines < 1 || c.Lines > 20 {
		errs = append(errs, fmt.Errorf("lines %g: a mean between 1 and 20", c.Lines))
	}
	if c.Mix.total() <= 0 {
		errs = append(errs, errors.New("mix: every share is zero"))
	}
	if c.RetryFor < 0 || c.RetryFor > MaxDuration {
		errs = append(errs, fmt.Errorf("retry for %s: between 0 (no retries) and %s", c.RetryFor, MaxDuration))
	}
	if c.RepeatShare < 0 || c.RepeatShare > 1 || c.LowWater <= 0 || c.LowWater >= 1 {
		errs = append(errs, errors.New("repeat share in [0, 1], low water in (0, 1)"))
	}
	if len(c.Sellers) == 0 || len(c.Warehouses) == 0 {
		errs = append(errs, errors.New("at least one seller and one warehouse"))
	}
	return errors.Join(errs...)
}

// CheckLoopback refuses every URL whose host is not this machine: a load generator must never be
// pointed at someone else's service by mistake.
func CheckLoopback(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("base URL %q: want http://host:port", raw)
	}
	host := u.Hostname()
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("refusing %q: the load generator only drives a stack on this machine (localhost, 127.0.0.0/8, ::1)", raw)
}

// DefaultCampaignHot is the campaign on the hot SKUs (percent off) that --campaign-hot=true starts.
const DefaultCampaignHot = 20.0

// ParseCampaignHot reads --campaign-hot: a bool (true: DefaultCampaignHot percent off), or a
// percentage such as "15" or "15%" (0: none).
func ParseCampaignHot(s string) (float64, error) {
	s = strings.TrimSpace(s)
	if b, err := strconv.ParseBool(s); err == nil {
		if b {
			return DefaultCampaignHot, nil
		}
		return 0, nil
	}
	f, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
	if err != nil || f < 0 || f >= 100 {
		return 0, fmt.Errorf("campaign on the hot SKUs %q: true, false, or a percentage off below 100", s)
	}
	return f, nil
}

// hotCodes returns the hot SKU codes sorted, without duplicates.
func hotCodes(codes []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, c := range codes {
		c = strings.TrimSpace(c)
		if c != "" && !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	sort.Strings(out)
	return out
}
