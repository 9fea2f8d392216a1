package inventory

import (
	"context"
	"errors"
	"fmt"

	"github.com/marketplace/checkout/inventory/internal/stockstore"
)

// Combined confirms: every paid order's confirm changes its SKU's inventory row, so on a hot SKU
// confirms queue on that row as reservations do. With confirm combining on, a confirm that finds
// the combiner idle (nothing in flight, nothing waiting: low load) goes at once on its own, as
// with combining off, and the confirms that come meanwhile wait for it. Otherwise Confirm learns
// the SKUs of the order's ACTIVE reservations (a plain read, no lock) and goes through the combiner
// (see combiner.go): the confirms that wait while a batch of their SKU is in flight go together as
// the next batch, one confirm_orders statement that decides each order on its own, exactly as the
// one-order transaction (Engine.confirmOnce) does, and updates each inventory row once.

// confirmCombined confirms the order through the combiner. fallback means the caller confirms
// the order on its own: the order has nothing ACTIVE to combine (a repeat, a released order, no
// reservation, all of which the one-order path answers without touching an inventory row), or
// its batch failed.
func (e *Engine) confirmCombined(ctx context.Context, orderID int64) (res ConfirmResult, fallback bool, err error) {
	rows, err := e.q.ReservationsOfOrder(ctx, orderID)
	if err != nil {
		return res, false, err
	}
	var skus []int64
	for _, r := range rows {
		// Rows come in SKU order; an order's reservations never change SKU.
		if r.Status == StatusActive && (len(skus) == 0 || skus[len(skus)-1] != r.SkuID) {
			skus = append(skus, r.SkuID)
		}
	}
	if len(skus) == 0 {
		return res, true, nil
	}
	return e.confirmComb.submit(ctx, orderID, skus, struct{}{})
}

// confirmAnswer says whether err is a confirm's answer about its order rather than a failure.
func confirmAnswer(err error) bool {
	var notActive *NotActiveError
	return err == nil || errors.Is(err, ErrNoReservation) || errors.As(err, &notActive)
}

// runConfirmBatch confirms one batch in one transaction and hands each caller its order's answer.
// A batch of several orders that fails as a whole (rolled back: a row held elsewhere past the
// lock timeout, a broken connection) hands nobody anything and returns its orders, to be queued
// again each alone, as runReserveBatch does: one order's failure never fails another's confirm.
func (e *Engine) runConfirmBatch(ctx context.Context, batch []*pending[struct{}, ConfirmResult]) (requeue []*pending[struct{}, ConfirmResult], err error) {
	if len(batch) == 1 {
		// Alone: the one-order transaction, on the caller's trace.
		b := batch[0]
		res, err := e.confirmOnce(ctx, b.order, nil)
		if !confirmAnswer(err) {
			b.done <- outcome[ConfirmResult]{fallback: true}
			return nil, err
		}
		b.done <- outcome[ConfirmResult]{val: res, err: err}
		return nil, nil
	}
	ids := make([]int64, len(batch))
	for i, b := range batch {
		ids[i] = b.order
	}
	// One statement changes several orders' stock: it carries no one caller's trace.
	rows, err := stockstore.New(e.pool).ConfirmOrders(ctx, ids)
	if err != nil {
		// Rolled back as a whole (or, if the commit's answer was lost, committed: confirming the
		// order again finds it confirmed and answers Already).
		return batch, err
	}
	answers := make(map[int64]outcome[ConfirmResult], len(rows))
	for _, r := range rows {
		var o outcome[ConfirmResult]
		switch r.Kind {
		case "confirmed":
			o.val.Confirmed = int(r.Reservations)
		case "already":
			o.val.Already = true
		case "not_active":
			o.err = &NotActiveError{OrderID: r.OrderID, Released: int(r.Released)}
		case "none":
			o.err = ErrNoReservation
		default:
			o.err = fmt.Errorf("confirm order %d: unknown answer %q", r.OrderID, r.Kind)
		}
		answers[r.OrderID] = o
	}
	for _, b := range batch {
		o, ok := answers[b.order]
		if !ok {
			o = outcome[ConfirmResult]{err: fmt.Errorf("confirm order %d: no result in its batch", b.order)}
		}
		b.done <- o
	}
	return nil, nil
}
