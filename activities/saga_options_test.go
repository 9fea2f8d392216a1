package activities_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/internal/dev/demo"
	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/pricing"
)

// TestCreateOrder_TheWorkersSagaSettings_HandedToTheSagaAndProviderWritten: the order's payment
// row names the worker's provider, not one a caller put in the input, and the result carries the
// worker's hold and step retry window for the workflow to run by.
func TestCreateOrder_TheWorkersSagaSettings_HandedToTheSagaAndProviderWritten(t *testing.T) {
	t.Parallel()
	ctx, pool := t.Context(), testenv.Pool(t)
	require.NoError(t, demo.Load(ctx, pool))
	saga := activities.SagaOptions{HoldTTL: 7 * time.Minute, StepRetryWindow: 42 * time.Second, Provider: "paysim"}
	a := &activities.Orders{Pool: pool, Saga: saga}
	quote := pricing.Quote{TotalMinor: 1000, Currency: "TRY", PriceVersion: "pv_1", Items: []pricing.Item{{SKUID: 71,
		SellerID: 42, Title: "S-71", Quantity: 1, UnitPriceMinor: 1000, LineTotalMinor: 1000, Currency: "TRY"}}}

	created, err := a.CreateOrder(ctx, activities.CreateOrderInput{UserID: 7, IdempotencyKey: "k1", RequestHash: "h1",
		WorkflowID: "wf", RunID: "run-1", AddressID: 1, Quote: quote, Provider: "named-by-an-earlier-api"})
	require.NoError(t, err)

	require.NotNil(t, created.Saga)
	assert.Equal(t, saga, *created.Saga)
	var provider string
	require.NoError(t, pool.QueryRow(ctx, `SELECT provider FROM payments WHERE order_id = $1`, created.OrderID).Scan(&provider))
	assert.Equal(t, "paysim", provider)
}
