package workflows_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/cart"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/workflows"
)

// jobCase is one scheduled job's workflow under the SDK test suite, its activity mocked.
type jobCase struct {
	name     string
	workflow any
	args     []any
	activity string
	result   any
	// want is the workflow's result (decoded into a value of the same type).
	want    any
	details string
}

func jobCases() []jobCase {
	return []jobCase{
		{name: "sweeper", workflow: workflows.SweeperWorkflow, args: []any{workflows.SweeperInput{}}, activity: "Sweep",
			result: inventory.SweepResult{Released: 3, Units: 5, Batches: 1, Orders: []int64{11, 12}, OldestAgeSeconds: 61},
			want: workflows.SweeperResult{Released: 3, Units: 5, Batches: 1, Orders: 2, OrderIDs: []int64{11, 12},
				OldestAgeSeconds: 61},
			details: "Released 3 expired reservation(s), 5 unit(s) of 2 order(s), in 1 batch(es); the oldest was 61s past its expiry"},
		{name: "reconciler", workflow: workflows.ReconcilerWorkflow, activity: "Reconcile",
			result: []inventory.Drift{{SKUID: 77, WarehouseID: 1, ReservedBefore: 3, ActiveSum: 2},
				{SKUID: 78, WarehouseID: 2, ReservedBefore: 0, ActiveSum: 4, ReleasedUnits: 1}},
			want: workflows.ReconcilerResult{Repaired: 2, Units: 5, ReleasedUnits: 1, Drifts: []inventory.Drift{
				{SKUID: 77, WarehouseID: 1, ReservedBefore: 3, ActiveSum: 2},
				{SKUID: 78, WarehouseID: 2, ReservedBefore: 0, ActiveSum: 4, ReleasedUnits: 1}}},
			details: "Repaired 2 drifted row(s), 5 unit(s) of drift: SKU 77 in warehouse 1: reserved 3, active 2; " +
				"SKU 78 in warehouse 2: reserved 0, active 4"},
		{name: "cart janitor", workflow: workflows.CartJanitorWorkflow,
			args: []any{workflows.CartJanitorInput{OlderThan: 90 * 24 * time.Hour}}, activity: "DeleteIdleCarts",
			result:  cart.JanitorResult{Deleted: 7, Events: 4},
			want:    cart.JanitorResult{Deleted: 7, Events: 4},
			details: "Deleted 7 idle cart(s); wrote 4 abandoned-cart event(s)"},
		{name: "payment reconciler", workflow: workflows.PaymentReconcilerWorkflow,
			args: []any{workflows.PaymentReconcilerInput{}}, activity: "ReconcilePayments",
			result: activities.ReconcilePaymentsResult{Checked: 3, Resolved: 2, NotFound: 1, Signalled: 2,
				ByStatus: []activities.StatusCount{{Status: "AUTHORIZED", Count: 1}, {Status: "DECLINED", Count: 1}}},
			want: activities.ReconcilePaymentsResult{Checked: 3, Resolved: 2, NotFound: 1, Signalled: 2,
				ByStatus: []activities.StatusCount{{Status: "AUTHORIZED", Count: 1}, {Status: "DECLINED", Count: 1}}},
			details: "Checked 3 payment(s): 2 resolved, 1 unknown to the provider, 0 failed (AUTHORIZED 1, DECLINED 1)"},
	}
}

func newJobEnv(t *testing.T) *testsuite.TestWorkflowEnvironment {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(workflows.SweeperWorkflow, workflow.RegisterOptions{Name: workflows.SweeperWorkflowName})
	env.RegisterWorkflowWithOptions(workflows.ReconcilerWorkflow, workflow.RegisterOptions{Name: workflows.ReconcilerWorkflowName})
	env.RegisterWorkflowWithOptions(workflows.CartJanitorWorkflow, workflow.RegisterOptions{Name: workflows.CartJanitorWorkflowName})
	env.RegisterWorkflowWithOptions(workflows.PaymentReconcilerWorkflow,
		workflow.RegisterOptions{Name: workflows.PaymentReconcilerWorkflowName})
	env.RegisterActivity(&activities.Inventory{})
	env.RegisterActivity(&cart.Activities{})
	env.RegisterActivity(&activities.PaymentReconciler{})
	return env
}

// currentDetails reads the one-line summary the UI shows for the run.
func currentDetails(t *testing.T, env *testsuite.TestWorkflowEnvironment) string {
	t.Helper()
	v, err := env.QueryWorkflow("__temporal_workflow_metadata")
	require.NoError(t, err)
	var md sdkpb.WorkflowMetadata
	require.NoError(t, v.Get(&md))
	return md.GetCurrentDetails()
}

func TestJobWorkflows_ReturnTheActivityFiguresAndShowThemInTheUI(t *testing.T) {
	for _, tc := range jobCases() {
		t.Run(tc.name, func(t *testing.T) {
			env := newJobEnv(t)
			calls := 0
			env.OnActivity(tc.activity, mock.Anything, mock.Anything).Maybe().Return(tc.result, nil).
				Run(func(mock.Arguments) { calls++ })
			env.OnActivity(tc.activity, mock.Anything).Maybe().Return(tc.result, nil).
				Run(func(mock.Arguments) { calls++ })
			env.ExecuteWorkflow(tc.workflow, tc.args...)

			require.True(t, env.IsWorkflowCompleted())
			require.NoError(t, env.GetWorkflowError())
			got := reflect.New(reflect.TypeOf(tc.want))
			require.NoError(t, env.GetWorkflowResult(got.Interface()))
			assert.Equal(t, tc.want, got.Elem().Interface())
			assert.Equal(t, 1, calls, "one activity run")
			assert.Equal(t, tc.details, currentDetails(t, env))
		})
	}
}

func TestJobWorkflows_ActivityKeepsFailing_RetriesBoundedThenRunFails(t *testing.T) {
	for _, tc := range jobCases() {
		t.Run(tc.name, func(t *testing.T) {
			env := newJobEnv(t)
			calls := 0
			boom := errors.New("database unreachable")
			zero := reflect.Zero(reflect.TypeOf(tc.result)).Interface()
			env.OnActivity(tc.activity, mock.Anything, mock.Anything).Maybe().Return(zero, boom).
				Run(func(mock.Arguments) { calls++ })
			env.OnActivity(tc.activity, mock.Anything).Maybe().Return(zero, boom).
				Run(func(mock.Arguments) { calls++ })
			env.ExecuteWorkflow(tc.workflow, tc.args...)

			require.True(t, env.IsWorkflowCompleted())
			err := env.GetWorkflowError()
			require.Error(t, err)
			var appErr *temporal.ApplicationError
			require.ErrorAs(t, err, &appErr)
			assert.Contains(t, appErr.Error(), "database unreachable")
			assert.Equal(t, 5, calls, "the retry policy is bounded")
			assert.Contains(t, currentDetails(t, env), "failed: database unreachable")
		})
	}
}

func TestSweeperWorkflow_ManyOrders_ResultListsOnlyTheFirst(t *testing.T) {
	env := newJobEnv(t)
	orders := make([]int64, 120)
	for i := range orders {
		orders[i] = int64(i + 1)
	}
	env.OnActivity("Sweep", mock.Anything, mock.Anything).Return(inventory.SweepResult{Released: 120, Units: 120,
		Batches: 1, Orders: orders}, nil)
	env.ExecuteWorkflow(workflows.SweeperWorkflow, workflows.SweeperInput{})

	require.NoError(t, env.GetWorkflowError())
	var res workflows.SweeperResult
	require.NoError(t, env.GetWorkflowResult(&res))
	assert.Equal(t, 120, res.Orders)
	assert.Len(t, res.OrderIDs, 50, "the result stays small in the history")
}
