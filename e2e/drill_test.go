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

	"github.com/marketplace/checkout/internal/dev/drill"
)

// TestUpgradeDrill_Short_WaitingOrdersEndAsTheirScenariosSay is `make upgrade-drill`'s short form:
// make cluster's shape on the previous release (built from its newest commit in this repository),
// an order left in each state an order waits in, today's build released with `checkout-dev release`,
// each order finished. Every order ends as its scenario says on the build it began on, `checkout
// builds` shows the previous build draining beside today's, it drains and its workers stop, and
// the audit is clean. Not parallel, like the cluster tests.
func TestUpgradeDrill_Short_WaitingOrdersEndAsTheirScenariosSay(t *testing.T) {
	bin := buildBinary(t)
	repo, err := filepath.Abs("..")
	require.NoError(t, err)
	tools := filepath.Join(repo, "bin")
	for _, name := range []string{"temporal-server", "temporal-sql-tool", "temporal-ui-server", "nats-server"} {
		if _, err := os.Stat(filepath.Join(tools, name)); err != nil {
			t.Skipf("bin/%s is missing, so the upgrade drill was NOT run: make test builds it", name)
		}
	}
	if _, err := exec.LookPath("haproxy"); err != nil {
		t.Skip("haproxy is missing, so the upgrade drill was NOT run: make test installs it (make haproxy)")
	}
	res, err := drill.Run(context.Background(), drill.Options{Repo: repo, Tools: tools, Today: bin, Short: true, Out: testWriter{t}})
	var table strings.Builder
	res.WriteTable(&table)
	t.Log(table.String())
	require.NoError(t, err)
	assert.True(t, res.OK(), "the drill failed: see the table")
	require.Len(t, res.Rows, 6, "an order in each waiting state")
	for _, row := range res.Rows {
		assert.Equal(t, []string{res.Previous}, row.Builds, "%s ran on the build it began on", row.Scenario)
	}
}
