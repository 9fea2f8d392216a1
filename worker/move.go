package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	sdklog "go.temporal.io/sdk/log"
	sdkworker "go.temporal.io/sdk/worker"
)

// Replayer checks recorded histories against this build's workflow code.
type Replayer struct {
	r sdkworker.WorkflowReplayer
}

// NewReplayer replays with dc, the data converter the histories' payloads were written with (the
// product's codec for a live history; the SDK's default for the decoded histories the repository
// keeps).
func NewReplayer(dc converter.DataConverter) (*Replayer, error) {
	r, err := sdkworker.NewWorkflowReplayerWithOptions(sdkworker.WorkflowReplayerOptions{DataConverter: dc})
	if err != nil {
		return nil, err
	}
	registerWorkflows(r, nil)
	return &Replayer{r: r}, nil
}

// quiet keeps the replayer's own warnings out of the output: its verdict is the error.
var quiet = sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))

// Replay replays h on this build's code: nil means the code makes the same decisions the
// recorded run made, so the run could go on here.
func (r *Replayer) Replay(h *historypb.History) error {
	return r.r.ReplayWorkflowHistory(quiet, h)
}

// Move is the verdict on one open run of `checkout builds move`.
type Move struct {
	Run
	// Moved: its versioning override now pins it to the target build. Movable: its history
	// replays on this build (a dry run moves nothing).
	Moved, Movable bool
	// Reason says why it stays (its history does not replay here, or the move failed).
	Reason string
}

// MoveOptions say which runs move where.
type MoveOptions struct {
	Deployment string
	// From is the build whose open runs move; To the build they move to (this build: the code
	// they are replayed against).
	From, To string
	// DryRun checks every run and moves none.
	DryRun bool
	// Limit bounds how many runs are looked at (0: 10,000).
	Limit int
}

// MoveRuns moves the open runs pinned to o.From onto o.To when their history replays on this
// build's code: their next workflow tasks then run on o.To's workers. A run whose history does not
// replay stays where it is, with the reason. After moving a run, its history is read and replayed
// again: an event the old build wrote meanwhile that this code would not have written moves it
// back.
func MoveRuns(ctx context.Context, c client.Client, rp *Replayer, o MoveOptions) ([]Move, error) {
	if o.From == o.To {
		return nil, fmt.Errorf("--from %s is the build the runs would move to", o.From)
	}
	limit := o.Limit
	if limit <= 0 {
		limit = maxListed
	}
	runs, err := ListOpen(ctx, c, PinnedQuery(o.Deployment, o.From), limit)
	if err != nil {
		return nil, err
	}
	var out []Move
	for _, run := range runs {
		m := Move{Run: run}
		if err := replayRun(ctx, c, rp, run); err != nil {
			m.Reason = err.Error()
			out = append(out, m)
			continue
		}
		if o.DryRun {
			m.Movable = true
			out = append(out, m)
			continue
		}
		if err := pin(ctx, c, run, o.Deployment, o.To); err != nil {
			m.Reason = "move failed: " + err.Error()
			out = append(out, m)
			continue
		}
		if err := replayRun(ctx, c, rp, run); err != nil {
			m.Reason = "moved back: " + err.Error()
			if perr := pin(ctx, c, run, o.Deployment, o.From); perr != nil {
				m.Reason += "; moving it back failed: " + perr.Error()
			}
			out = append(out, m)
			continue
		}
		m.Moved, m.Movable = true, true
		out = append(out, m)
	}
	return out, nil
}

// replayRun replays a run's history as it stands.
func replayRun(ctx context.Context, c client.Client, rp *Replayer, run Run) error {
	h, err := History(ctx, c, run.WorkflowID, run.RunID)
	if err != nil {
		return err
	}
	if err := rp.Replay(h); err != nil {
		return fmt.Errorf("does not replay on this build: %s", firstLine(err))
	}
	return nil
}

// pin sets a run's versioning override to the build.
func pin(ctx context.Context, c client.Client, run Run, deployment, buildID string) error {
	_, err := c.UpdateWorkflowExecutionOptions(ctx, client.UpdateWorkflowExecutionOptionsRequest{
		WorkflowId: run.WorkflowID, RunId: run.RunID,
		WorkflowExecutionOptionsChanges: client.WorkflowExecutionOptionsChanges{
			VersioningOverride: &client.VersioningOverrideChange{Value: &client.PinnedVersioningOverride{
				Version: sdkworker.WorkerDeploymentVersion{DeploymentName: deployment, BuildID: buildID}}}}})
	return err
}

// History reads a run's whole history.
func History(ctx context.Context, c client.Client, workflowID, runID string) (*historypb.History, error) {
	var events []*historypb.HistoryEvent
	it := c.GetWorkflowHistory(ctx, workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return nil, fmt.Errorf("history of %s: %w", workflowID, err)
		}
		events = append(events, e)
	}
	if len(events) == 0 {
		return nil, errors.New("history of " + workflowID + " is empty")
	}
	return &historypb.History{Events: events}, nil
}

// firstLine is the first line of why a history does not replay, without the marker's payloads.
func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	s, _, _ = strings.Cut(s, ", markerData")
	return s
}
