package activities

import (
	"context"
	"time"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/order"
)

// HoldExtension is how a shopper may extend an order's hold: by By, at most Max times, and only
// within the hold's last Window. The worker's settings (HOLD_EXTEND_*) decide it.
type HoldExtension struct {
	By     time.Duration
	Window time.Duration
	Max    int
}

// HoldRefusal is why the hold cannot be extended now. Reason is the refusal's code:
// ORDER_NOT_PENDING_PAYMENT, HOLD_EXTENSION_USED, HOLD_EXTENSION_TOO_EARLY or HOLD_EXPIRED.
type HoldRefusal struct {
	Reason problem.Code `json:"reason"`
	Status string       `json:"status,omitempty"`
	// ExtendableFrom is when the hold enters its last Window (with HOLD_EXTENSION_TOO_EARLY).
	ExtendableFrom *time.Time `json:"extendableFrom,omitempty"`
	Max            int        `json:"max,omitempty"`
}

// Problem is the refusal as a coded error: its reason is the code, the rest its details.
func (r HoldRefusal) Problem(message string) *problem.Error {
	p := problem.New(r.Reason, message)
	if d := (HoldDetails{ExtendableFrom: r.ExtendableFrom, Max: r.Max, Status: r.Status}); d != (HoldDetails{}) {
		p = p.WithDetails(d)
	}
	return p
}

// HoldDetails are the details of a refused extension (HoldRefusal.Problem).
type HoldDetails struct {
	ExtendableFrom *time.Time `json:"extendableFrom,omitempty"`
	Max            int        `json:"max,omitempty"`
	Status         string     `json:"status,omitempty"`
}

// ExtendedHold is the hold after an extension.
type ExtendedHold struct {
	ExpiresAt      time.Time `json:"expiresAt"`
	ExtensionsLeft int       `json:"extensionsLeft"`
}

// ExtendHold moves the order's hold by the extension's length: its reservations' expiry and the
// order's, in one conditional statement under the reservations' row locks, with a timeline entry
// in the same transaction. A refusal is a coded error (HoldRefusal) whose code is the reason;
// nothing moves then.
func (a *Orders) ExtendHold(ctx context.Context, orderID int64) (ExtendedHold, error) {
	moved, err := a.extendHold(ctx, orderID)
	return moved, failed(err, "extending the hold of order %d", orderID)
}

func (a *Orders) extendHold(ctx context.Context, orderID int64) (ExtendedHold, error) {
	ext := a.HoldExtension
	tx, err := db.Begin(ctx, a.Pool)
	if err != nil {
		return ExtendedHold{}, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit this is a no-op
	active, err := inventory.LockReservations(ctx, tx, orderID)
	if err != nil {
		return ExtendedHold{}, err
	}
	q := order.DataOf(tx)
	moved, err := q.ExtendOrderHold(ctx, order.HoldExtension{OrderID: orderID, BySeconds: ext.By.Seconds(),
		WindowSeconds: ext.Window.Seconds(), MaxExtensions: int32(ext.Max)})
	switch {
	case db.NotFound(err):
		return ExtendedHold{}, a.holdRefusal(ctx, q, orderID)
	case err != nil:
		return ExtendedHold{}, err
	case int(moved.Moved) != active:
		// Not reachable under the row locks; refused rather than trusted.
		return ExtendedHold{}, a.holdRefusal(ctx, q, orderID)
	}
	if err := q.Note(ctx, orderID, "hold extended", map[string]any{
		"expiresAt": moved.HoldExpiresAt, "by": ext.By.String()}); err != nil {
		return ExtendedHold{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return ExtendedHold{}, err
	}
	return ExtendedHold{ExpiresAt: moved.HoldExpiresAt, ExtensionsLeft: max(ext.Max-int(moved.HoldExtensions), 0)}, nil
}

// holdRefusal explains a refused extension from the order's hold as it stands.
func (a *Orders) holdRefusal(ctx context.Context, q order.Data, orderID int64) error {
	st, err := q.OrderHoldState(ctx, orderID)
	if db.NotFound(err) {
		return RefusalError(problem.Wrap(err, problem.NotFound, "order not found"))
	}
	if err != nil {
		return err
	}
	refusal := HoldRefusal{Status: st.Status, Max: a.HoldExtension.Max}
	var msg string
	switch {
	case order.Status(st.Status) != order.StatusPendingPayment:
		refusal.Reason, msg = problem.OrderNotPendingPayment, "the order is not waiting for its payment"
	case int(st.HoldExtensions) >= a.HoldExtension.Max:
		refusal.Reason, msg = problem.HoldExtensionUsed, "the hold has been extended as many times as allowed"
	case st.HoldExpiresAt == nil || !st.HoldExpiresAt.After(st.Now) || st.Lapsed:
		refusal.Reason, msg = problem.HoldExpired, "the hold has already expired"
	default:
		from := st.HoldExpiresAt.Add(-a.HoldExtension.Window)
		refusal.Reason, msg = problem.HoldExtensionTooEarly, "the hold can be extended only in its last "+
			a.HoldExtension.Window.String()
		refusal.ExtendableFrom = &from
	}
	return RefusalError(refusal.Problem(msg))
}

// ReleaseExpired is the hold's expiry: it releases what has expired of the order's stock and says
// until when the rest is held, if the shopper extended the hold (inventory.Engine.ReleaseExpired).
func (a *Inventory) ReleaseExpired(ctx context.Context, orderID int64) (inventory.Expiry, error) {
	res, err := a.Engine.ReleaseExpired(ctx, orderID)
	return res, asApplicationError(err, "releasing the expired stock of order %d", orderID)
}
