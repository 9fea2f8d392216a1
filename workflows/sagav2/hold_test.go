package sagav2_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/workflows/sagav2"
)

// TestHold_ParentGoneAtExpiry_EndsOrderStockAndMoneyBack: the order's workflow was terminated
// (the signal to it fails); at the hold's expiry the hold releases what is reserved, fails the
// order, puts back what the order had already confirmed, and reverses the payment, in that order.
func TestHold_ParentGoneAtExpiry_EndsOrderStockAndMoneyBack(t *testing.T) {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(sagav2.HoldWorkflow)
	env.RegisterActivity(&activities.Orders{})
	env.RegisterActivity(&activities.Payments{})
	env.RegisterActivity(&activities.Inventory{})
	var steps []string
	step := func(name string) func(mock.Arguments) { return func(mock.Arguments) { steps = append(steps, name) } }
	env.OnActivity("Release", mock.Anything, mock.Anything).Return(0, nil).Run(step("release"))
	env.OnActivity("Transition", mock.Anything, mock.Anything).Return(true, nil).Run(step("fail order"))
	env.OnActivity("Restock", mock.Anything, mock.Anything).Return(1, nil).Run(step("restock"))
	env.OnActivity("Reverse", mock.Anything, mock.Anything).Return(activities.PaymentResult{Status: "REFUNDED"}, nil).
		Run(step("reverse payment"))
	env.OnSignalExternalWorkflow(mock.Anything, "order-u7-k1", "", sagav2.SignalHoldExpired, mock.Anything).
		Return(errors.New("workflow not found"))

	env.ExecuteWorkflow(sagav2.HoldWorkflow, sagav2.HoldInput{OrderID: 501, ExpiresAt: env.Now().Add(time.Minute),
		ParentWorkflowID: "order-u7-k1"})

	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	assert.Equal(t, []string{"release", "fail order", "restock", "reverse payment"}, steps)
}
