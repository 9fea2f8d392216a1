package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// WaitingOrders are the orders in one status the saga has not finished with.
type WaitingOrders struct {
	Status string
	Orders int64
	// Oldest is how long the order longest in this status has been in it.
	Oldest time.Duration
}

// OrderFigures are the orders waiting in the saga and the payments whose outcome is unknown.
type OrderFigures struct {
	// Waiting has one entry per open status (PENDING_PAYMENT, NEEDS_ATTENTION), zero or not.
	Waiting []WaitingOrders
	// PastHold is how far past its hold the most overdue order waiting for payment is (0 when
	// none): its hold child or the payment reconciler should have ended it.
	PastHold time.Duration
	// Escalated are the orders waiting for support past their escalation (PARKED_ESCALATE_AFTER):
	// given up at their deadline unless support acts.
	Escalated int64
	// UnknownPayments are the waiting orders' payments whose outcome is UNKNOWN, and
	// UnknownOldest how long ago the oldest of them was first sent to the provider.
	UnknownPayments int64
	UnknownOldest   time.Duration
}

// OrderGauges reads the order figures from the database at scrape time.
type OrderGauges interface {
	OrderFigures(ctx context.Context) (OrderFigures, error)
}

// RegisterOrderGauges adds the orders waiting in the saga, by status, and the unknown payments,
// read when Prometheus scrapes (bounded to two seconds).
func (m *Metrics) RegisterOrderGauges(src OrderGauges) {
	m.Registry.MustRegister(&orderCollector{src: src})
}

var (
	waitingDesc = prometheus.NewDesc("checkout_orders_waiting",
		"Orders the saga has not finished, by status: PENDING_PAYMENT (waiting for payment or a step), NEEDS_ATTENTION (waiting for support).",
		[]string{"status"}, nil)
	waitingOldestDesc = prometheus.NewDesc("checkout_orders_waiting_oldest_seconds",
		"How long the order longest in each open status has been in it (0 when none).", []string{"status"}, nil)
	escalatedDesc = prometheus.NewDesc("checkout_orders_escalated",
		"Orders waiting for support past their escalation (PARKED_ESCALATE_AFTER); each is given up at its deadline unless support acts.",
		nil, nil)
	pastHoldDesc = prometheus.NewDesc("checkout_orders_past_hold_seconds",
		"How far past its hold the most overdue PENDING_PAYMENT order is (0 when none).", nil, nil)
	unknownDesc = prometheus.NewDesc("checkout_payments_unknown",
		"Payments of orders still open whose outcome is UNKNOWN (a provider call timed out).", nil, nil)
	unknownOldestDesc = prometheus.NewDesc("checkout_payments_unknown_oldest_seconds",
		"How long ago the oldest of those payments was first sent to the provider (0 when none).", nil, nil)
	ordersErrDesc = prometheus.NewDesc("checkout_orders_scrape_error",
		"1 when the order and payment gauges could not be read at this scrape.", nil, nil)
)

type orderCollector struct{ src OrderGauges }

func (c *orderCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{waitingDesc, waitingOldestDesc, escalatedDesc, pastHoldDesc, unknownDesc,
		unknownOldestDesc, ordersErrDesc} {
		ch <- d
	}
}

func (c *orderCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	f, err := c.src.OrderFigures(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(ordersErrDesc, prometheus.GaugeValue, 1)
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, w := range f.Waiting {
		gauge(waitingDesc, float64(w.Orders), w.Status)
		gauge(waitingOldestDesc, w.Oldest.Seconds(), w.Status)
	}
	gauge(escalatedDesc, float64(f.Escalated))
	gauge(pastHoldDesc, f.PastHold.Seconds())
	gauge(unknownDesc, float64(f.UnknownPayments))
	gauge(unknownOldestDesc, f.UnknownOldest.Seconds())
	gauge(ordersErrDesc, 0)
}
