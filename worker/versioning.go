package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/workflows"
)

// Version is the worker deployment version this worker polls as: the deployment (by default the
// task queue) and the build of the workflow code (workflows.BuildID, or buildID when given).
// Every workflow is pinned to the version whose worker ran its first task, so a build never
// replays a run another build started; a run therefore finishes on the build it began on, and an
// old build retires once its runs have drained.
func Version(cfg config.Config, buildID string) sdkworker.WorkerDeploymentVersion {
	if buildID == "" {
		buildID = workflows.BuildID
	}
	return sdkworker.WorkerDeploymentVersion{DeploymentName: cfg.DeploymentName, BuildID: buildID}
}

// Ways to make a worker's version the deployment's current one at start-up (TEMPORAL_SET_CURRENT).
const (
	// SetCurrentAuto makes it current only when the deployment has no current version yet: the first
	// versioned deployment. Later builds wait for ops (`temporal worker deployment
	// set-current-version`), who choose when new orders move to them.
	SetCurrentAuto = "auto"
	// SetCurrentAlways makes every starting worker's version current (one worker, as in `dev`).
	SetCurrentAlways = "always"
	// SetCurrentNever leaves the deployment to ops.
	SetCurrentNever = "never"
)

// SetCurrent makes v the current version of its deployment as policy says. The version exists once
// the worker's pollers have reached the server, so this waits for that (up to a minute).
func SetCurrent(ctx context.Context, c client.Client, v sdkworker.WorkerDeploymentVersion, policy string, log *slog.Logger) error {
	if policy == SetCurrentNever {
		return nil
	}
	h := c.WorkerDeploymentClient().GetHandle(v.DeploymentName)
	deadline := time.Now().Add(time.Minute)
	for {
		err := setCurrent(ctx, h, v, policy, log)
		if err == nil {
			return nil
		}
		var notFound *serviceerror.NotFound
		var precondition *serviceerror.FailedPrecondition
		if !(errors.As(err, &notFound) || errors.As(err, &precondition)) || time.Now().After(deadline) {
			return fmt.Errorf("make worker version %s.%s current: %w", v.DeploymentName, v.BuildID, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func setCurrent(ctx context.Context, h client.WorkerDeploymentHandle, v sdkworker.WorkerDeploymentVersion, policy string,
	log *slog.Logger) error {
	if policy == SetCurrentAuto {
		d, err := h.Describe(ctx, client.WorkerDeploymentDescribeOptions{})
		var notFound *serviceerror.NotFound
		switch {
		case errors.As(err, &notFound):
			// No poller of this deployment has reached the server yet.
			return err
		case err != nil:
			return err
		}
		if cur := d.Info.RoutingConfig.CurrentVersion; cur != nil {
			if cur.BuildID != v.BuildID {
				log.Warn("this worker's version is not current: new orders go to the current version until ops make this one current",
					"deployment", v.DeploymentName, "build_id", v.BuildID, "current_build_id", cur.BuildID)
			}
			return nil
		}
	}
	_, err := h.SetCurrentVersion(ctx, client.WorkerDeploymentSetCurrentVersionOptions{BuildID: v.BuildID})
	if err == nil {
		log.Info("worker version made current", "deployment", v.DeploymentName, "build_id", v.BuildID)
	}
	return err
}
