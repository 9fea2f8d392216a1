package architecture_test

import (
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// edges are the packages that reach the data only through the areas' exported functions: they
// import no store at all.
var edges = []string{"api", "activities", "workflows", "worker"}

// stores reads sqlc.yaml: the package each sqlc target generates, by its out directory.
func stores(t *testing.T) []string {
	raw, err := os.ReadFile("../../sqlc.yaml")
	require.NoError(t, err)
	var out []string
	for _, m := range regexp.MustCompile(`(?m)^\s+out:\s*(\S+)\s*$`).FindAllStringSubmatch(string(raw), -1) {
		out = append(out, m[1])
	}
	require.NotEmpty(t, out, "sqlc.yaml names no target")
	return out
}

// areaOf is the area a store belongs to: the path before its /internal/ (a store outside one, as
// the payment simulator's, belongs to the package above it).
func areaOf(store string) string {
	if a, _, ok := strings.Cut(store, "/internal/"); ok {
		return a
	}
	return filepath.ToSlash(filepath.Dir(store))
}

func within(pkg, area string) bool { return pkg == area || strings.HasPrefix(pkg, area+"/") }

// imports lists every package of the module (tests included) with the module's packages it
// imports.
func imports(t *testing.T) map[string][]string {
	out := map[string][]string{}
	eachPackage(t, func(name string, pkg *build.Package) {
		var deps []string
		for _, imp := range slices.Concat(pkg.Imports, pkg.TestImports, pkg.XTestImports) {
			if dep, ok := strings.CutPrefix(imp, module); ok {
				deps = append(deps, dep)
			}
		}
		out[name] = deps
	})
	return out
}

// TestStores_OwnedByTheirArea: each area owns its tables' queries in a store of its own, which
// only the area imports (Go's internal/ rule says so for the compiler; this says it for the
// reader, and for a store placed outside an internal/ directory); the API, the activities, the
// workflows and the worker import no store: they call the areas' functions.
func TestStores_OwnedByTheirArea(t *testing.T) {
	all := stores(t)
	for pkg, deps := range imports(t) {
		for _, dep := range deps {
			if !slices.Contains(all, dep) {
				continue
			}
			if area := areaOf(dep); !within(pkg, area) {
				t.Errorf("%s imports %s, the store of %s: only %s may; call its exported functions", pkg, dep, area, area)
			}
			for _, e := range edges {
				if within(pkg, e) {
					t.Errorf("%s imports the store %s: %s reaches data only through the areas' functions", pkg, dep, e)
				}
			}
		}
	}
}

// TestStores_SharedDBHoldsNoQuery: db keeps what the stores share (the pool, the locks, NotFound,
// DBTX) and no query: it is no sqlc target, and has no queries of its own.
func TestStores_SharedDBHoldsNoQuery(t *testing.T) {
	assert.NotContains(t, stores(t), "db", "sqlc.yaml generates into db: a query belongs in the store of the area that owns its tables")
	_, err := os.Stat("../../db/queries")
	assert.ErrorIs(t, err, fs.ErrNotExist, "db/queries: a query belongs in the store of the area that owns its tables")
}

// TestStores_DocumentMatchesTheCode: the stores table of docs/architecture.md lists every store
// sqlc.yaml generates, each with its area, and nothing else; every package path the document names
// exists.
func TestStores_DocumentMatchesTheCode(t *testing.T) {
	raw, err := os.ReadFile("../../docs/architecture.md")
	require.NoError(t, err)
	doc := string(raw)
	// | `area` | `area/internal/xstore` | tables |
	rows := regexp.MustCompile("(?m)^\\| `([a-z/]+)` \\| `([a-z/]+)` \\|").FindAllStringSubmatch(doc, -1)
	documented := map[string]string{}
	for _, r := range rows {
		documented[r[2]] = r[1]
	}
	want := map[string]string{}
	for _, s := range stores(t) {
		want[s] = areaOf(s)
	}
	assert.Equal(t, want, documented, "docs/architecture.md's stores table (area, store) and sqlc.yaml's targets")

	pkgs := imports(t)
	top := map[string]bool{}
	for p := range pkgs {
		top[strings.Split(p, "/")[0]] = true
	}
	for _, m := range regexp.MustCompile("`([a-z][a-z0-9]*(?:/[a-z0-9_]+)*)`").FindAllStringSubmatch(doc, -1) {
		name := m[1]
		if !top[strings.Split(name, "/")[0]] || strings.Contains(name, ".") {
			continue
		}
		if _, err := os.Stat(filepath.Join("../..", name)); err != nil {
			t.Errorf("docs/architecture.md names `%s`, which does not exist", name)
		}
	}
}
