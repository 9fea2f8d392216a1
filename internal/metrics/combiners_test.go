package metrics

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// The dashboards (deploy/grafana) and the runbook read the combiners' metrics by these names,
// without labels, with these buckets.
func TestNew_CombinersKeepTheirMetricNamesAndHelp(t *testing.T) {
	t.Parallel()
	m := New()
	m.ReserveBatch(3)
	m.ReserveBatchFailed(3, errors.New("lock timeout"))
	m.ConfirmBatch(5)
	m.ConfirmBatch(1)
	m.ConfirmBatchFailed(5, errors.New("deadlock"))
	const want = `
# HELP checkout_confirm_batch_failures_total Combined confirm transactions that failed as a whole (a row held past the lock timeout, a deadlock, a lost connection); their orders went again each on its own.
# TYPE checkout_confirm_batch_failures_total counter
checkout_confirm_batch_failures_total 1
# HELP checkout_confirm_batch_size Orders per combined confirm transaction (CONFIRM_COMBINING): 1 at low load, larger on a hot SKU.
# TYPE checkout_confirm_batch_size histogram
checkout_confirm_batch_size_bucket{le="1"} 1
checkout_confirm_batch_size_bucket{le="2"} 1
checkout_confirm_batch_size_bucket{le="4"} 1
checkout_confirm_batch_size_bucket{le="8"} 2
checkout_confirm_batch_size_bucket{le="16"} 2
checkout_confirm_batch_size_bucket{le="32"} 2
checkout_confirm_batch_size_bucket{le="64"} 2
checkout_confirm_batch_size_bucket{le="128"} 2
checkout_confirm_batch_size_bucket{le="256"} 2
checkout_confirm_batch_size_bucket{le="+Inf"} 2
checkout_confirm_batch_size_sum 6
checkout_confirm_batch_size_count 2
# HELP checkout_reserve_batch_failures_total Combined reserve transactions that failed as a whole (a row held past the lock timeout, a deadlock, a lost connection); their orders went again each on its own.
# TYPE checkout_reserve_batch_failures_total counter
checkout_reserve_batch_failures_total 1
# HELP checkout_reserve_batch_size Orders per combined reserve transaction (RESERVE_COMBINING): 1 at low load, larger on a hot SKU.
# TYPE checkout_reserve_batch_size histogram
checkout_reserve_batch_size_bucket{le="1"} 0
checkout_reserve_batch_size_bucket{le="2"} 0
checkout_reserve_batch_size_bucket{le="4"} 1
checkout_reserve_batch_size_bucket{le="8"} 1
checkout_reserve_batch_size_bucket{le="16"} 1
checkout_reserve_batch_size_bucket{le="32"} 1
checkout_reserve_batch_size_bucket{le="64"} 1
checkout_reserve_batch_size_bucket{le="128"} 1
checkout_reserve_batch_size_bucket{le="256"} 1
checkout_reserve_batch_size_bucket{le="+Inf"} 1
checkout_reserve_batch_size_sum 3
checkout_reserve_batch_size_count 1
`
	require.NoError(t, testutil.GatherAndCompare(m.Registry, strings.NewReader(want),
		"checkout_reserve_batch_size", "checkout_reserve_batch_failures_total",
		"checkout_confirm_batch_size", "checkout_confirm_batch_failures_total"))
}
