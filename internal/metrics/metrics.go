// Package metrics holds the product's Prometheus metrics, registered on one registry per process
// and served at /metrics.
package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are the counters and histograms the code updates as it runs.
type Metrics struct {
	Registry *prometheus.Registry

	ReserveAttempts prometheus.Counter
	ReserveResults  *prometheus.CounterVec
	HTTPRequests    *prometheus.CounterVec
	HTTPDuration    *prometheus.HistogramVec
}

// New registers the product's metrics, with the Go and process collectors, on a new registry.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		ReserveAttempts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "checkout_reservation_attempts_total",
			Help: "Reservation attempts for an order (all lines at once).",
		}),
		ReserveResults: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "checkout_reservation_results_total",
			Help: "Reservation outcomes by result: reserved, out_of_stock, contention, invalid, error.",
		}, []string{"result"}),
		HTTPRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "checkout_http_requests_total",
			Help: "HTTP requests by route, method and status.",
		}, []string{"route", "method", "status"}),
		HTTPDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "checkout_http_request_duration_seconds",
			Help:    "HTTP request latency by route and method.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"route", "method"}),
	}
	reg.MustRegister(m.ReserveAttempts, m.ReserveResults, m.HTTPRequests, m.HTTPDuration,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// ReserveResult counts one reservation attempt and its result; it makes *Metrics an
// inventory.Observer.
func (m *Metrics) ReserveResult(result string) {
	m.ReserveAttempts.Inc()
	m.ReserveResults.WithLabelValues(result).Inc()
}

// InventoryGauges reads the state gauges from the database at scrape time.
type InventoryGauges interface {
	ActiveReservations(ctx context.Context) (int64, error)
	Lag(ctx context.Context) (expired int64, oldest time.Duration, err error)
}

// RegisterInventoryGauges adds active reservations and the sweeper's lag, read from the database
// when Prometheus scrapes (bounded to two seconds).
func (m *Metrics) RegisterInventoryGauges(src InventoryGauges) {
	m.Registry.MustRegister(&inventoryCollector{src: src})
}

var (
	activeDesc = prometheus.NewDesc("checkout_active_reservations",
		"Reservations currently ACTIVE (holding stock).", nil, nil)
	expiredDesc = prometheus.NewDesc("checkout_expired_active_reservations",
		"Reservations past their expiry and still ACTIVE: the sweeper's backlog.", nil, nil)
	lagDesc = prometheus.NewDesc("checkout_sweeper_lag_seconds",
		"How long the oldest expired, still ACTIVE reservation has waited for release.", nil, nil)
	scrapeErrDesc = prometheus.NewDesc("checkout_inventory_scrape_error",
		"1 when the inventory gauges could not be read at this scrape.", nil, nil)
)

type inventoryCollector struct{ src InventoryGauges }

func (c *inventoryCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- activeDesc
	ch <- expiredDesc
	ch <- lagDesc
	ch <- scrapeErrDesc
}

func (c *inventoryCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	failed := 0.0
	if n, err := c.src.ActiveReservations(ctx); err == nil {
		ch <- prometheus.MustNewConstMetric(activeDesc, prometheus.GaugeValue, float64(n))
	} else {
		failed = 1
	}
	if expired, lag, err := c.src.Lag(ctx); err == nil {
		ch <- prometheus.MustNewConstMetric(expiredDesc, prometheus.GaugeValue, float64(expired))
		ch <- prometheus.MustNewConstMetric(lagDesc, prometheus.GaugeValue, lag.Seconds())
	} else {
		failed = 1
	}
	ch <- prometheus.MustNewConstMetric(scrapeErrDesc, prometheus.GaugeValue, failed)
}
