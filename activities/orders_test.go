package activities_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/internal/dev/demo"
	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/pricing"
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
	require.Equal(t, string(problem.PriceChanged), appErr.Type())
	d, _ := activities.DetailsOf[pricing.PriceChangedDetails](activities.Refusal(err))
	current := d.PriceVersion
	require.NotEmpty(t, current, "the refusal names the version to confirm")

	quote, err := a.CheckPrices(ctx, activities.CheckPricesInput{UserID: 7, IdempotencyKey: "k1", PriceVersion: current})
	require.NoError(t, err)
	assert.Equal(t, first.TotalMinor, quote.TotalMinor)
	created, err := a.CreateOrder(ctx, activities.CreateOrderInput{UserID: 7, IdempotencyKey: "k1", RequestHash: "h1",
		WorkflowID: "wf", RunID: "run-1", AddressID: 1, Quote: quote, Provider: "paysim"})
	require.NoError(t, err)

	_, err = pool.Exec(ctx, `UPDATE skus SET price_minor = price_minor + 10000, price_version = price_version + 1 WHERE id = 71`)
	require.NoError(t, err)
	again, err := a.CheckPrices(ctx, activities.CheckPricesInput{UserID: 7, IdempotencyKey: "k1", PriceVersion: current})
	require.NoError(t, err, "the order's prices were checked when it was made")
	assert.Equal(t, quote.TotalMinor, again.TotalMinor)
	assert.Equal(t, quote.PriceVersion, again.PriceVersion)
	require.Len(t, again.Items, 1)
	assert.Equal(t, int32(2), again.Items[0].Quantity)

	// The same run repeating CreateOrder owns the order while it is open; a finished order is no
	// run's to act on, neither another run's nor this run's repeating its first task after a worker
	// died; a different request under the same key is refused.
	same, err := a.CreateOrder(ctx, activities.CreateOrderInput{UserID: 7, IdempotencyKey: "k1", RequestHash: "h1",
		WorkflowID: "wf", RunID: "run-1", AddressID: 1, Quote: quote, Provider: "paysim"})
	require.NoError(t, err)
	assert.Equal(t, created.OrderID, same.OrderID)
	assert.False(t, same.Existing)
	_, err = pool.Exec(ctx, `UPDATE orders SET status = 'FAILED' WHERE id = $1`, created.OrderID)
	require.NoError(t, err)
	decided, err := a.CreateOrder(ctx, activities.CreateOrderInput{UserID: 7, IdempotencyKey: "k1", RequestHash: "h1",
		WorkflowID: "wf", RunID: "run-1", AddressID: 1, Quote: quote, Provider: "paysim"})
	require.NoError(t, err)
	assert.Equal(t, created.OrderID, decided.OrderID)
	assert.True(t, decided.Existing, "the run's first task, run again after it decided the order, leaves it as decided")
	later, err := a.CreateOrder(ctx, activities.CreateOrderInput{UserID: 7, IdempotencyKey: "k1", RequestHash: "h1",
		WorkflowID: "wf", RunID: "run-2", AddressID: 1, Quote: quote, Provider: "paysim"})
	require.NoError(t, err)
	assert.True(t, later.Existing)
	_, err = a.CreateOrder(ctx, activities.CreateOrderInput{UserID: 7, IdempotencyKey: "k1", RequestHash: "other",
		WorkflowID: "wf", RunID: "run-3", AddressID: 1, Quote: quote, Provider: "paysim"})
	require.True(t, errors.As(err, &appErr))
	assert.Equal(t, string(problem.IdempotencyKeyReused), appErr.Type())
}

// TestCreateOrder_OpenOrderCap_ConcurrentOrdersNeverPassIt: eight orders of one shopper written at
// once under a cap of 3 make exactly three rows; the others are refused before anything is
// written. A repeat of a request whose order exists still finds its order at the cap, and an
// order that leaves PENDING_PAYMENT frees a place.
func TestCreateOrder_OpenOrderCap_ConcurrentOrdersNeverPassIt(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	require.NoError(t, demo.Load(ctx, pool))
	a := &activities.Orders{Pool: pool, MaxOpenPerShopper: 3}
	quote := pricing.Quote{TotalMinor: 100, Currency: "TRY", PriceVersion: "pv",
		Items: []pricing.Item{{SKUID: 71, SellerID: 42, Title: "t", Quantity: 1, UnitPriceMinor: 100, Currency: "TRY"}}}
	create := func(key string) (activities.CreatedOrder, error) {
		return a.CreateOrder(ctx, activities.CreateOrderInput{UserID: 7, IdempotencyKey: key, RequestHash: "h-" + key,
			WorkflowID: "wf-" + key, RunID: "run-" + key, AddressID: 1, Quote: quote, Provider: "paysim"})
	}

	var wg sync.WaitGroup
	errs := make([]error, 8)
	orders := make([]activities.CreatedOrder, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			orders[i], errs[i] = create(fmt.Sprintf("k%d", i))
		}()
	}
	wg.Wait()
	created, refused := 0, 0
	var first string
	for i, err := range errs {
		var appErr *temporal.ApplicationError
		switch {
		case err == nil:
			created++
			first = fmt.Sprintf("k%d", i)
		case errors.As(err, &appErr) && appErr.Type() == string(problem.TooManyOpenOrders):
			refused++
			d, ok := activities.DetailsOf[activities.TooManyOpenOrdersDetails](activities.Refusal(err))
			require.True(t, ok)
			assert.Equal(t, 3, d.Limit)
			assert.Equal(t, int64(3), d.Pending)
		default:
			t.Fatalf("order %d: %v", i, err)
		}
	}
	assert.Equal(t, 3, created, "exactly the cap")
	assert.Equal(t, 5, refused)
	var rows, payments int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), (SELECT count(*) FROM payments p JOIN orders o ON o.id = p.order_id WHERE o.user_id = 7)
		FROM orders WHERE user_id = 7`).Scan(&rows, &payments))
	assert.Equal(t, 3, rows, "a refused order writes no row")
	assert.Equal(t, 3, payments)

	again, err := create(first)
	require.NoError(t, err, "a repeat of a request whose order exists is never refused by the cap")
	assert.NotZero(t, again.OrderID)

	_, err = pool.Exec(ctx, `UPDATE orders SET status = 'CANCELLED' WHERE user_id = 7 AND idempotency_key = $1`, first)
	require.NoError(t, err)
	_, err = create("k-after-cancel")
	require.NoError(t, err, "a cancelled order frees a place")
	_, err = create("k-one-too-many")
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr))
	assert.Equal(t, string(problem.TooManyOpenOrders), appErr.Type())
	assert.True(t, appErr.NonRetryable())

	off := &activities.Orders{Pool: pool}
	_, err = off.CreateOrder(ctx, activities.CreateOrderInput{UserID: 7, IdempotencyKey: "k-no-cap", RequestHash: "h",
		WorkflowID: "wf", RunID: "run", AddressID: 1, Quote: quote, Provider: "paysim"})
	assert.NoError(t, err, "0 turns the cap off")
}
