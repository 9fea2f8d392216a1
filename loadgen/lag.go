package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Gauges of the availability projection the run samples from /metrics.
const (
	metricLag     = "checkout_availability_lag_seconds"
	metricPending = "checkout_availability_pending_changes"
)

// lagSamples is the availability projection's lag as /metrics showed it during the load.
type lagSamples struct {
	mu         sync.Mutex
	n          int
	sum, max   float64
	maxPending float64
}

// AvailabilityLag summarises the samples of checkout_availability_lag_seconds.
type AvailabilityLag struct {
	Samples           int     `json:"samples"`
	MaxSeconds        float64 `json:"maxSeconds"`
	MeanSeconds       float64 `json:"meanSeconds"`
	MaxPendingChanges float64 `json:"maxPendingChanges"`
}

// sampleLag reads the worker's /metrics every second until stop closes.
func (g *gen) sampleLag(ctx context.Context, stop <-chan struct{}) {
	if g.cfg.MetricsURL == "" {
		return
	}
	every(ctx, stop, time.Second, func() {
		a, err := g.setup.send(ctx, request{endpoint: "GET /metrics", method: http.MethodGet, url: g.cfg.MetricsURL})
		if err != nil || a.status != http.StatusOK {
			return
		}
		vals := gauges(a.body, metricLag, metricPending)
		lag, ok := vals[metricLag]
		if !ok {
			return
		}
		g.lag.mu.Lock()
		g.lag.n++
		g.lag.sum += lag
		g.lag.max = max(g.lag.max, lag)
		g.lag.maxPending = max(g.lag.maxPending, vals[metricPending])
		g.lag.mu.Unlock()
	})
}

// gauges reads unlabelled gauges from the Prometheus text format.
func gauges(body []byte, names ...string) map[string]float64 {
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		name, val, found := strings.Cut(sc.Text(), " ")
		if !found || !slices.Contains(names, name) {
			continue
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			out[name] = f
		}
	}
	return out
}

func (s *lagSamples) summary() *AvailabilityLag {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == 0 {
		return nil
	}
	return &AvailabilityLag{Samples: s.n, MaxSeconds: s.max, MeanSeconds: s.sum / float64(s.n), MaxPendingChanges: s.maxPending}
}
