package activities_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/internal/demo"
	"github.com/marketplace/checkout/internal/testenv"
)

// TestCheckPrices_OrderExists_KeepsTheOrdersPrices: when the step runs again for a request whose
// order exists (a worker died after the order was written, or support reset the workflow), the
// order's own prices stand, even though the catalog has moved on since.
func TestCheckPrices_OrderExists_KeepsTheOrdersPrices(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	require.NoError(t, demo.Load(ctx, pool))
	_, err := pool.Exec(ctx, `INSERT INTO carts (id, user_id, doc) VALUES ('u:7', 7, '{"items":[{"skuId":71,"sellerId":42,"quantity":2}]}')`)
	require.NoError(t, err)
	a := &activities.Orders{Pool: pool}

	first, err := a.CheckPrices(ctx, activities.CheckPricesInput{UserID: 7, IdempotencyKey: "k1"})
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "an empty priceVersion never matches")
	require.Equal(t, activities.ErrTypePriceChanged, appErr.Type())
	var d activities.PriceChangedDetails
	require.NoError(t, appErr.Details(&d))

	quote, err := a.CheckPrices(ctx, activities.CheckPricesInput{UserID: 7, IdempotencyKey: "k1", PriceVersion: d.PriceVersion})
	require.NoError(t, err)
	assert.Equal(t, first.TotalMinor, quote.TotalMinor)
	created, err := a.CreateOrder(ctx, activities.CreateOrderInput{UserID: 7, IdempotencyKey: "k1", RequestHash: "h1",
		WorkflowID: "wf", RunID: "run-1", AddressID: 1, Quote: quote, Provider: "paysim"})
	require.NoError(t, err)

	_, err = pool.Exec(ctx, `UPDATE skus SET price_minor = price_minor + 10000, price_version = price_version + 1 WHERE id = 71`)
	require.NoError(t, err)
	again, err := a.CheckPrices(ctx, activities.CheckPricesInput{UserID: 7, IdempotencyKey: "k1", PriceVersion: d.PriceVersion})
	require.NoError(t, err, "the order's prices were checked when it was made")
	assert.Equal(t, quote.TotalMinor, again.TotalMinor)
	assert.Equal(t, quote.PriceVersion, again.PriceVersion)
	require.Len(t, again.Items, 1)
	assert.Equal(t, int32(2), again.Items[0].Quantity)

	// The same run repeating CreateOrder owns the order; another run of a finished request does
	// not; a different request under the same key is refused.
	same, err := a.CreateOrder(ctx, activities.CreateOrderInput{UserID: 7, IdempotencyKey: "k1", RequestHash: "h1",
		WorkflowID: "wf", RunID: "run-1", AddressID: 1, Quote: quote, Provider: "paysim"})
	require.NoError(t, err)
	assert.Equal(t, created.OrderID, same.OrderID)
	assert.False(t, same.Existing)
	_, err = pool.Exec(ctx, `UPDATE orders SET status = 'FAILED' WHERE id = $1`, created.OrderID)
	require.NoError(t, err)
	later, err := a.CreateOrder(ctx, activities.CreateOrderInput{UserID: 7, IdempotencyKey: "k1", RequestHash: "h1",
		WorkflowID: "wf", RunID: "run-2", AddressID: 1, Quote: quote, Provider: "paysim"})
	require.NoError(t, err)
	assert.True(t, later.Existing)
	_, err = a.CreateOrder(ctx, activities.CreateOrderInput{UserID: 7, IdempotencyKey: "k1", RequestHash: "other",
		WorkflowID: "wf", RunID: "run-3", AddressID: 1, Quote: quote, Provider: "paysim"})
	require.True(t, errors.As(err, &appErr))
	assert.Equal(t, activities.ErrTypeKeyReused, appErr.Type())
}
