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
func observeN(a *admission, n int, d time.Duration) {
	for range n {
		a.observe(d)
	}
}

func TestAdmission_InFlightBound_RefusesTheNextAndLetsInOnceOneIsDone(t *testing.T) {
	a := newAdmission(2, 0, newClock().now)
	first, reason, _ := a.enter()
	require.Empty(t, reason)
	_, reason, _ = a.enter()
	require.Empty(t, reason)
	_, reason, wait := a.enter()
	assert.Equal(t, busyInFlight, reason)
	assert.Equal(t, busyRetryAfter, wait)
	assert.EqualValues(t, 2, a.inFlight.Load(), "a refusal holds no place")

	a.done(first)
	_, reason, _ = a.enter()
	assert.Empty(t, reason, "a place given back lets the next one in")
}

// TestAdmission_LatencySignal_RefusesWhileHighAndDecaysOnceNothingIsLetIn: slow round trips put
// the signal over the limit; a probe is let in, the next order refused. With the probe still out
// and no order let in, the signal does not stay stuck: the slow samples age out of the window.
func TestAdmission_LatencySignal_RefusesWhileHighAndDecaysOnceNothingIsLetIn(t *testing.T) {
	c := newClock()
	a := newAdmission(0, time.Second, c.now)
	observeN(a, 20, 3*time.Second)
	c.advance(admitRecompute)
	assert.Equal(t, 3*time.Second, a.latency(c.now()))

	probe, reason, _ := a.enter()
	require.Empty(t, reason, "over the limit, one order is let in as a probe")
	require.True(t, probe.probe)
	_, reason, wait := a.enter()
	assert.Equal(t, busyLatency, reason, "a second one, while the probe is out, is refused")
	assert.Equal(t, 3*time.Second, wait, "told to wait about as long as an order takes now")

	c.advance(admitWindow)
	a.done(probe) // the probe never answered (its shopper left): no sample
	assert.Zero(t, a.latency(c.now()), "the slow samples aged out")
	t2, reason, _ := a.enter()
	assert.Empty(t, reason)
	assert.False(t, t2.probe, "let in as an ordinary order")
}

// TestAdmission_LatencySignal_ProbesBringItDown: once the orders let in as probes answer promptly,
// the signal falls below the limit before the slow samples age out, and orders flow again.
func TestAdmission_LatencySignal_ProbesBringItDown(t *testing.T) {
	c := newClock()
	a := newAdmission(0, time.Second, c.now)
	observeN(a, 5, 4*time.Second)
	c.advance(admitRecompute)
	for i := 0; ; i++ {
		require.Less(t, i, 100, "the probes never brought the signal down")
		p, reason, _ := a.enter()
		if reason == "" && !p.probe {
			a.done(p)
			break
		}
		require.Empty(t, reason, "with no probe out, the next order is the probe")
		c.advance(admitRecompute)
		a.observe(100 * time.Millisecond)
		a.done(p)
	}
	assert.Less(t, a.latency(c.now()), time.Second)
}

// TestAdmission_LatencySignal_AProbeStillOutCountsAsSlow: a probe that has been out longer than
// the limit keeps the signal over it even when no slow sample is left in the window.
func TestAdmission_LatencySignal_AProbeStillOutCountsAsSlow(t *testing.T) {
	c := newClock()
	a := newAdmission(0, time.Second, c.now)
	observeN(a, 5, 2*time.Second)
	c.advance(admitRecompute)
	probe, reason, _ := a.enter()
	require.Empty(t, reason)
	require.True(t, probe.probe)
	c.advance(admitWindow + 5*time.Second)
	assert.Equal(t, admitWindow+5*time.Second, a.latency(c.now()), "the probe's age")
	_, reason, _ = a.enter()
	assert.Equal(t, busyLatency, reason)
	a.observe(admitWindow + 5*time.Second)
	a.done(probe)
}

func TestAdmission_Off_LetsEverythingIn(t *testing.T) {
	c := newClock()
	a := newAdmission(0, 0, c.now)
	observeN(a, 10, time.Minute)
	for range 1000 {
		_, reason, _ := a.enter()
		require.Empty(t, reason)
	}
	assert.EqualValues(t, 1000, a.inFlight.Load())
}
