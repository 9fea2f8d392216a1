package cart

import (
	"context"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/marketplace/checkout/cart/internal/cartstore"
	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/features"
)

// EventCartAbandoned is the outbox event of a non-empty member cart the janitor removed: the
// notification system may remind the shopper. Guest carts have nobody to remind.
const EventCartAbandoned = "cart.abandoned"

// DefaultIdleTTL is how long an untouched cart lives.
const DefaultIdleTTL = 90 * 24 * time.Hour

// Janitor removes idle carts.
type Janitor struct {
	Conn      db.DBTX
	BatchSize int32 // carts per statement; 0 means 500
}

// JanitorResult counts what one run removed. Deferred: the run did nothing because ops have the
// abandoned_cart_events switch off; the carts wait for a run with it on.
type JanitorResult struct {
	Deleted  int  `json:"deleted"`
	Events   int  `json:"events"`
	Deferred bool `json:"deferred,omitempty"`
}

// DeleteIdle deletes carts untouched for olderThan (by the database clock), in batches, each batch
// one statement that also writes the abandoned-cart events, so an event exists exactly when its
// cart was deleted. Running it twice, or on two workers at once, deletes each cart once.
func (j *Janitor) DeleteIdle(ctx context.Context, olderThan time.Duration) (JanitorResult, error) {
	batch := j.BatchSize
	if batch <= 0 {
		batch = 500
	}
	var res JanitorResult
	for {
		row, err := cartstore.New(j.Conn).DeleteIdleCarts(ctx, olderThan.Seconds(), batch, EventCartAbandoned)
		if err != nil {
			return res, err
		}
		res.Deleted += int(row.Deleted)
		res.Events += int(row.Events)
		if activity.IsActivity(ctx) {
			activity.RecordHeartbeat(ctx, res)
		}
		if row.Deleted < batch {
			return res, nil
		}
	}
}

// Activities are the cart's Temporal activities; the cart clean-up schedule runs DeleteIdleCarts.
type Activities struct {
	Janitor *Janitor
	// Observer receives each clean-up's figures (metrics); nil means none.
	Observer Observer
	// Switches are the feature switches; nil means every one is on.
	Switches Switches
}

// Switches say whether a feature switch is on: the clean-up defers its runs while
// abandoned-cart events are off.
type Switches interface {
	Enabled(ctx context.Context, n features.Name) bool
}

var _ Switches = (*features.Switches)(nil)

// Observer receives what each clean-up removed, and whether it failed.
type Observer interface {
	CartsCleaned(deleted, events int, err error)
}

// DeleteIdleCartsInput sizes a clean-up; a zero OlderThan means DefaultIdleTTL.
type DeleteIdleCartsInput struct {
	OlderThan time.Duration `json:"olderThan"`
}

// DeleteIdleCarts deletes idle carts and writes abandoned-cart events. It is idempotent: a retry
// finds only what is still idle. While ops have the abandoned_cart_events switch off (load on
// PostgreSQL: every deleted cart is a write, an event and a cart-change notice), it defers: it
// deletes nothing, so no cart goes without its event, and the next run with the switch on does it.
func (a *Activities) DeleteIdleCarts(ctx context.Context, in DeleteIdleCartsInput) (JanitorResult, error) {
	if a.Switches != nil && !a.Switches.Enabled(ctx, features.AbandonedCartEvents) {
		activity.GetLogger(ctx).Info("cart clean-up deferred: the abandoned_cart_events switch is off")
		return JanitorResult{Deferred: true}, nil
	}
	if in.OlderThan <= 0 {
		in.OlderThan = DefaultIdleTTL
	}
	res, err := a.Janitor.DeleteIdle(ctx, in.OlderThan)
	if a.Observer != nil {
		a.Observer.CartsCleaned(res.Deleted, res.Events, err)
	}
	return res, err
}
