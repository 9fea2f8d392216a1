package api

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// clock is a hand-moved clock for the admission control's signal.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock                   { return &clock{t: time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)} }

// observed is an admission control with a limit of 1 s that has seen n round trips of d.
func observed(n int, d time.Duration, answered bool) (*clock, *admission) {
	c := newClock()
	a := newAdmission(0, time.Second, c.now)
	for range n {
		a.observe(d, answered)
	}
	c.advance(admitRecompute)
	return c, a
}

// fill lets orders in until one is refused, and answers those let in and the refusal.
func fill(t *testing.T, a *admission) (in []ticket, reason string, wait time.Duration) {
	for {
		require.Less(t, len(in), 10_000, "nothing refused")
		tk, reason, wait := a.enter()
		if reason != "" {
			return in, reason, wait
		}
		in = append(in, tk)
	}
}

func doneAll(a *admission, ts []ticket) {
	for _, t := range ts {
		a.done(t)
	}
}

func TestAdmission_InFlightBound_RefusesTheNextAndLetsInOnceOneIsDone(t *testing.T) {
	a := newAdmission(2, 0, newClock().now)
	in, reason, wait := fill(t, a)
	require.Len(t, in, 2)
	assert.Equal(t, busyInFlight, reason)
	assert.Equal(t, busyRetryAfter, wait)
	n, _ := a.figures()
	assert.EqualValues(t, 2, n, "a refusal holds no place")

	a.done(in[0])
	_, reason, _ = a.enter()
	assert.Empty(t, reason, "a place given back lets the next one in")
}

// TestAdmission_SlowRoundTrips_InFlightHeldToWhatIsAnsweredInTheLimit: round trips of 3 s, 20
// answered in the last second, a limit of 1 s: 20 orders may be in flight (20 a second × 1 s), the
// next is refused, told to come back in about the time an order takes now.
func TestAdmission_SlowRoundTrips_InFlightHeldToWhatIsAnsweredInTheLimit(t *testing.T) {
	_, a := observed(20, 3*time.Second, true)
	_, sig := a.figures()
	assert.Equal(t, 3*time.Second, sig)
	in, reason, wait := fill(t, a)
	assert.Len(t, in, 20)
	assert.Equal(t, busyLatency, reason)
	assert.Equal(t, 3*time.Second, wait)
}

// TestAdmission_LatencySignal_DecaysOnceNothingIsLetIn: with no order in flight and none let in,
// the slow round trips age out of the window and the signal does not stay stuck.
func TestAdmission_LatencySignal_DecaysOnceNothingIsLetIn(t *testing.T) {
	c, a := observed(20, 3*time.Second, true)
	in, reason, _ := fill(t, a)
	require.Equal(t, busyLatency, reason)
	doneAll(a, in) // their shoppers went away: no sample

	c.advance(admitWindow)
	_, sig := a.figures()
	assert.Zero(t, sig, "the slow round trips aged out")
	for range 100 {
		_, reason, _ = a.enter()
		require.Empty(t, reason, "orders are let in again")
	}
}

// TestAdmission_TemporalStalled_OneProbeAtATimeUntilPromptAgain: no order answered (every round
// trip ran out of time): one order at a time is let in as a probe, a second is refused. Once the
// probes are answered promptly, the signal comes under the limit and orders flow.
func TestAdmission_TemporalStalled_OneProbeAtATimeUntilPromptAgain(t *testing.T) {
	c, a := observed(5, 30*time.Second, false)
	in, reason, _ := fill(t, a)
	require.Len(t, in, 1, "the probe")
	assert.Equal(t, busyLatency, reason)
	doneAll(a, in)

	for i := 0; ; i++ {
		require.Less(t, i, 100, "the probes never brought the signal down")
		if _, sig := a.figures(); sig <= time.Second {
			break
		}
		p, reason, _ := a.enter()
		require.Empty(t, reason, "with nothing in flight, the next order is a probe")
		c.advance(admitRecompute)
		a.observe(100*time.Millisecond, true)
		a.done(p)
		c.advance(admitRecompute)
	}
	for range 200 {
		_, reason, _ = a.enter()
		require.Empty(t, reason, "orders flow again")
	}
}

// TestAdmission_AProbeStillOutCountsAsSlow: once no round trip is left in the window, an order
// still in flight counts as slow as its age: the next is refused.
func TestAdmission_AProbeStillOutCountsAsSlow(t *testing.T) {
	c := newClock()
	a := newAdmission(0, time.Second, c.now)
	probe, reason, _ := a.enter()
	require.Empty(t, reason)
	c.advance(admitWindow + 5*time.Second)
	_, sig := a.figures()
	assert.Equal(t, admitWindow+5*time.Second, sig, "the probe's age")
	_, reason, _ = a.enter()
	assert.Equal(t, busyLatency, reason)
	a.done(probe)
	c.advance(admitRecompute)
	_, reason, _ = a.enter()
	assert.Empty(t, reason, "nothing out, nothing slow")
}

func TestAdmission_Off_LetsEverythingIn(t *testing.T) {
	a := newAdmission(0, 0, newClock().now)
	for range 10 {
		a.observe(time.Minute, false)
	}
	for range 1000 {
		_, reason, _ := a.enter()
		require.Empty(t, reason)
	}
	n, _ := a.figures()
	assert.EqualValues(t, 1000, n)
}
