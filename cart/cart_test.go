package cart_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/marketplace/checkout/cart"
	"github.com/marketplace/checkout/internal/dev/demo"
	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/pricing"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func setup(t *testing.T) (*pgxpool.Pool, *cart.Store) {
	t.Helper()
	pool := testenv.Pool(t)
	require.NoError(t, demo.Load(context.Background(), pool))
	return pool, cart.NewStore(pool, cart.Limits{})
}

func scalar(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

func sellerOf(sku int64) int64 {
	for _, s := range demo.SKUs {
		if s.ID == sku {
			return s.SellerID
		}
	}
	return 0
}

func TestSetQuantity_LostRaces_NoWriteIsLost(t *testing.T) {
	t.Parallel()
	pool, store := setup(t)
	ctx := context.Background()
	owner := cart.Member(901)
	var wg sync.WaitGroup
	errs := make([]error, 20)
	for i := range 20 {
		wg.Go(func() {
			sku := int64(71 + i)
			_, errs[i] = store.SetQuantity(ctx, owner, sku, sellerOf(sku), 1, nil)
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	snap, err := cart.Load(ctx, pool, owner.CartID)
	require.NoError(t, err)
	assert.Len(t, snap.Doc.Items, 20)
	assert.EqualValues(t, 20, snap.Version, "one version per write")
}

func TestDocLines_PricedLikeTheOrder(t *testing.T) {
	t.Parallel()
	pool, store := setup(t)
	ctx := context.Background()
	owner := cart.Member(902)
	for _, sku := range []int64{77, 71} {
		_, err := store.SetQuantity(ctx, owner, sku, 42, 1, nil)
		require.NoError(t, err)
	}
	snap, err := cart.Load(ctx, pool, owner.CartID)
	require.NoError(t, err)
	assert.Equal(t, []pricing.Line{{SKUID: 77, Quantity: 1}, {SKUID: 71, Quantity: 1}}, snap.Doc.Lines())
}

// idleCarts writes four carts last touched 91 days ago and one touched now.
func idleCarts(t *testing.T, pool *pgxpool.Pool, store *cart.Store) {
	t.Helper()
	ctx := context.Background()
	_, err := store.SetQuantity(ctx, cart.Member(7), 71, 42, 2, nil) // non-empty member cart
	require.NoError(t, err)
	_, err = store.SetQuantity(ctx, cart.Member(8), 72, 42, 1, nil) // emptied member cart
	require.NoError(t, err)
	_, err = store.SetQuantity(ctx, cart.Member(8), 72, 42, 0, nil)
	require.NoError(t, err)
	_, err = store.SetQuantity(ctx, cart.Guest("guest-token-that-is-long-enough-1"), 73, 42, 1, nil)
	require.NoError(t, err)
	_, err = store.SetQuantity(ctx, cart.Member(9), 74, 42, 3, nil) // member cart in use
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE carts SET updated_at = now() - interval '91 days' WHERE id <> 'u:9'`)
	require.NoError(t, err)
}

func TestJanitor_DeleteIdle_RemovesIdleCartsAndAnnouncesAbandonedMemberCarts(t *testing.T) {
	t.Parallel()
	pool, store := setup(t)
	idleCarts(t, pool, store)
	j := &cart.Janitor{Conn: pool, BatchSize: 2}

	res, err := j.DeleteIdle(context.Background(), cart.DefaultIdleTTL)
	require.NoError(t, err)
	assert.Equal(t, cart.JanitorResult{Deleted: 3, Events: 1}, res)
	var ids []string
	rows, err := pool.Query(context.Background(), `SELECT id FROM carts ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	assert.Equal(t, []string{"u:9"}, ids, "the cart in use stays")

	var aggregate, event string
	var payload []byte
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT aggregate_id, event_type, payload FROM outbox_events WHERE aggregate_type = 'cart'`).Scan(&aggregate, &event, &payload))
	assert.Equal(t, "u:7", aggregate)
	assert.Equal(t, cart.EventCartAbandoned, event)
	var body struct {
		UserID int64       `json:"userId"`
		Items  []cart.Item `json:"items"`
	}
	require.NoError(t, json.Unmarshal(payload, &body))
	assert.EqualValues(t, 7, body.UserID)
	require.Len(t, body.Items, 1)
	assert.EqualValues(t, 71, body.Items[0].SKUID)

	again, err := j.DeleteIdle(context.Background(), cart.DefaultIdleTTL)
	require.NoError(t, err)
	assert.Zero(t, again, "a second run finds nothing")
	assert.EqualValues(t, 1, scalar(t, pool, `SELECT count(*) FROM outbox_events WHERE aggregate_type = 'cart'`))
}

func TestActivities_DeleteIdleCarts_RunsAsTemporalActivity(t *testing.T) {
	t.Parallel()
	pool, store := setup(t)
	idleCarts(t, pool, store)
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.RegisterActivity(&cart.Activities{Janitor: &cart.Janitor{Conn: pool}})

	val, err := env.ExecuteActivity("DeleteIdleCarts", cart.DeleteIdleCartsInput{})
	require.NoError(t, err)
	var res cart.JanitorResult
	require.NoError(t, val.Get(&res))
	assert.Equal(t, cart.JanitorResult{Deleted: 3, Events: 1}, res)
	assert.EqualValues(t, 1, scalar(t, pool, `SELECT count(*) FROM carts`))

	val, err = env.ExecuteActivity("DeleteIdleCarts", cart.DeleteIdleCartsInput{OlderThan: time.Nanosecond})
	require.NoError(t, err)
	require.NoError(t, val.Get(&res))
	assert.Equal(t, cart.JanitorResult{Deleted: 1, Events: 1}, res, "a shorter idle time reaches the fresh cart")
}

func TestViewer_LinesInDocumentOrder_WithPricesAndProjectedStock(t *testing.T) {
	t.Parallel()
	pool, store := setup(t)
	ctx := context.Background()
	owner := cart.Member(903)
	for _, sku := range []int64{81, 71, 77, 74} {
		_, err := store.SetQuantity(ctx, owner, sku, 42, 1, nil)
		require.NoError(t, err)
	}
	_, err := store.SetQuantity(ctx, owner, 71, 42, 3, nil) // an update keeps the line's place
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO sku_availability (sku_id, available) VALUES (81, 1), (71, 80)
		ON CONFLICT (sku_id) DO UPDATE SET available = EXCLUDED.available`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `DELETE FROM sku_availability WHERE sku_id IN (77, 74)`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE skus SET price_minor = 130000 WHERE id = 71`)
	require.NoError(t, err)

	v, err := cart.NewViewer(pool, 0).View(ctx, owner.CartID)
	require.NoError(t, err)
	assert.EqualValues(t, 5, v.Version)
	var order []int64
	for _, l := range v.Lines {
		order = append(order, l.SKUID)
	}
	assert.Equal(t, []int64{81, 71, 77, 74}, order)
	l := v.Lines[1]
	assert.EqualValues(t, 3, l.Quantity)
	assert.Equal(t, "1249.90", l.PriceAtAdd)
	assert.EqualValues(t, 130000, l.PriceMinor)
	assert.True(t, l.InCatalog)
	assert.True(t, l.Known)
	assert.EqualValues(t, 80, l.Available)
	assert.False(t, l.AddedAt.IsZero())
	assert.EqualValues(t, 1, v.Lines[0].Available)
	assert.False(t, v.Lines[2].Known, "no projection row")

	empty, err := cart.NewViewer(pool, 0).View(ctx, cart.MemberID(904))
	require.NoError(t, err)
	assert.Zero(t, empty.Version)
	assert.Empty(t, empty.Lines)
}

func TestViewer_Cache_ServesFiguresUntilTheyExpire_CartAlwaysFresh(t *testing.T) {
	t.Parallel()
	pool, store := setup(t)
	ctx := context.Background()
	owner := cart.Member(905)
	_, err := store.SetQuantity(ctx, owner, 71, 42, 1, nil)
	require.NoError(t, err)
	cachedViewer, uncached := cart.NewViewer(pool, time.Hour), cart.NewViewer(pool, 0)
	_, err = cachedViewer.View(ctx, owner.CartID) // fills the cache
	require.NoError(t, err)

	_, err = pool.Exec(ctx, `UPDATE skus SET price_minor = 1 WHERE id = 71`)
	require.NoError(t, err)
	_, err = store.SetQuantity(ctx, owner, 71, 42, 2, nil)
	require.NoError(t, err)

	v, err := cachedViewer.View(ctx, owner.CartID)
	require.NoError(t, err)
	assert.EqualValues(t, 2, v.Lines[0].Quantity, "the cart itself is read fresh")
	assert.EqualValues(t, 124990, v.Lines[0].PriceMinor, "the price comes from the cache until it expires")
	v, err = uncached.View(ctx, owner.CartID)
	require.NoError(t, err)
	assert.EqualValues(t, 1, v.Lines[0].PriceMinor, "without a cache the price is read now")
}
