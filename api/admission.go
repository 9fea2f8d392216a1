package api

import (
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
)

// Admission control of POST /orders. Past the knee, every order let in makes every other one
// slower: Temporal and PostgreSQL serve the same number a second however many wait, so a shopper
// would wait up to placeTimeout for an answer that may be "try again". Instead, while this process
// is placing ORDERS_MAX_IN_FLIGHT orders, or while the recent round trip of placing one is above
// ORDERS_ADMIT_MAX_LATENCY, a new order is answered 503 BUSY with Retry-After at once, before its
// body is read, anything is written or any workflow is started: nothing is recorded under its
// Idempotency-Key, and the same request is placed when sent again.
//
// The latency signal is the 90th percentile of the round trips (Update-with-Start to the answer)
// that ended in the last admitWindow. It cannot stay stuck high once orders stop being let in:
// samples age out of the window, and while the signal is over the limit one order at a time is
// still let in as a probe, whose round trip is a fresh sample (a probe still waiting counts as at
// least as slow as it has been out). When Temporal answers promptly again, the probes bring the
// signal down and orders flow.

const (
	// admitWindow is how far back the latency signal looks.
	admitWindow = 10 * time.Second
	// admitQuantile is the share of recent round trips at or below the signal.
	admitQuantile = 0.9
	// admitSamples bounds the round trips kept (the newest win).
	admitSamples = 1024
	// admitRecompute is how long a computed signal is reused.
	admitRecompute = 50 * time.Millisecond
	// busyRetryAfter is the Retry-After of an order refused for the in-flight bound, and the least
	// of one refused for latency (which waits the signal's length, up to busyRetryAfterMax).
	busyRetryAfter    = time.Second
	busyRetryAfterMax = 10 * time.Second
)

// Reasons of a BUSY refusal: the reason label of checkout_orders_busy_total.
const (
	busyInFlight = "in_flight"
	busyLatency  = "latency"
)

// admission is one API process's admission control of POST /orders.
type admission struct {
	maxInFlight int64         // 0: no bound
	maxLatency  time.Duration // 0: not watched
	now         func() time.Time

	inFlight atomic.Int64
	// probeSince is when the probe now in flight was let in (unix nanoseconds; 0: none).
	probeSince atomic.Int64

	mu         sync.Mutex
	samples    [admitSamples]sample
	next, held int
	signal     time.Duration
	computedAt time.Time
	scratch    []time.Duration
}

type sample struct {
	at time.Time
	d  time.Duration
}

func newAdmission(maxInFlight int, maxLatency time.Duration, now func() time.Time) *admission {
	return &admission{maxInFlight: int64(maxInFlight), maxLatency: maxLatency, now: now}
}

// ticket is an order let in; done gives its place back.
type ticket struct{ probe bool }

// enter lets an order in, or answers the reason it is refused and how long the client should
// wait.
func (a *admission) enter() (t ticket, reason string, wait time.Duration) {
	n := a.inFlight.Add(1)
	if a.maxInFlight > 0 && n > a.maxInFlight {
		a.inFlight.Add(-1)
		return t, busyInFlight, busyRetryAfter
	}
	if a.maxLatency <= 0 {
		return t, "", 0
	}
	now := a.now()
	sig := a.latency(now)
	if sig <= a.maxLatency {
		return t, "", 0
	}
	if a.probeSince.CompareAndSwap(0, now.UnixNano()) {
		return ticket{probe: true}, "", 0
	}
	a.inFlight.Add(-1)
	return t, busyLatency, min(max(sig, busyRetryAfter), busyRetryAfterMax)
}

// done gives an order's place back.
func (a *admission) done(t ticket) {
	if t.probe {
		a.probeSince.Store(0)
	}
	a.inFlight.Add(-1)
}

// observe records the round trip of one order placed.
func (a *admission) observe(d time.Duration) {
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.samples[a.next] = sample{at: now, d: d}
	a.next = (a.next + 1) % admitSamples
	a.held = min(a.held+1, admitSamples)
}

// latency is the signal now: the admitQuantile of the round trips that ended within admitWindow
// (0 when none did), or the age of the probe in flight when that is longer.
func (a *admission) latency(now time.Time) time.Duration {
	sig := a.recent(now)
	if since := a.probeSince.Load(); since != 0 {
		sig = max(sig, now.Sub(time.Unix(0, since)))
	}
	return sig
}

func (a *admission) recent(now time.Time) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.computedAt.IsZero() && now.Sub(a.computedAt) < admitRecompute && !now.Before(a.computedAt) {
		return a.signal
	}
	a.scratch = a.scratch[:0]
	for i := range a.held {
		if s := a.samples[i]; now.Sub(s.at) < admitWindow {
			a.scratch = append(a.scratch, s.d)
		}
	}
	a.signal = 0
	if len(a.scratch) > 0 {
		slices.Sort(a.scratch)
		a.signal = a.scratch[int(admitQuantile*float64(len(a.scratch)-1)+0.5)]
	}
	a.computedAt = now
	return a.signal
}

// admitOrders is the middleware of POST /orders: admission control, before the body is read.
func (s *Server) admitOrders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		t, reason, wait := s.admission.enter()
		if reason != "" {
			return s.busy(c, reason, wait)
		}
		defer s.admission.done(t)
		return next(c)
	}
}

// busy is the answer to an order refused by admission control: 503 BUSY with Retry-After. The
// refusal is counted, and logged at debug only: under overload there are many, and they are the
// point.
func (s *Server) busy(c echo.Context, reason string, wait time.Duration) error {
	s.Metrics.OrdersBusy.WithLabelValues(reason).Inc()
	c.Set(busyKey, true)
	s.Log.LogAttrs(c.Request().Context(), slog.LevelDebug, "order refused: busy",
		slog.String("request_id", requestID(c)), slog.String("reason", reason))
	secs := setRetryAfter(c, wait)
	return NewError(http.StatusServiceUnavailable, CodeBusy, "the checkout is busy and did nothing with this order; "+
		"send the same request again, with the same Idempotency-Key, in "+secs+" s")
}

// busyKey marks a request answered BUSY, which is not logged as a failure.
const busyKey = "busy"
