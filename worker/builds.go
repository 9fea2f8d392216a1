package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
)

// Roles of a build in its worker deployment, as `checkout builds` shows them.
const (
	// RoleCurrent takes every new run (but the ramping share).
	RoleCurrent = "current"
	// RoleRamping takes a share of new runs while another build is current.
	RoleRamping = "ramping"
	// RoleDraining takes no new run; runs pinned to it are still open or Temporal has not yet
	// seen them all closed. Its workers must keep running.
	RoleDraining = "draining"
	// RoleDrained has no open run: its workers may stop once closed runs need no more queries.
	RoleDrained = "drained"
	// RoleInactive has polled but was never current or ramping: it holds no run.
	RoleInactive = "inactive"
)

// Build is one build of the workflow code as Temporal sees it: its role in the deployment and
// the runs pinned to it that are still open.
type Build struct {
	BuildID string
	Role    string
	// RampPercentage is the share of new runs a ramping build takes.
	RampPercentage float32
	// DrainedSince is when Temporal saw its last pinned run closed (zero unless drained).
	DrainedSince time.Time
	Open         OpenRuns
}

// OpenRuns counts the open runs of a visibility query and names the oldest.
type OpenRuns struct {
	Count int64
	// Oldest is the open run that started first (nil when there is none).
	Oldest *Run
}

// Run is one workflow run.
type Run struct {
	WorkflowID, RunID, Type string
	Started                 time.Time
}

// versionValue is how visibility spells a worker deployment version (TemporalWorkerDeploymentVersion).
func versionValue(deployment, buildID string) string { return deployment + ":" + buildID }

// PinnedQuery selects the open runs pinned to one build of a deployment.
func PinnedQuery(deployment, buildID string) string {
	return `ExecutionStatus = "Running" AND TemporalWorkerDeploymentVersion = ` + strconv.Quote(versionValue(deployment, buildID))
}

// UnversionedQuery selects the open runs that no versioned worker has run yet: runs begun by a
// release before worker versioning (the saga's first two releases) that have not had a
// workflow task since.
const UnversionedQuery = `ExecutionStatus = "Running" AND TemporalWorkerDeploymentVersion IS NULL`

// Builds lists every build of the deployment, the current one first, then by how recently it
// was created. A deployment no worker has polled yet has none.
func Builds(ctx context.Context, c client.Client, deployment string) ([]Build, error) {
	d, err := c.WorkerDeploymentClient().GetHandle(deployment).Describe(ctx, client.WorkerDeploymentDescribeOptions{})
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("describe worker deployment %s: %w", deployment, err)
	}
	rc := d.Info.RoutingConfig
	created := map[string]time.Time{}
	var out []Build
	for _, s := range d.Info.VersionSummaries {
		b := Build{BuildID: s.Version.BuildID}
		created[b.BuildID] = s.CreateTime
		switch {
		case rc.CurrentVersion != nil && rc.CurrentVersion.BuildID == b.BuildID:
			b.Role = RoleCurrent
		case rc.RampingVersion != nil && rc.RampingVersion.BuildID == b.BuildID:
			b.Role, b.RampPercentage = RoleRamping, rc.RampingVersionPercentage
		case s.DrainageStatus == client.WorkerDeploymentVersionDrainageStatusDraining:
			b.Role = RoleDraining
		case s.DrainageStatus == client.WorkerDeploymentVersionDrainageStatusDrained:
			b.Role = RoleDrained
		default:
			b.Role = RoleInactive
		}
		if b.Open, err = CountOpen(ctx, c, PinnedQuery(deployment, b.BuildID)); err != nil {
			return nil, err
		}
		if b.Role == RoleDrained {
			v, err := c.WorkerDeploymentClient().GetHandle(deployment).DescribeVersion(ctx,
				client.WorkerDeploymentDescribeVersionOptions{BuildID: b.BuildID})
			if err == nil && v.Info.DrainageInfo != nil {
				b.DrainedSince = v.Info.DrainageInfo.LastChangedTime
			}
		}
		// Temporal checks drainage every few minutes; a run still open means draining whatever
		// its last check said.
		if b.Role == RoleDrained && b.Open.Count > 0 {
			b.Role = RoleDraining
		}
		out = append(out, b)
	}
	slices.SortStableFunc(out, func(a, b Build) int {
		if (a.Role == RoleCurrent) != (b.Role == RoleCurrent) {
			if a.Role == RoleCurrent {
				return -1
			}
			return 1
		}
		return created[b.BuildID].Compare(created[a.BuildID])
	})
	return out, nil
}

// NeedsWorkers says whether a build's workers must keep running: it takes new runs, or a run
// pinned to it is open, or Temporal does not yet report it drained.
func (b Build) NeedsWorkers() bool {
	return b.Role == RoleCurrent || b.Role == RoleRamping || b.Role == RoleDraining || b.Open.Count > 0
}

// maxListed bounds how many open runs CountOpen reads to find the oldest (visibility on SQL
// cannot sort): past it, the oldest named is the oldest of those read.
const maxListed = 10000

// CountOpen counts the runs of a visibility query and finds the one that started first.
func CountOpen(ctx context.Context, c client.Client, query string) (OpenRuns, error) {
	n, err := c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: query})
	if err != nil {
		return OpenRuns{}, fmt.Errorf("count %q: %w", query, err)
	}
	out := OpenRuns{Count: n.GetCount()}
	if out.Count == 0 {
		return out, nil
	}
	runs, err := ListOpen(ctx, c, query, maxListed)
	if err != nil {
		return out, err
	}
	for _, r := range runs {
		if out.Oldest == nil || r.Started.Before(out.Oldest.Started) {
			out.Oldest = &r
		}
	}
	return out, nil
}

// ListOpen lists up to limit runs of a visibility query.
func ListOpen(ctx context.Context, c client.Client, query string, limit int) ([]Run, error) {
	var out []Run
	var token []byte
	for {
		r, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query,
			NextPageToken: token, PageSize: int32(min(1000, limit-len(out)))})
		if err != nil {
			return nil, fmt.Errorf("list %q: %w", query, err)
		}
		for _, e := range r.GetExecutions() {
			out = append(out, Run{WorkflowID: e.GetExecution().GetWorkflowId(), RunID: e.GetExecution().GetRunId(),
				Type: e.GetType().GetName(), Started: e.GetStartTime().AsTime()})
		}
		token = r.GetNextPageToken()
		if len(token) == 0 || len(out) >= limit {
			return out, nil
		}
	}
}

// Describe is a line of `checkout builds` for b.
func (b Build) Describe() string {
	role := b.Role
	if b.Role == RoleRamping {
		role = fmt.Sprintf("%s %g%%", b.Role, b.RampPercentage)
	}
	oldest := "-"
	if o := b.Open.Oldest; o != nil {
		oldest = o.Started.UTC().Format(time.RFC3339) + " " + o.WorkflowID
	}
	since := ""
	if !b.DrainedSince.IsZero() {
		since = " since " + b.DrainedSince.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("%-12s %-16s %9d  %s", b.BuildID, role+since, b.Open.Count, cmp.Or(oldest, "-"))
}
