package architecture_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/config"
)

// settingName is an environment variable's name as internal/config spells it in a string literal.
var settingName = regexp.MustCompile(`"([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)"`)

// TestSettings_DescribedOnceInSettingsDoc: the settings' table (internal/config/settings.go, from
// which docs/settings.md is generated) names every environment variable internal/config reads, and
// docs/settings.md alone describes settings: no other document has a table row of its own for one
// (others link to it).
func TestSettings_DescribedOnceInSettingsDoc(t *testing.T) {
	root := filepath.Join("..", "..")
	sources, err := filepath.Glob(filepath.Join(root, "internal", "config", "*.go"))
	require.NoError(t, err)
	names := map[string]bool{}
	for _, f := range sources {
		if strings.HasSuffix(f, "_test.go") || filepath.Base(f) == "settings.go" {
			continue // settings.go is the table itself
		}
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range settingName.FindAllStringSubmatch(string(raw), -1) {
			names[m[1]] = true
		}
	}
	require.Greater(t, len(names), 50, "too few settings found in internal/config: is the pattern still right?")

	table := map[string]bool{}
	for _, s := range config.Settings {
		for _, n := range s.Names {
			table[n] = true
		}
	}
	for n := range names {
		assert.True(t, table[n], "internal/config reads %s, which its settings' table (settings.go) does not describe", n)
	}

	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	docs = append(docs, filepath.Join(root, "README.md"), filepath.Join(root, "CONTRIBUTING.md"))
	row := regexp.MustCompile("(?m)^\\| `([A-Z][A-Z0-9_]+)`")
	for _, d := range docs {
		if filepath.Base(d) == "settings.md" {
			continue
		}
		raw, err := os.ReadFile(d)
		require.NoError(t, err)
		for _, m := range row.FindAllStringSubmatch(string(raw), -1) {
			assert.False(t, names[m[1]], "%s describes the setting %s in a table of its own: describe it in docs/settings.md and link there",
				must(filepath.Rel(root, d)), m[1])
		}
	}
}
