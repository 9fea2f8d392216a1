package api

import (
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/marketplace/checkout/internal/problem"
)

// Admission control of POST /orders. Past the knee, every order let in makes every other one
// slower: Temporal and PostgreSQL place the same number a second however many wait, so a shopper
// would wait up to placeTimeout for an answer that may be "try again". Instead, a new order is
// answered 503 BUSY with Retry-After at once, before its body is read, anything is written or any
// workflow is started (nothing is recorded under its Idempotency-Key, so the same request is
// placed when it comes back), when
//
//   - this process is placing ORDERS_MAX_IN_FLIGHT orders already, or
//   - the latency signal is above ORDERS_ADMIT_MAX_LATENCY and this process already has as many
//     orders in flight as it answers in that time: its recent orders answered per second times the
//     limit, at least one. Queueing more would only make each wait longer (Little's law); so the
//     round trip settles at the limit instead of growing, and the throughput stays what Temporal
//     and PostgreSQL give.
//
// The latency signal is the 90th percentile of the round trips (Update-with-Start to the answer)
// that ended in the last admitWindow; with none, the age of the oldest order still in flight. It
// cannot stay stuck high once orders stop being let in: round trips age out of the window, and at
// least one order at a time is still let in as a probe, whose round trip is a fresh sample; one
// that hangs counts as slow as its age. When Temporal answers promptly again, the probes bring the
// signal down and the answered rate, with it the orders let in, back up.

const (
	// admitWindow is how far back the latency signal and the answered rate look.
	admitWindow = 10 * time.Second
	// admitQuantile is the share of recent round trips at or below the signal.
	admitQuantile = 0.9
	// admitSamples bounds the round trips kept (the newest win).
	admitSamples = 4096
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
	maxInFlight int           // 0: no bound
	maxLatency  time.Duration // 0: not watched
	now         func() time.Time

	mu      sync.Mutex
	started map[uint64]time.Time // the orders in flight, by ticket
	nextID  uint64
	samples [admitSamples]sample
	next    int
	held    int
	// The signal and the answered rate as last computed, at computedAt.
	signal     time.Duration
	rate       float64
	computedAt time.Time
	scratch    []time.Duration
}

// sample is one round trip: when it ended, how long it took, whether it got an answer.
type sample struct {
	at       time.Time
	d        time.Duration
	answered bool
}

func newAdmission(maxInFlight int, maxLatency time.Duration, now func() time.Time) *admission {
	return &admission{maxInFlight: maxInFlight, maxLatency: maxLatency, now: now, started: map[uint64]time.Time{}}
}

// ticket is an order let in; done gives its place back.
type ticket struct{ id uint64 }

// enter lets an order in, or answers the reason it is refused and how long the client should
// wait.
func (a *admission) enter() (t ticket, reason string, wait time.Duration) {
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	n := len(a.started)
	if a.maxInFlight > 0 && n >= a.maxInFlight {
		return t, busyInFlight, busyRetryAfter
	}
	if a.maxLatency > 0 {
		sig, rate := a.computeLocked(now)
		if sig > a.maxLatency && float64(n) >= max(1, rate*a.maxLatency.Seconds()) {
			return t, busyLatency, min(max(sig, busyRetryAfter), busyRetryAfterMax)
		}
	}
	a.nextID++
	a.started[a.nextID] = now
	return ticket{id: a.nextID}, "", 0
}

// done gives an order's place back.
func (a *admission) done(t ticket) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.started, t.id)
}

// observe records the round trip of one order placed; answered is false when it got no answer
// (Temporal did not answer in time).
func (a *admission) observe(d time.Duration, answered bool) {
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.samples[a.next] = sample{at: now, d: d, answered: answered}
	a.next = (a.next + 1) % admitSamples
	a.held = min(a.held+1, admitSamples)
}

// figures are the orders in flight now and the latency signal, for the metrics.
func (a *admission) figures() (int64, time.Duration) {
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	sig, _ := a.computeLocked(now)
	return int64(len(a.started)), sig
}

// computeLocked answers the latency signal and the rate of orders answered per second, computed
// afresh at most every admitRecompute.
func (a *admission) computeLocked(now time.Time) (time.Duration, float64) {
	if !a.computedAt.IsZero() && !now.Before(a.computedAt) && now.Sub(a.computedAt) < admitRecompute {
		return a.signal, a.rate
	}
	a.scratch = a.scratch[:0]
	answered, oldest := 0, now
	for i := range a.held {
		s := a.samples[i]
		if now.Sub(s.at) >= admitWindow {
			continue
		}
		a.scratch = append(a.scratch, s.d)
		if s.answered {
			answered++
		}
		if s.at.Before(oldest) {
			oldest = s.at
		}
	}
	a.signal, a.rate = 0, 0
	if len(a.scratch) > 0 {
		slices.Sort(a.scratch)
		a.signal = a.scratch[int(admitQuantile*float64(len(a.scratch)-1)+0.5)]
		// Orders answered per second: over the window, or over the time since the first of its
		// round trips ended when that is shorter (the process has just started, or just woken up).
		a.rate = float64(answered) / max(now.Sub(oldest), time.Second).Seconds()
	} else {
		for _, at := range a.started {
			a.signal = max(a.signal, now.Sub(at))
		}
	}
	a.computedAt = now
	return a.signal, a.rate
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
	return problem.New(problem.Busy, "the checkout is busy and did nothing with this order; "+
		"send the same request again, with the same Idempotency-Key, in "+secs+" s")
}

// busyKey marks a request answered BUSY, which is not logged as a failure.
const busyKey = "busy"
