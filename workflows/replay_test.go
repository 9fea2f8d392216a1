package workflows_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"

	"github.com/marketplace/checkout/workflows"
)

const historyDir = "testdata/histories"

// keptHistory is one line of the manifest: a recorded history and the release that recorded it.
type keptHistory struct {
	file, sha256, release string
}

// manifest reads testdata/histories/MANIFEST: "# release <name>: …" headings, then one
// "<sha256>  <file>" line per history recorded by that release.
func manifest(t *testing.T) []keptHistory {
	t.Helper()
	f, err := os.Open(filepath.Join(historyDir, "MANIFEST"))
	require.NoError(t, err)
	defer f.Close()
	var out []keptHistory
	release := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "":
		case strings.HasPrefix(line, "# release "):
			release, _, _ = strings.Cut(strings.TrimPrefix(line, "# release "), ":")
		case strings.HasPrefix(line, "#"):
		default:
			sum, file, ok := strings.Cut(line, "  ")
			require.True(t, ok, "manifest line %q is not `<sha256>  <file>`", line)
			require.NotEmpty(t, release, "manifest line %q comes before any release heading", line)
			out = append(out, keptHistory{file: file, sha256: sum, release: release})
		}
	}
	require.NoError(t, sc.Err())
	return out
}

// TestHistories_KeptUnchanged: every history a release recorded stays as it was recorded. A
// history that no longer replays means running orders would be stranded; changing or deleting
// the file would only hide that.
func TestHistories_KeptUnchanged(t *testing.T) {
	kept := manifest(t)
	listed := map[string]bool{}
	for _, h := range kept {
		require.False(t, listed[h.file], "%s is listed twice", h.file)
		listed[h.file] = true
		raw, err := os.ReadFile(filepath.Join(historyDir, h.file))
		require.NoError(t, err, "%s (release %s) was deleted: recorded histories are kept", h.file, h.release)
		sum := sha256.Sum256(raw)
		require.Equal(t, h.sha256, hex.EncodeToString(sum[:]),
			"%s (release %s) was changed: record a new file instead", h.file, h.release)
	}
	err := filepath.WalkDir(historyDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".json" {
			return err
		}
		rel, _ := filepath.Rel(historyDir, path)
		require.True(t, listed[rel], "%s is not in the manifest (make histories adds new files to it)", rel)
		return nil
	})
	require.NoError(t, err)
}

// TestReplay_RecordedHistories replays every kept history against the current code: a change that
// is not deterministic for orders already running fails here.
func TestReplay_RecordedHistories(t *testing.T) {
	kept := manifest(t)
	require.NotEmpty(t, kept, "no recorded histories: run make histories")
	logger := sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	for _, h := range kept {
		t.Run(h.release+"/"+h.file, func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflow(workflows.OrderWorkflow)
			r.RegisterWorkflow(workflows.HoldWorkflow)
			require.NoError(t, r.ReplayWorkflowHistoryFromJSONFile(logger, filepath.Join(historyDir, h.file)))
		})
	}
}
