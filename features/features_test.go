package features_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/features"
	"github.com/marketplace/checkout/internal/dev/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var quiet = slog.New(slog.NewJSONHandler(io.Discard, nil))

// handClock is a clock the test moves.
type handClock struct{ t time.Time }

func (c *handClock) now() time.Time { return c.t }

func newSwitches(pool *pgxpool.Pool, c *handClock) *features.Switches {
	return features.New(pool, features.Options{TTL: time.Second, Log: quiet, Now: c.now})
}

func TestSwitches_OnUntilSet_SetRecordsWhoAndWhen_ARepeatChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := features.New(testenv.Pool(t), features.Options{TTL: time.Second, Log: quiet})
	states, err := s.States(ctx)
	require.NoError(t, err)
	require.Len(t, states, len(features.All))
	for _, st := range states {
		assert.True(t, st.Enabled, "%s is on until set", st.Name)
		assert.Nil(t, st.UpdatedBy)
		assert.True(t, s.Enabled(ctx, st.Name))
	}

	changed, err := s.Set(ctx, map[features.Name]bool{features.CartStockHints: false, features.AbandonedCartEvents: true}, "ops:901")
	require.NoError(t, err)
	assert.Equal(t, []features.Name{features.AbandonedCartEvents, features.CartStockHints}, changed,
		"a row is written for each; both are changes from nothing")
	assert.False(t, s.Enabled(ctx, features.CartStockHints), "this process sees its own change at once")
	assert.True(t, s.Enabled(ctx, features.AbandonedCartEvents))

	changed, err = s.Set(ctx, map[features.Name]bool{features.CartStockHints: false}, "ops:902")
	require.NoError(t, err)
	assert.Empty(t, changed, "already off: nothing changes")
	states, err = s.States(ctx)
	require.NoError(t, err)
	for _, st := range states {
		if st.Name == features.CartStockHints {
			assert.False(t, st.Enabled)
			require.NotNil(t, st.UpdatedBy)
			assert.Equal(t, "ops:901", *st.UpdatedBy, "who last changed it, not who repeated it")
			assert.NotNil(t, st.UpdatedAt)
		}
	}

	_, err = s.Set(ctx, map[features.Name]bool{"free_shipping": false}, "ops:901")
	assert.ErrorContains(t, err, "not a switch")
}

// TestSwitches_AnotherProcessSeesTheChangeWhenItsCacheEnds: two processes on one database; a
// change made through one reaches the other at its next read, once its cached state is TTL old.
func TestSwitches_AnotherProcessSeesTheChangeWhenItsCacheEnds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.DatabaseURL(t)
	c := &handClock{t: time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)}
	a, b := newSwitches(testenv.PoolOn(t, url, 4), c), newSwitches(testenv.PoolOn(t, url, 4), c)
	require.True(t, b.Enabled(ctx, features.PreviewStockWarnings), "b reads: on")

	_, err := a.Set(ctx, map[features.Name]bool{features.PreviewStockWarnings: false}, "ops:901")
	require.NoError(t, err)
	assert.True(t, b.Enabled(ctx, features.PreviewStockWarnings), "b still trusts what it read")
	c.t = c.t.Add(time.Second)
	assert.False(t, b.Enabled(ctx, features.PreviewStockWarnings), "b read again: off")
	assert.Equal(t, map[string]bool{"cart_stock_hints": true, "preview_stock_warnings": false, "abandoned_cart_events": true},
		b.Snapshot())

	_, err = b.Set(ctx, map[features.Name]bool{features.PreviewStockWarnings: true}, "ops:902")
	require.NoError(t, err)
	c.t = c.t.Add(time.Second)
	assert.True(t, a.Enabled(ctx, features.PreviewStockWarnings), "and back")
}

// TestSwitches_DatabaseUnreachable_TheLastStateHolds: a process that cannot read the switches
// keeps what it read last, instead of failing or flipping back to the defaults.
func TestSwitches_DatabaseUnreachable_TheLastStateHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.DatabaseURL(t)
	c := &handClock{t: time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)}
	readerPool := testenv.PoolOn(t, url, 4)
	ops, reader := newSwitches(testenv.PoolOn(t, url, 4), c), newSwitches(readerPool, c)
	_, err := ops.Set(ctx, map[features.Name]bool{features.AbandonedCartEvents: false}, "ops:901")
	require.NoError(t, err)
	require.False(t, reader.Enabled(ctx, features.AbandonedCartEvents))

	readerPool.Close()
	c.t = c.t.Add(time.Minute)
	assert.False(t, reader.Enabled(ctx, features.AbandonedCartEvents), "still off")
	assert.True(t, reader.Enabled(ctx, features.CartStockHints))
}
