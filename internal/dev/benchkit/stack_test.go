package benchkit

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/marketplace/checkout/internal/dev/cluster"
)

// The dev stack's checkout is one process; the cluster's are its API replicas and workers, each
// on its own metrics port.
func TestCheckoutMetrics(t *testing.T) {
	t.Parallel()
	dev := &Stack{Metrics: "http://127.0.0.1:9090/metrics"}
	assert.Equal(t, []string{"http://127.0.0.1:9090/metrics"}, dev.CheckoutMetrics(2))

	c := &Stack{Cluster: true, Ports: cluster.Ports{APIMetrics: 9101, WorkerMetrics: 9201}}
	assert.Equal(t, []string{"http://127.0.0.1:9101/metrics", "http://127.0.0.1:9201/metrics",
		"http://127.0.0.1:9102/metrics", "http://127.0.0.1:9202/metrics"}, c.CheckoutMetrics(2))
}
