package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Job labels: the ids of the jobs' Temporal Schedules (workflows.Schedule*).
const (
	jobSweeper           = "reservation-sweeper"
	jobReconciler        = "inventory-reconciler"
	jobCartJanitor       = "cart-janitor"
	jobPaymentReconciler = "payment-reconciler"
)

// JobMetrics are the scheduled jobs' figures, updated by their activities in the worker. It is an
// activities.JobObserver and a cart.Observer.
type JobMetrics struct {
	Runs        *prometheus.CounterVec
	LastSuccess *prometheus.GaugeVec

	SweeperReleased  prometheus.Counter
	SweeperOldestAge prometheus.Gauge
	ReconcilerDrift  prometheus.Counter
	CartsDeleted     prometheus.Counter
	CartEvents       prometheus.Counter
	PaymentsChecked  prometheus.Counter
	PaymentsResolved *prometheus.CounterVec
	// LineCancels counts the line cancellations the payment reconciler finished for a workflow
	// that was gone (result "finished"), and those it could not finish yet ("failed").
	LineCancels *prometheus.CounterVec
}

func newJobMetrics(reg prometheus.Registerer) *JobMetrics {
	j := &JobMetrics{
		Runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "checkout_job_runs_total",
			Help: "Attempts of the scheduled jobs' activities, by job and result (ok, error).",
		}, []string{"job", "result"}),
		LastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "checkout_job_last_success_timestamp_seconds",
			Help: "Unix time of each scheduled job's last successful run.",
		}, []string{"job"}),
		SweeperReleased: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "checkout_sweeper_released_total",
			Help: "Expired reservations the reservation sweeper released.",
		}),
		SweeperOldestAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "checkout_sweeper_oldest_released_age_seconds",
			Help: "At the last sweep, how long past its expiry the oldest reservation it released had waited (0 when none).",
		}),
		ReconcilerDrift: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "checkout_reconciler_drift_total",
			Help: "Inventory rows whose reserved differed from their ACTIVE reservations, repaired by the reconciler.",
		}),
		CartsDeleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "checkout_cart_janitor_deleted_total",
			Help: "Idle carts the cart janitor deleted.",
		}),
		CartEvents: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "checkout_cart_janitor_abandoned_events_total",
			Help: "Abandoned-cart outbox events the cart janitor wrote.",
		}),
		PaymentsChecked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "checkout_payment_reconciler_checked_total",
			Help: "Payments with an unknown outcome the payment reconciler asked the provider about.",
		}),
		PaymentsResolved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "checkout_payment_reconciler_resolved_total",
			Help: "Payments the payment reconciler resolved, by the provider's status.",
		}, []string{"status"}),
		LineCancels: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "checkout_payment_reconciler_line_cancels_total",
			Help: "Recorded line cancellations whose workflow was gone, by result: finished by the payment reconciler (refunded, restocked, announced), or failed (tried again next run).",
		}, []string{"result"}),
	}
	reg.MustRegister(j.Runs, j.LastSuccess, j.SweeperReleased, j.SweeperOldestAge, j.ReconcilerDrift,
		j.CartsDeleted, j.CartEvents, j.PaymentsChecked, j.PaymentsResolved, j.LineCancels)
	for _, result := range []string{"finished", "failed"} {
		j.LineCancels.WithLabelValues(result)
	}
	return j
}

func (j *JobMetrics) run(job string, err error) {
	if err != nil {
		j.Runs.WithLabelValues(job, "error").Inc()
		return
	}
	j.Runs.WithLabelValues(job, "ok").Inc()
	j.LastSuccess.WithLabelValues(job).SetToCurrentTime()
}

// SweepDone counts a sweep; what a failed sweep released before it failed is counted too.
func (j *JobMetrics) SweepDone(released int, oldestAge time.Duration, err error) {
	j.run(jobSweeper, err)
	j.SweeperReleased.Add(float64(released))
	if err == nil {
		j.SweeperOldestAge.Set(oldestAge.Seconds())
	}
}

// ReconcileDone counts an inventory reconciliation.
func (j *JobMetrics) ReconcileDone(drifts int, err error) {
	j.run(jobReconciler, err)
	j.ReconcilerDrift.Add(float64(drifts))
}

// PaymentReconcileDone counts a payment reconciliation.
func (j *JobMetrics) PaymentReconcileDone(checked int, resolved map[string]int, err error) {
	j.run(jobPaymentReconciler, err)
	j.PaymentsChecked.Add(float64(checked))
	for status, n := range resolved {
		j.PaymentsResolved.WithLabelValues(status).Add(float64(n))
	}
}

// LineCancelsFinished counts the line cancellations a payment reconciliation finished for a
// workflow that was gone, and those it could not finish.
func (j *JobMetrics) LineCancelsFinished(finished, failed int) {
	j.LineCancels.WithLabelValues("finished").Add(float64(finished))
	j.LineCancels.WithLabelValues("failed").Add(float64(failed))
}

// CartsCleaned counts a cart clean-up.
func (j *JobMetrics) CartsCleaned(deleted, events int, err error) {
	j.run(jobCartJanitor, err)
	j.CartsDeleted.Add(float64(deleted))
	j.CartEvents.Add(float64(events))
}
