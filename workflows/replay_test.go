package workflows_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"

	"github.com/marketplace/checkout/workflows"
)

// TestReplay_RecordedHistories replays histories of real orders (recorded by `make histories`
// from the end-to-end tests) against the current code. A change that is not deterministic for
// orders already running fails here; guard such a change with workflow.GetVersion. The v0-*
// files were recorded before the lazy-hold-child-and-attributes change and are kept: runs begun
// then must still replay.
func TestReplay_RecordedHistories(t *testing.T) {
	files, err := filepath.Glob("testdata/histories/*.json")
	require.NoError(t, err)
	require.NotEmpty(t, files, "no recorded histories: run make histories")
	logger := sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflow(workflows.OrderWorkflow)
			r.RegisterWorkflow(workflows.HoldWorkflow)
			require.NoError(t, r.ReplayWorkflowHistoryFromJSONFile(logger, f))
		})
	}
}
