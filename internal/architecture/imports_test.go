// Package architecture_test keeps the packages in the layers docs/architecture.md draws: a package
// imports the product's packages of lower layers only, and the product never imports its tools.
package architecture_test

import (
	"errors"
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const module = "github.com/marketplace/checkout/"

// layers lists every package of the product, lowest first. A package may import packages of lower
// layers; none of its own layer or above. A new package must be placed here (and in the document).
var layers = [][]string{
	// Foundations: the shared pool and locks (db), the migrations, each area's store (its generated
	// queries, which only the area imports; the payment simulator's on its own schema), the error
	// vocabulary, money, tokens, the codec, metrics, the payment provider's interface, a
	// deployment's certificates, the dev PostgreSQL and child processes.
	{"db", "migrations", "payment/paysim/simdb", "order/internal/orderstore", "inventory/internal/stockstore", "pricing/internal/pricingstore",
		"cart/internal/cartstore", "availability/internal/availabilitystore", "webhooks/internal/webhookstore",
		"features/internal/featurestore", "audit/internal/auditstore", "internal/staff/internal/sessionstore", "outbox/internal/outboxstore", "internal/problem", "internal/money", "internal/auth", "internal/codec",
		"internal/metrics", "payment", "internal/pki", "internal/dev/pgserver", "internal/dev/childproc", "deploy"},
	// The outbox's writer, through which every area writes its events in its own transaction.
	{"outbox/emit"},
	// The business rules, each on its own tables.
	{"inventory", "pricing", "events", "payment/paysim", "payment/stripepay", "internal/config", "internal/dev/demo",
		"internal/dev/devtemporal", "internal/dev/devprometheus", "internal/dev/devjaeger", "internal/dev/natsserver",
		"internal/telemetry", "features", "internal/staff"},
	// The order's lifecycle, over the stock and prices it is made of; the outbox's delivery to the
	// broker and the broker's consumers (the availability projection, sellers' webhooks), over the
	// events' contract.
	{"cart", "internal/dev/cluster", "order", "outbox", "availability", "webhooks", "kafkasink"},
	// The saga's steps.
	{"activities"},
	// The saga.
	{"workflows"},
	// The edges: HTTP, the worker, the auditor.
	{"api", "worker", "audit"},
	// The load generator, the wiring that hands each part its options, the kept builds.
	{"loadgen", "internal/wiring", "internal/dev/builds"},
	// The processes and commands both binaries run.
	{"internal/service"},
	// The product's binary and the harness's.
	{"cmd/checkout", "cmd/checkout-dev"},
}

// tools are for tests and benchmarks only: nothing in layers may import them.
var tools = []string{"internal/dev/testenv", "internal/dev/benchkit", "internal/dev/benchdata", "internal/dev/chaos", "bench/chaos", "bench/benchcampaign",
	"internal/dev/drill", "bench/upgradedrill", "internal/dev/attack", "bench/attack", "bench/demo",
	"bench/benchcart", "bench/benchcost", "bench/benchprofile", "bench/benchshards", "bench/capacity", "bench/internal/figures", "bench/internal/plain", "bench/benchorders", "bench/benchreserve", "bench/webhookreceiver", "internal/architecture", "e2e", "tools/temporal-server",
	"tools/oidc-provider", "tools/jaeger"}

func TestImports_FollowTheLayers(t *testing.T) {
	layerOf := map[string]int{}
	for i, l := range layers {
		for _, p := range l {
			layerOf[p] = i
		}
	}
	seen := 0
	eachPackage(t, func(name string, pkg *build.Package) {
		seen++
		layer, placed := layerOf[name]
		if !placed {
			assert.True(t, slices.Contains(tools, name), "package %s is in no layer: place it in layers and in docs/architecture.md", name)
			return
		}
		for _, imp := range pkg.Imports {
			dep, ok := strings.CutPrefix(imp, module)
			if !ok {
				continue
			}
			if slices.Contains(tools, dep) {
				t.Errorf("%s imports %s, a test and benchmark tool", name, dep)
				continue
			}
			if l, ok := layerOf[dep]; ok && l >= layer {
				t.Errorf("%s (layer %d) imports %s (layer %d): only lower layers may be imported", name, layer, dep, l)
			}
		}
	})
	assert.Greater(t, seen, 30, "the walk found the packages")
}

// TestImports_DocumentNamesEveryPackage: docs/architecture.md names every package of the layers.
func TestImports_DocumentNamesEveryPackage(t *testing.T) {
	raw, err := os.ReadFile("../../docs/architecture.md")
	require.NoError(t, err)
	for _, l := range layers {
		for _, p := range l {
			assert.Contains(t, string(raw), "`"+p+"`", "docs/architecture.md does not name %s", p)
		}
	}
}

// eachPackage calls fn with every Go package of the repository (the bench and tools modules
// included), named by its folder relative to the root, skipping hidden folders, bin, testdata and
// node_modules.
func eachPackage(t *testing.T, fn func(name string, pkg *build.Package)) {
	t.Helper()
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if name := d.Name(); rel != "." && (strings.HasPrefix(name, ".") || name == "bin" || name == "testdata" ||
			name == "node_modules") {
			return filepath.SkipDir
		}
		pkg, err := build.ImportDir(path, 0)
		if err != nil {
			var none *build.NoGoError
			if errors.As(err, &none) {
				return nil
			}
			return err
		}
		fn(filepath.ToSlash(rel), pkg)
		return nil
	})
	require.NoError(t, err)
}
