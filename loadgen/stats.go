package loadgen

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/marketplace/checkout/internal/problem"
)

// EndpointOrder names POST /orders in Report.Endpoints (also when Config.OrderURL sends the
// orders elsewhere).
const EndpointOrder = "POST /api/v1/orders"

// EndpointOrderBusy names the orders refused 503 BUSY by admission control in Report.Endpoints:
// apart, so that EndpointOrder's latency is that of the orders let in.
const EndpointOrderBusy = "POST /api/v1/orders (refused BUSY)"

// EndpointOrderShopper names, in Report.Endpoints, each order as its shopper waited for it: from
// the first try of POST /api/v1/orders to the last answer, every try, every wait a BUSY answer
// asked for, and the orders given up after it included. It counts orders, not requests.
const EndpointOrderShopper = "POST /api/v1/orders as the shopper waited (every try and wait)"

// EndpointOrderPaidWith names, in Report.Endpoints, the orders paid with one payment token as their
// shoppers waited for them (as EndpointOrderShopper): POST /orders' own path differs by the
// payment, a 3-D Secure order answered once the provider asks for the challenge, a timed-out
// authorization once the provider has been asked again.
func EndpointOrderPaidWith(token string) string { return EndpointOrderShopper + ", paid with " + token }

// EndpointOrderRepeat names the same order sent again with its key (Config.RepeatShare).
const EndpointOrderRepeat = "POST /api/v1/orders (same key again)"

// EndpointThreeDS names the answer on the provider's 3-D Secure page: an HTML page, whose error
// answers carry no code.
const EndpointThreeDS = "POST /paysim/3ds/{intentId}"

// codeBusy is the API's answer to an order refused by admission control.
const codeBusy = string(problem.Busy)

// Endpoints, by the route as the API names it.
const (
	epAddress  = "POST /api/v1/addresses"
	epCartGet  = "GET /api/v1/cart"
	epCartPut  = "PUT /api/v1/cart/items/{skuId}"
	epPreview  = "POST /api/v1/checkout/preview"
	epOrder    = EndpointOrder
	epRepeat   = EndpointOrderRepeat
	epThreeDS  = EndpointThreeDS
	epCancel   = "POST /api/v1/orders/{orderId}/cancel"
	epGetOrder = "GET /api/v1/orders/{orderId}"
	epStocks   = "PUT /seller-api/v1/stocks"
)

// endpointOrder is the order of the endpoint table: a shopper's path, then the seller's.
var endpointOrder = []string{epAddress, epCartGet, epCartPut, epPreview, epOrder, epRepeat, EndpointOrderBusy,
	EndpointOrderShopper, epThreeDS, epCancel, epGetOrder, epStocks}

// recorder collects every request of the load phase: latency per endpoint, answers by code.
type recorder struct {
	mu       sync.Mutex
	lat      map[string][]float64 // milliseconds
	errs     map[errKey]int64
	requests int64
}

type errKey struct {
	endpoint string
	status   int
	code     string
}

func newRecorder() *recorder {
	return &recorder{lat: map[string][]float64{}, errs: map[errKey]int64{}}
}

// observe records one request. status 0 with code set is a transport failure. An order refused
// BUSY is recorded apart from the orders let in.
func (r *recorder) observe(endpoint string, status int, code string, d time.Duration) {
	if (endpoint == epOrder || endpoint == epRepeat) && code == codeBusy {
		endpoint = EndpointOrderBusy
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	r.lat[endpoint] = append(r.lat[endpoint], float64(d.Microseconds())/1000)
	if status == 0 || status >= 400 {
		r.errs[errKey{endpoint, status, code}]++
	}
}

// wait records how long a shopper waited for something made of several requests (each already
// observed): its latency only, counted neither as a request nor as an error.
func (r *recorder) wait(endpoint string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lat[endpoint] = append(r.lat[endpoint], float64(d.Microseconds())/1000)
}

func (r *recorder) total() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests
}

// EndpointStats are one endpoint's figures over the load phase.
type EndpointStats struct {
	Endpoint  string  `json:"endpoint"`
	Requests  int64   `json:"requests"`
	PerSecond float64 `json:"perSecond"`
	P50Ms     float64 `json:"p50Ms"`
	P95Ms     float64 `json:"p95Ms"`
	P99Ms     float64 `json:"p99Ms"`
	MaxMs     float64 `json:"maxMs"`
}

// ErrorCount is how often an endpoint answered an error code (status 0: no answer at all).
type ErrorCount struct {
	Endpoint string `json:"endpoint"`
	Status   int    `json:"status"`
	Code     string `json:"code"`
	Count    int64  `json:"count"`
	// Expected marks answers that are the point of a scenario (a declined card's 402) or a
	// realistic outcome (OUT_OF_STOCK on a hot SKU), not a fault.
	Expected bool `json:"expected"`
}

func (r *recorder) endpoints(seconds float64) []EndpointStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []EndpointStats
	var more []string
	for name := range r.lat {
		if !slices.Contains(endpointOrder, name) {
			more = append(more, name)
		}
	}
	sort.Strings(more)
	names := append(slices.Clone(endpointOrder), more...)
	for _, name := range names {
		lat := r.lat[name]
		if len(lat) == 0 {
			continue
		}
		sort.Float64s(lat)
		out = append(out, EndpointStats{Endpoint: name, Requests: int64(len(lat)), PerSecond: rate(int64(len(lat)), seconds),
			P50Ms: percentile(lat, 0.50), P95Ms: percentile(lat, 0.95), P99Ms: percentile(lat, 0.99), MaxMs: lat[len(lat)-1]})
	}
	return out
}

func (r *recorder) errors() []ErrorCount {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []ErrorCount
	for k, n := range r.errs {
		out = append(out, ErrorCount{Endpoint: k.endpoint, Status: k.status, Code: k.code, Count: n,
			Expected: expectedError(k)})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return fmt.Sprint(out[i]) < fmt.Sprint(out[j])
	})
	return out
}

func expectedError(k errKey) bool {
	switch {
	case k.endpoint == EndpointOrderBusy:
		return true // the checkout shedding load, as it should past its knee
	case k.endpoint == epOrder || k.endpoint == epRepeat:
		return k.code == string(problem.OutOfStock) || k.code == string(problem.PaymentDeclined) || isCouponRefusal(k.code)
	case k.endpoint == epCancel:
		return k.code == "ORDER_NOT_CANCELLABLE"
	}
	return false
}

// percentile of sorted values, nearest rank.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func rate(n int64, seconds float64) float64 {
	if seconds <= 0 {
		return 0
	}
	return float64(n) / seconds
}

// tally counts by key, safe for concurrent use.
type tally struct {
	mu sync.Mutex
	n  map[string]int64
}

func (t *tally) add(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == nil {
		t.n = map[string]int64{}
	}
	t.n[key]++
}

func (t *tally) counts(seconds float64) []Count {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Count, 0, len(t.n))
	for k, n := range t.n {
		out = append(out, Count{Outcome: k, Orders: n, PerSecond: rate(n, seconds)})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Orders != out[j].Orders {
			return out[i].Orders > out[j].Orders
		}
		return out[i].Outcome < out[j].Outcome
	})
	return out
}

// Count is how many orders ended one way, and at what rate over the load phase.
type Count struct {
	Outcome   string  `json:"outcome"`
	Orders    int64   `json:"orders"`
	PerSecond float64 `json:"perSecond"`
}

func ms(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
