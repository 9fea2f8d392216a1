package e2e_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/dev/chaos"
)

// TestChaos_Short_FaultsUnderLoadLoseNothing is `make chaos`'s short form on `make cluster`'s
// shape: campaign traffic through HAProxy (every payment scenario, hot SKUs, HOLD_TTL 60s) while an
// API replica and the history service are killed, PostgreSQL is restarted in immediate mode and
// every node of the event broker is killed at once, one after another. Every fault is put right,
// every order ends as its scenario says, every key names one order, no request is answered 500 and
// every 5xx carries a code and Retry-After, every event written reached the broker once, and the
// auditor is clean. Not parallel, like the cluster test: it runs alone, before the package's
// load tests.
func TestChaos_Short_FaultsUnderLoadLoseNothing(t *testing.T) {
	bin := buildHarness(t)
	tools, err := filepath.Abs("../bin")
	require.NoError(t, err)
	for _, name := range []string{"temporal-server", "temporal-sql-tool", "temporal-ui-server", "nats-server"} {
		if _, err := os.Stat(filepath.Join(tools, name)); err != nil {
			t.Skipf("bin/%s is missing, so faults under load were NOT tested: make test builds it", name)
		}
	}
	if _, err := exec.LookPath("haproxy"); err != nil {
		t.Skip("haproxy is missing, so faults under load were NOT tested: make test installs it (make haproxy)")
	}
	o := chaos.Short()
	o.Binary, o.Tools, o.Env, o.Out = bin, tools, cleanEnv(), testWriter{t}
	res, err := chaos.Run(context.Background(), o)
	require.NoError(t, err)
	var table strings.Builder
	require.NoError(t, res.WriteTable(&table, o))
	t.Log("\n" + table.String())

	assert.Empty(t, res.Losses, "nothing lost or answered wrong (the cluster's logs are kept in %s)", res.Dir)
	require.Len(t, res.Faults, len(o.Faults))
	for _, f := range res.Faults {
		assert.Empty(t, f.Err, f.Name)
		assert.GreaterOrEqual(t, f.Recovered, 0.0, "%s: put right within %s", f.Name, o.RecoverWithin)
		assert.Positive(t, f.Waited, "%s: orders were open when it struck", f.Name)
	}
	byName := map[string]chaos.FaultResult{}
	for _, f := range res.Faults {
		byName[f.Name] = f
	}
	pg := byName[chaos.FaultPostgres]
	require.Equal(t, chaos.FaultPostgres, pg.Name)
	// The restart was felt: requests that met it were answered 503 and repeated, or the first
	// order sent after it waited for the database to come back (which of the two depends on when
	// the shoppers' requests fell).
	assert.True(t, len(pg.Failed) > 0 || pg.FirstOrder >= 1,
		"PostgreSQL's restart was felt: requests answered 503 (%v) or the first order after it waited (%.1f s)",
		pg.Failed, pg.FirstOrder)
	broker := byName[chaos.FaultBroker]
	require.Equal(t, chaos.FaultBroker, broker.Name, "the event broker was killed under load")
	assert.GreaterOrEqual(t, broker.Recovered, 0.0, "the broker's nodes came back (and the run's losses, empty, include every event reaching the stream once)")
	assert.GreaterOrEqual(t, res.Load.Orders, int64(100), "a campaign's worth of orders")
	assert.True(t, res.Audit.OK())
}

// testWriter writes each line to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
