package architecture_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// harness are the packages that run, load and break the product on one machine: the product's
// binary links none of them.
var harness = []string{"internal/dev/", "loadgen", "cmd/checkout-dev", "e2e", "bench/", "tools/"}

// TestProductBinary_LinksNoHarness: what a shop deploys, cmd/checkout, links no package of the
// harness (the local stack, the cluster on one machine, the load generator, the fault drivers);
// cmd/checkout-dev does, so the list is read right.
func TestProductBinary_LinksNoHarness(t *testing.T) {
	deps := func(pkg string) []string {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		require.NoError(t, err, "go list -deps %s", pkg)
		return strings.Fields(string(out))
	}
	isHarness := func(path string) bool {
		rel, ok := strings.CutPrefix(path, module)
		if !ok {
			return false
		}
		for _, h := range harness {
			if rel == strings.TrimSuffix(h, "/") || (strings.HasSuffix(h, "/") && strings.HasPrefix(rel, h)) {
				return true
			}
		}
		return false
	}
	product := deps("../../cmd/checkout")
	assert.Contains(t, product, module+"internal/service", "the list is of the product's binary")
	for _, p := range product {
		assert.False(t, isHarness(p), "the product's binary links %s, a package of the harness", p)
	}
	var linked []string
	for _, p := range deps("../../cmd/checkout-dev") {
		if isHarness(p) {
			linked = append(linked, strings.TrimPrefix(p, module))
		}
	}
	assert.Subset(t, linked, []string{"internal/dev/cluster", "internal/dev/builds", "loadgen"}, "the harness's binary links them")
}
