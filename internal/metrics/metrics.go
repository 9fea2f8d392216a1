// Package metrics holds the product's Prometheus metrics, registered on one registry per process
// and served at /metrics on the process's internal listener (METRICS_ADDR), never on the API's.
package metrics

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the counters and histograms the code updates as it runs.
type Metrics struct {
	Registry *prometheus.Registry

	ReserveAttempts prometheus.Counter
	ReserveResults  *prometheus.CounterVec
	HTTPRequests    *prometheus.CounterVec
	HTTPDuration    *prometheus.HistogramVec

	// ReserveBatchSize is the number of orders in each combined reserve transaction;
	// ReserveBatchFailures counts those that failed as a whole.
	ReserveBatchSize     prometheus.Histogram
	ReserveBatchFailures prometheus.Counter
	// ConfirmBatchSize and ConfirmBatchFailures are the same for combined confirm transactions.
	ConfirmBatchSize     prometheus.Histogram
	ConfirmBatchFailures prometheus.Counter

	// RateLimited counts requests refused by a rate limit, by route group and by what was
	// limited (user or ip); OpenOrdersRefused orders refused by the open-order cap.
	RateLimited       *prometheus.CounterVec
	OpenOrdersRefused prometheus.Counter
	// OrdersBusy counts orders refused with 503 BUSY by admission control, by reason (in_flight,
	// latency).
	OrdersBusy *prometheus.CounterVec

	// SagaStepDuration times each step of the saga (an activity, local or regular) by step, kind
	// and result, with the step's trace as exemplar.
	SagaStepDuration *prometheus.HistogramVec
	// WorkflowHistoryEvents and WorkflowHistoryBytes are the length and size of workflow
	// histories, observed as each run handles a signal and as it ends, by workflow type.
	WorkflowHistoryEvents *prometheus.HistogramVec
	WorkflowHistoryBytes  *prometheus.HistogramVec

	AvailabilityEvents prometheus.Counter
	// AvailabilityEventLag is each stock event's lag from the change to the projection's commit.
	AvailabilityEventLag prometheus.Histogram
	OutboxPublished      *prometheus.CounterVec
	OutboxDead           *prometheus.CounterVec
	// OutboxBrokerFailures counts the relay's attempts the event broker did not acknowledge.
	OutboxBrokerFailures prometheus.Counter
	// WebhookAttempts counts sellers' webhook attempts by result; WebhookLatency times them.
	WebhookAttempts *prometheus.CounterVec
	WebhookLatency  prometheus.Histogram

	// Jobs are the scheduled jobs' figures.
	Jobs *JobMetrics
}

// Handler is the internal listener's: /metrics, the registry in the Prometheus text format; 404
// for anything else.
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	// OpenMetrics when the scraper asks for it: the latency histograms' exemplars (trace ids) are
	// carried only in that format.
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{EnableOpenMetrics: true}))
	return mux
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
		SagaStepDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "checkout_saga_step_duration_seconds",
			Help:    "Each run of a saga step (an activity) by step, kind (local, regular) and result (ok, error); exemplars link to the step's trace.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"step", "kind", "result"}),
		WorkflowHistoryEvents: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "checkout_workflow_history_events",
			Help:    "Events in a workflow run's history, observed as the run handles a signal and as it ends, by workflow type. Temporal warns past 10,240 events and fails the run at 51,200.",
			Buckets: []float64{25, 50, 100, 200, 500, 1000, 2500, 5000, 10240, 25000, 51200},
		}, []string{"workflow_type"}),
		WorkflowHistoryBytes: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "checkout_workflow_history_bytes",
			Help:    "Size of a workflow run's history in bytes, observed as the run handles a signal and as it ends, by workflow type. Temporal warns past 10 MiB and fails the run at 50 MiB.",
			Buckets: []float64{16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 10 << 20, 25 << 20, 50 << 20},
		}, []string{"workflow_type"}),
		RateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "checkout_rate_limited_total",
			Help: "API requests refused with 429 RATE_LIMITED, by route group and by the limit's key (user or ip).",
		}, []string{"group", "by"}),
		OpenOrdersRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "checkout_open_orders_refused_total",
			Help: "Orders refused with 429 TOO_MANY_OPEN_ORDERS: the shopper had ORDERS_MAX_OPEN_PER_SHOPPER orders waiting for payment.",
		}),
		OrdersBusy: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "checkout_orders_busy_total",
			Help: "Orders refused at once with 503 BUSY by admission control, by reason: in_flight (ORDERS_MAX_IN_FLIGHT reached), latency (the recent round trip above ORDERS_ADMIT_MAX_LATENCY, with as many orders in flight as are answered in that time).",
		}, []string{"reason"}),
		AvailabilityEventLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "checkout_availability_event_lag_seconds",
			Help:    "From a change of sellable stock (its transaction) to the availability projection showing it (the projector's commit): outbox, relay, broker and consumer.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}),
		AvailabilityEvents: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "checkout_availability_events_applied_total",
			Help: "stock.changed events the availability projector applied to the projection.",
		}),
		OutboxPublished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "checkout_outbox_published_total",
			Help: "Outbox events the relay published to the event broker (acknowledged), by event type.",
		}, []string{"type"}),
		OutboxDead: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "checkout_outbox_dead_total",
			Help: "Outbox events set aside because their handler kept failing, by event type.",
		}, []string{"type"}),
		WebhookAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "checkout_webhook_attempts_total",
			Help: "Attempts at sellers' webhook deliveries, by result: delivered (2xx), failed (retried later), given_up (failing for WEBHOOK_RETRY_FOR: the endpoint was disabled).",
		}, []string{"result"}),
		WebhookLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "checkout_webhook_attempt_seconds",
			Help:    "How long sellers' endpoints took to answer a webhook attempt (or to fail it).",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
		OutboxBrokerFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "checkout_outbox_broker_failures_total",
			Help: "Publishes of the outbox relay the event broker did not acknowledge (down, unreachable, no stream); the relay stops and tries again.",
		}),
	}
	m.ReserveBatchSize, m.ReserveBatchFailures = combinerMetrics("reserve")
	m.ConfirmBatchSize, m.ConfirmBatchFailures = combinerMetrics("confirm")
	reg.MustRegister(m.ReserveAttempts, m.ReserveResults, m.ReserveBatchSize, m.ReserveBatchFailures,
		m.ConfirmBatchSize, m.ConfirmBatchFailures, m.HTTPRequests, m.HTTPDuration,
		m.SagaStepDuration, m.WorkflowHistoryEvents, m.WorkflowHistoryBytes,
		m.RateLimited, m.OpenOrdersRefused, m.OrdersBusy, m.AvailabilityEvents, m.AvailabilityEventLag,
		m.OutboxPublished, m.OutboxDead, m.OutboxBrokerFailures, m.WebhookAttempts, m.WebhookLatency,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.Jobs = newJobMetrics(reg)
	return m
}

// combinerMetrics are one inventory combiner's (reserve or confirm, switched on by
// <NAME>_COMBINING): the orders in each combined transaction, and the combined transactions that
// failed as a whole.
func combinerMetrics(name string) (size prometheus.Histogram, failures prometheus.Counter) {
	size = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "checkout_" + name + "_batch_size",
		Help: "Orders per combined " + name + " transaction (" + strings.ToUpper(name) +
			"_COMBINING): 1 at low load, larger on a hot SKU.",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256},
	})
	failures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "checkout_" + name + "_batch_failures_total",
		Help: "Combined " + name + " transactions that failed as a whole (a row held past the lock timeout, a deadlock, " +
			"a lost connection); their orders went again each on its own.",
	})
	return size, failures
}

// ReserveResult counts one reservation attempt and its result; it makes *Metrics an
// inventory.Observer.
func (m *Metrics) ReserveResult(result string) {
	m.ReserveAttempts.Inc()
	m.ReserveResults.WithLabelValues(result).Inc()
}

// ReserveBatch records the size of one combined reserve transaction; it makes *Metrics an
// inventory.BatchObserver.
func (m *Metrics) ReserveBatch(orders int) { m.ReserveBatchSize.Observe(float64(orders)) }

// ReserveBatchFailed counts a combined reserve transaction that failed as a whole; it makes
// *Metrics an inventory.BatchFailureObserver.
func (m *Metrics) ReserveBatchFailed(int, error) { m.ReserveBatchFailures.Inc() }

// ConfirmBatch records the size of one combined confirm transaction; it makes *Metrics an
// inventory.ConfirmBatchObserver.
func (m *Metrics) ConfirmBatch(orders int) { m.ConfirmBatchSize.Observe(float64(orders)) }

// ConfirmBatchFailed counts a combined confirm transaction that failed as a whole; it makes
// *Metrics an inventory.ConfirmBatchFailureObserver.
func (m *Metrics) ConfirmBatchFailed(int, error) { m.ConfirmBatchFailures.Inc() }

// RegisterAdmission exports the API process's admission control of POST /orders, read through
// read at each scrape: the orders being placed now, and the latency signal it admits by.
func (m *Metrics) RegisterAdmission(read func() (inFlight int64, latency time.Duration)) {
	m.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "checkout_orders_in_flight",
			Help: "Orders this API process is placing now (POST /orders let in and not yet answered); ORDERS_MAX_IN_FLIGHT bounds it."},
			func() float64 { n, _ := read(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "checkout_orders_admit_latency_seconds",
			Help: "The 90th percentile of this API process's order round trips (Update-with-Start to the answer) of the last 10 s (with none, the age of the oldest order in flight); above ORDERS_ADMIT_MAX_LATENCY the process lets in only as many orders as it answers in that time."},
			func() float64 { _, l := read(); return l.Seconds() }))
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

// AvailabilityApplied counts events the availability projector applied; with AvailabilityLag it
// makes *Metrics an availability.Observer.
func (m *Metrics) AvailabilityApplied(events, _ int) { m.AvailabilityEvents.Add(float64(events)) }

// WebhookAttempt counts one webhook attempt; it makes *Metrics a webhooks.Observer.
func (m *Metrics) WebhookAttempt(result string, latency time.Duration) {
	m.WebhookAttempts.WithLabelValues(result).Inc()
	m.WebhookLatency.Observe(latency.Seconds())
}

// AvailabilityLag observes one event's lag from its change to the projection.
func (m *Metrics) AvailabilityLag(d time.Duration) { m.AvailabilityEventLag.Observe(d.Seconds()) }

// Backlog is what waits to be handled, read from the database at scrape time: how many, and how
// long the oldest has waited (0 when none).
type Backlog interface {
	Backlog(ctx context.Context) (pending int64, oldest time.Duration, err error)
}

// RegisterAvailabilityGauges adds the projector's lag: stock events on the broker not yet applied
// and the age of the oldest, read when Prometheus scrapes, so a stopped projector shows as growing
// lag.
func (m *Metrics) RegisterAvailabilityGauges(src Backlog) {
	m.Registry.MustRegister(&backlogCollector{read: src.Backlog, count: availPendingDesc, age: availLagDesc,
		failed: availErrDesc})
}

// RegisterOutboxGauges adds the outbox relay's backlog: events not yet published (nor set aside)
// and the age of the oldest, so a stopped or stuck relay shows as growing lag.
func (m *Metrics) RegisterOutboxGauges(src Backlog) {
	m.Registry.MustRegister(&backlogCollector{read: src.Backlog, count: outboxPendingDesc, age: outboxLagDesc,
		failed: outboxErrDesc})
}

var (
	availPendingDesc = prometheus.NewDesc("checkout_availability_pending_changes",
		"stock.changed events on the broker not yet applied to the availability projection.", nil, nil)
	availLagDesc = prometheus.NewDesc("checkout_availability_lag_seconds",
		"Age of the oldest stock.changed event on the broker not yet applied to the availability projection (0 when none).", nil, nil)
	availErrDesc = prometheus.NewDesc("checkout_availability_scrape_error",
		"1 when the availability projector's lag could not be read at this scrape (the broker).", nil, nil)
	outboxPendingDesc = prometheus.NewDesc("checkout_outbox_pending_events",
		"Outbox events neither published nor set aside yet.", nil, nil)
	outboxLagDesc = prometheus.NewDesc("checkout_outbox_lag_seconds",
		"Age of the oldest outbox event not yet published (0 when none).", nil, nil)
	outboxErrDesc = prometheus.NewDesc("checkout_outbox_scrape_error",
		"1 when the outbox backlog could not be read at this scrape.", nil, nil)
)

// backlogCollector exports a Backlog as a count, the age of the oldest, and whether it was read.
type backlogCollector struct {
	read               func(ctx context.Context) (int64, time.Duration, error)
	count, age, failed *prometheus.Desc
}

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.count
	ch <- c.age
	ch <- c.failed
}

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	pending, lag, err := c.read(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.failed, prometheus.GaugeValue, 1)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.count, prometheus.GaugeValue, float64(pending))
	ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, lag.Seconds())
	ch <- prometheus.MustNewConstMetric(c.failed, prometheus.GaugeValue, 0)
}

// RegisterRetiredBuildRuns adds checkout_runs_of_retired_build{build}: the open runs of each build
// whose code is gone, as the worker last counted them, and checkout_retired_builds_check_error.
// Any above zero is an incident: no worker can run them.
func (m *Metrics) RegisterRetiredBuildRuns() (runs *prometheus.GaugeVec, checkError prometheus.Gauge) {
	runs = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "checkout_runs_of_retired_build",
		Help: "Open workflow runs of a retired build (one whose code is gone), as the worker last counted them: any is an incident.",
	}, []string{"build"})
	checkError = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "checkout_retired_builds_check_error",
		Help: "1 when the worker's last count of the retired builds' open runs failed.",
	})
	m.Registry.MustRegister(runs, checkError)
	return runs, checkError
}
