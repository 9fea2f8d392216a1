package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/cart"
	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/internal/metrics"
	"github.com/marketplace/checkout/workflows"
)

// job is one scheduled job: its schedule and the workflow each run starts.
type job struct {
	id       string
	workflow string
	arg      any
	every    config.Every
	// timeout bounds a run, so that a run stuck without a worker does not hold back the next ones
	// (the overlap policy skips a run while the previous one is open).
	timeout time.Duration
	summary string
}

func jobs(cfg config.Config) []job {
	return []job{
		{id: workflows.ScheduleSweeper, workflow: workflows.SweeperWorkflowName, arg: workflows.SweeperInput{},
			every: cfg.SweeperEvery, timeout: 15 * time.Minute,
			summary: "Reservation sweeper: releases expired ACTIVE reservations (backstop of the hold timers)"},
		{id: workflows.ScheduleReconciler, workflow: workflows.ReconcilerWorkflowName,
			every: cfg.ReconcilerEvery, timeout: 15 * time.Minute,
			summary: "Inventory reconciler: repairs reserved against the ACTIVE reservations, records each drift"},
		{id: workflows.ScheduleCartJanitor, workflow: workflows.CartJanitorWorkflowName,
			arg: workflows.CartJanitorInput{OlderThan: cfg.CartIdleTTL}, every: cfg.CartJanitorEvery, timeout: 2 * time.Hour,
			summary: "Cart janitor: deletes carts idle for " + cfg.CartIdleTTL.String() + ", writes abandoned-cart events"},
		{id: workflows.SchedulePaymentReconciler, workflow: workflows.PaymentReconcilerWorkflowName,
			arg: workflows.PaymentReconcilerInput{}, every: cfg.PaymentReconcilerEvery, timeout: 15 * time.Minute,
			summary: "Payment reconciler: resolves UNKNOWN payments with the provider and tells their orders"},
	}
}

// ScheduleIDs are the ids of the jobs' schedules under cfg (with its prefix).
func ScheduleIDs(cfg config.Config) []string {
	var ids []string
	for _, j := range jobs(cfg) {
		ids = append(ids, cfg.ScheduleIDPrefix+j.id)
	}
	return ids
}

// EnsureSchedules creates the scheduled jobs' Temporal Schedules, or brings existing ones up to
// date in place (spec, workflow, task queue, policies), so that every start-up of every worker may
// call it and nothing is ever duplicated. A schedule that ops paused in the UI stays paused. A
// call that times out is tried again (retryTransient).
func EnsureSchedules(ctx context.Context, c client.Client, cfg config.Config) error {
	sc := c.ScheduleClient()
	for _, j := range jobs(cfg) {
		if err := retryTransient(ctx, func() error { return ensureSchedule(ctx, sc, cfg, j) }); err != nil {
			return err
		}
	}
	return nil
}

// ensureSchedule creates job's schedule, or brings the existing one up to date. A create that
// timed out but was done is found on the next try, and updated.
func ensureSchedule(ctx context.Context, sc client.ScheduleClient, cfg config.Config, j job) error {
	id := cfg.ScheduleIDPrefix + j.id
	spec := scheduleSpec(j.every)
	var args []any
	if j.arg != nil {
		args = []any{j.arg}
	}
	action := &client.ScheduleWorkflowAction{ID: id, Workflow: j.workflow, Args: args, TaskQueue: cfg.TaskQueue,
		WorkflowExecutionTimeout: j.timeout, StaticSummary: j.summary}
	policy := client.SchedulePolicies{Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_SKIP, CatchupWindow: catchupWindow(j.every)}
	_, err := sc.Create(ctx, client.ScheduleOptions{ID: id, Spec: spec, Action: action, Overlap: policy.Overlap,
		CatchupWindow: policy.CatchupWindow})
	if err == nil {
		return nil
	}
	if !errors.Is(err, temporal.ErrScheduleAlreadyRunning) {
		return fmt.Errorf("create schedule %s: %w", id, err)
	}
	err = sc.GetHandle(ctx, id).Update(ctx, client.ScheduleUpdateOptions{
		DoUpdate: func(in client.ScheduleUpdateInput) (*client.ScheduleUpdate, error) {
			s := in.Description.Schedule
			s.Spec, s.Action, s.Policy = &spec, action, &policy
			if s.State == nil {
				s.State = &client.ScheduleState{}
			}
			return &client.ScheduleUpdate{Schedule: &s}, nil
		},
	})
	if err != nil {
		return fmt.Errorf("update schedule %s: %w", id, err)
	}
	return nil
}

// transientWindow is how long start-up keeps trying a Temporal call that timed out or found the
// server unavailable. A server that has just started, on a busy machine, can take longer than the
// SDK's 10 s a call to answer one: reading a schedule is a query its own workers answer once they
// poll.
const transientWindow = 2 * time.Minute

// retryTransient runs call until it succeeds, fails for another reason, ctx ends or
// transientWindow has passed, waiting longer after each transient failure (up to 5 s).
func retryTransient(ctx context.Context, call func() error) error {
	deadline := time.Now().Add(transientWindow)
	wait := 250 * time.Millisecond
	for {
		err := call()
		if err == nil || !transient(err) || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// transient: the call timed out or the server was unavailable, which a later try may not be.
func transient(err error) bool {
	var timeout *serviceerror.DeadlineExceeded
	var unavailable *serviceerror.Unavailable
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &timeout) || errors.As(err, &unavailable)
}

func scheduleSpec(e config.Every) client.ScheduleSpec {
	if e.Cron != "" {
		return client.ScheduleSpec{CronExpressions: []string{e.Cron}}
	}
	return client.ScheduleSpec{Intervals: []client.ScheduleIntervalSpec{{Every: e.Interval}}}
}

// catchupWindow: after an outage, a run missed by up to one period still happens (once: the
// overlap policy skips the rest); an older one would only repeat the next regular run.
func catchupWindow(e config.Every) time.Duration {
	if e.Cron != "" {
		return 24 * time.Hour
	}
	return max(e.Interval, time.Minute)
}

// signaler tells order workflows what the payment reconciler learned from the provider.
type signaler struct{ c client.Client }

var _ activities.Signaler = signaler{}

// PaymentResolved signals the order's payment-result, as the provider's webhook does.
func (s signaler) PaymentResolved(ctx context.Context, workflowID string, orderID int64, res activities.PaymentResult) error {
	err := s.c.SignalWorkflow(ctx, workflowID, "", workflows.SignalPaymentResult, workflows.PaymentSignal{
		EventID: "order-" + strconv.FormatInt(orderID, 10), IntentID: res.IntentID, Status: res.Status,
		Source: "payment reconciler"})
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return activities.ErrWorkflowGone
	}
	return err
}

// Running reports whether the workflow's latest run is still running.
func (s signaler) Running(ctx context.Context, workflowID string) (bool, error) {
	d, err := s.c.DescribeWorkflow(ctx, workflowID, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return d.RawResponse.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, nil
}

// registerJobs registers the activities of the scheduled jobs that the inventory does not
// already provide (their workflows are registerWorkflows').
func registerJobs(w sdkworker.Worker, c client.Client, d Deps) {
	var carts cart.Observer
	if d.Metrics != nil && d.Metrics.Jobs != nil {
		carts = d.Metrics.Jobs
	}
	w.RegisterActivity(&cart.Activities{Janitor: &cart.Janitor{Conn: d.Pool}, Observer: carts, Switches: d.Features})
	w.RegisterActivity(&activities.PaymentReconciler{Pool: d.Pool, Gateway: d.Gateway, Signaler: signaler{c: c},
		Observer: jobObserver(d), Inventory: d.Inventory, LineCancelWorkflowID: workflows.LineCancelWorkflowID})
}

var (
	_ activities.JobObserver = (*metrics.JobMetrics)(nil)
	_ cart.Observer          = (*metrics.JobMetrics)(nil)
)

func jobObserver(d Deps) activities.JobObserver {
	if d.Metrics == nil || d.Metrics.Jobs == nil {
		return nil
	}
	return d.Metrics.Jobs
}
