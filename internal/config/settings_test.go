package config_test

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/config"
)

var update = flag.Bool("update", false, "write docs/settings.md from the settings' table")

// TestSettingsDoc_IsTheTable: docs/settings.md is what config.SettingsDoc renders from the table
// beside the code (`make settings-doc` writes it), so a setting is described in one place.
func TestSettingsDoc_IsTheTable(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "settings.md")
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(config.SettingsDoc()), 0o644))
	}
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, config.SettingsDoc(), string(raw),
		"docs/settings.md differs from internal/config/settings.go: edit the table there, then `make settings-doc`")
}

// TestSettings_EachNamedOnce: no variable has two rows.
func TestSettings_EachNamedOnce(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range config.Settings {
		require.NotEmpty(t, s.Names)
		for _, n := range s.Names {
			assert.False(t, seen[n], "%s has two rows", n)
			seen[n] = true
		}
	}
}
