package activities_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/internal/demo"
	"github.com/marketplace/checkout/internal/testenv"
)

// TestCreateOrder_TheWorkersSagaSettings_HandedToTheSagaAndProviderWritten: the order's payment
// row names the worker's provider, not one a caller put in the input, and the result carries the
// worker's hold and step retry window for the workflow to run by.
func TestCreateOrder_TheWorkersSagaSettings_HandedToTheSagaAndProviderWritten(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	require.NoError(t, demo.Load(ctx, pool))
	_, err := pool.Exec(ctx, `INSERT INTO carts (id, user_id, doc) VALUES ('u:7', 7, '{"items":[{"skuId":71,"sellerId":42,"quantity":1}]}')`)
	require.NoError(t, err)
	saga := activities.SagaOptions{HoldTTL: 7 * time.Minute, StepRetryWindow: 42 * time.Second, Provider: "paysim"}
	a := &activities.Orders{Pool: pool, Saga: saga}
	_, err = a.CheckPrices(ctx, activities.CheckPricesInput{UserID: 7, IdempotencyKey: "k1"})
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "an empty priceVersion never matches")
	var d activities.PriceChangedDetails
	require.NoError(t, appErr.Details(&d))
	quote, err := a.CheckPrices(ctx, activities.CheckPricesInput{UserID: 7, IdempotencyKey: "k1", PriceVersion: d.PriceVersion})
	require.NoError(t, err)

	created, err := a.CreateOrder(ctx, activities.CreateOrderInput{UserID: 7, IdempotencyKey: "k1", RequestHash: "h1",
		WorkflowID: "wf", RunID: "run-1", AddressID: 1, Quote: quote, Provider: "named-by-an-earlier-api"})
	require.NoError(t, err)

	require.NotNil(t, created.Saga)
	assert.Equal(t, saga, *created.Saga)
	var provider string
	require.NoError(t, pool.QueryRow(ctx, `SELECT provider FROM payments WHERE order_id = $1`, created.OrderID).Scan(&provider))
	assert.Equal(t, "paysim", provider)
}
