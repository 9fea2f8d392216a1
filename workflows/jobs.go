package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/cart"
	"github.com/marketplace/checkout/inventory"
)

// The scheduled jobs. Each run is one activity whose work is idempotent and safe to run twice at
// once (SKIP LOCKED batches, conditional updates, lookups by idempotency key), so a retry, an
// overlapping manual trigger or a second worker changes nothing twice. Each run shows a one-line
// summary in the UI and returns its figures; the activities also count them as metrics.

var (
	cartA     *cart.Activities
	payReconA *activities.PaymentReconciler
)

// SweeperInput sizes a sweep; zero values mean the activity's defaults.
type SweeperInput struct {
	BatchSize int32 `json:"batchSize,omitempty"`
}

// SweeperResult is what one run of the reservation sweeper released.
type SweeperResult struct {
	Released int `json:"released"`
	Units    int `json:"units"`
	Batches  int `json:"batches"`
	// Orders counts the orders whose reservations were released; OrderIDs lists the first ones.
	Orders   int     `json:"orders"`
	OrderIDs []int64 `json:"orderIds,omitempty"`
	// OldestAgeSeconds is how long past its expiry the oldest released reservation had waited.
	OldestAgeSeconds float64 `json:"oldestAgeSeconds"`
}

// SweeperWorkflow releases expired ACTIVE reservations in SKIP LOCKED batches until none are
// left: the backstop of the hold-expiry children, for a hold that was lost or terminated.
func SweeperWorkflow(ctx workflow.Context, in SweeperInput) (SweeperResult, error) {
	var res inventory.SweepResult
	err := workflow.ExecuteActivity(jobContext(ctx, 5*time.Minute), stockA.Sweep,
		activities.SweepInput{BatchSize: in.BatchSize}).Get(ctx, &res)
	if err != nil {
		return SweeperResult{}, jobFailed(ctx, "Sweep", err)
	}
	out := SweeperResult{Released: res.Released, Units: res.Units, Batches: res.Batches, Orders: len(res.Orders),
		OrderIDs: firstN(res.Orders, 50), OldestAgeSeconds: res.OldestAgeSeconds}
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("Released %d expired reservation(s), %d unit(s) of %d order(s), "+
		"in %d batch(es); the oldest was %.0fs past its expiry", out.Released, out.Units, out.Orders, out.Batches,
		out.OldestAgeSeconds))
	return out, nil
}

// ReconcilerResult is what one run of the inventory reconciler repaired.
type ReconcilerResult struct {
	// Repaired counts the drifted rows; each is also a row in inventory_drift_events.
	Repaired int `json:"repaired"`
	// Units is the total drift, |reserved - sum of ACTIVE reservations|, over the repaired rows.
	Units int `json:"units"`
	// ReleasedUnits were released because the ACTIVE reservations exceeded on_hand.
	ReleasedUnits int               `json:"releasedUnits"`
	Drifts        []inventory.Drift `json:"drifts,omitempty"`
}

// ReconcilerWorkflow finds inventory rows whose reserved differs from the sum of their ACTIVE
// reservations, repairs them and records each drift.
func ReconcilerWorkflow(ctx workflow.Context) (ReconcilerResult, error) {
	var drifts []inventory.Drift
	if err := workflow.ExecuteActivity(jobContext(ctx, 5*time.Minute), stockA.Reconcile).Get(ctx, &drifts); err != nil {
		return ReconcilerResult{}, jobFailed(ctx, "Reconciliation", err)
	}
	out := ReconcilerResult{Repaired: len(drifts), Drifts: firstN(drifts, 50)}
	rows := make([]string, 0, min(len(drifts), 5))
	for i, d := range drifts {
		out.Units += absInt(int(d.ReservedBefore) - int(d.ActiveSum))
		out.ReleasedUnits += int(d.ReleasedUnits)
		if i < 5 {
			rows = append(rows, fmt.Sprintf("SKU %d in warehouse %d: reserved %d, active %d",
				d.SKUID, d.WarehouseID, d.ReservedBefore, d.ActiveSum))
		}
	}
	line := fmt.Sprintf("Repaired %d drifted row(s), %d unit(s) of drift", out.Repaired, out.Units)
	if len(rows) > 0 {
		line += ": " + strings.Join(rows, "; ")
	}
	workflow.SetCurrentDetails(ctx, line)
	return out, nil
}

// CartJanitorInput is the idle lifetime of a cart; zero means cart.DefaultIdleTTL.
type CartJanitorInput struct {
	OlderThan time.Duration `json:"olderThan,omitempty"`
}

// CartJanitorWorkflow deletes carts idle for in.OlderThan and writes an abandoned-cart outbox
// event for each non-empty member cart it deletes.
func CartJanitorWorkflow(ctx workflow.Context, in CartJanitorInput) (cart.JanitorResult, error) {
	var res cart.JanitorResult
	err := workflow.ExecuteActivity(jobContext(ctx, 30*time.Minute), cartA.DeleteIdleCarts,
		cart.DeleteIdleCartsInput{OlderThan: in.OlderThan}).Get(ctx, &res)
	if err != nil {
		return res, jobFailed(ctx, "Cart clean-up", err)
	}
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("Deleted %d idle cart(s); wrote %d abandoned-cart event(s)",
		res.Deleted, res.Events))
	return res, nil
}

// PaymentReconcilerInput sizes a run; zero values mean the activity's defaults.
type PaymentReconcilerInput struct {
	PendingAfter time.Duration `json:"pendingAfter,omitempty"`
	// OrderID limits the run to one order (a webhook for a closed order starts such a run).
	OrderID int64 `json:"orderId,omitempty"`
}

// PaymentReconcilerWorkflow resolves the payments of open orders whose outcome is UNKNOWN (or
// PENDING for too long) by asking the provider with the idempotency key, signals each order's
// workflow with the answer and mirrors it into the payments row.
func PaymentReconcilerWorkflow(ctx workflow.Context, in PaymentReconcilerInput) (activities.ReconcilePaymentsResult, error) {
	var res activities.ReconcilePaymentsResult
	err := workflow.ExecuteActivity(jobContext(ctx, 5*time.Minute), payReconA.ReconcilePayments,
		activities.ReconcilePaymentsInput{PendingAfter: in.PendingAfter, OrderID: in.OrderID}).Get(ctx, &res)
	if err != nil {
		return res, jobFailed(ctx, "Payment reconciliation", err)
	}
	line := fmt.Sprintf("Checked %d payment(s): %d resolved, %d unknown to the provider, %d failed",
		res.Checked, res.Resolved, res.NotFound, res.Failed)
	if res.Reversed > 0 {
		line += fmt.Sprintf("; %d late payment(s) of closed orders reversed", res.Reversed)
	}
	if len(res.ByStatus) > 0 {
		statuses := make([]string, len(res.ByStatus))
		for i, c := range res.ByStatus {
			statuses[i] = fmt.Sprintf("%s %d", c.Status, c.Count)
		}
		line += " (" + strings.Join(statuses, ", ") + ")"
	}
	workflow.SetCurrentDetails(ctx, line)
	return res, nil
}

// jobContext gives a job's activity its timeout and a bounded retry: a job that keeps failing
// fails its run (visible in the UI and in checkout_job_runs_total), and the next scheduled run
// starts afresh.
func jobContext(ctx workflow.Context, startToClose time.Duration) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: startToClose,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2,
			MaximumInterval: 30 * time.Second, MaximumAttempts: jobAttempts},
	})
}

// jobAttempts bounds the attempts of a job's activity within one run.
const jobAttempts = 5

func jobFailed(ctx workflow.Context, job string, err error) error {
	workflow.SetCurrentDetails(ctx, job+" failed: "+errorText(err))
	return err
}

func firstN[T any](s []T, n int) []T {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func absInt(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
