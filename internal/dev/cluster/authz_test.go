package cluster_test

import (
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/dev/cluster"
	"github.com/marketplace/checkout/workflows"
)

// TestTemporalServer_ItsPolicyNamesTheProductAndTheCluster: the authorizer of tools/temporal-server
// (a module of its own, which cannot import the product) names the support action, the line
// cancellation's workflow type and the certificates' common names as the product and the cluster
// do, and builds the server version the Makefile pins.
func TestTemporalServer_ItsPolicyNamesTheProductAndTheCluster(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("../../../tools/temporal-server/authz.go")
	require.NoError(t, err)
	constant := func(name string) string {
		m := regexp.MustCompile(`(?m)^\s*` + name + `\s*=\s*"([^"]*)"`).FindSubmatch(src)
		require.NotNil(t, m, name)
		return string(m[1])
	}
	assert.Equal(t, workflows.SupportAction, constant("supportAction"))
	assert.Equal(t, workflows.LineCancelWorkflowName, constant("lineCancelWorkflow"))
	for name, id := range map[string]cluster.Identity{"cnSystemWorker": cluster.IdentitySystemWorker,
		"cnFrontend": cluster.IdentityFrontend, "cnInternode": cluster.IdentityInternode, "cnTools": cluster.IdentityTools,
		"cnWorker": cluster.IdentityWorker, "cnAPI": cluster.IdentityAPI} {
		assert.Equal(t, id.CommonName, constant(name), name)
	}

	mod, err := os.ReadFile("../../../tools/temporal-server/go.mod")
	require.NoError(t, err)
	makefile, err := os.ReadFile("../../../Makefile")
	require.NoError(t, err)
	pinned := regexp.MustCompile(`(?m)^TEMPORAL_SERVER_VERSION\s*:= (\S+)$`).FindSubmatch(makefile)
	require.NotNil(t, pinned)
	assert.Regexp(t, `go.temporal.io/server `+regexp.QuoteMeta(string(pinned[1]))+`\n`, string(mod))
}
