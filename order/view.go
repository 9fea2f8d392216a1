package order

import (
	"context"
	"encoding/json"

	"github.com/jackc/pgx/v5"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/order/internal/orderstore"
)

// View is an order as its shopper and support read it: the row, its lines, the units cancelled
// after payment, where its stock is held or went, its payment and its timeline.
type View struct {
	Order Order
	Items []Item
	// Cancellations are units of lines cancelled after payment, each with its refund.
	Cancellations []LineCancellation
	Reservations  []inventory.Allocation
	// Payment is nil while the order has no payment row.
	Payment  *Payment
	Timeline []TimelineEntry
	// StaffActions are the staff actions on the order, each with the person who sent it.
	StaffActions []StaffActionEntry
}

// CancelledMinor is what the line cancellations took off the order: each is worth what it
// refunds, its units' price less their share of a coupon the order spent.
func (v View) CancelledMinor() int64 {
	var n int64
	for _, c := range v.Cancellations {
		n += c.AmountMinor
	}
	return n
}

// View reads an order as its shopper and support see it, the order and the rest of it in one
// round trip: its seven reads need nothing of one another, so they go to PostgreSQL in one batch.
// An order that does not exist is an error db.NotFound recognises; the caller decides who may see
// the order, from View.Order.
func (s Store) View(ctx context.Context, orderID int64) (View, error) {
	var v View
	found := false
	b := &pgx.Batch{}
	args := []any{orderID}
	db.QueueRow(b, orderstore.GetOrderSQL, args, func(r orderstore.Order, ok bool) { v.Order, found = Order(r), ok })
	db.QueueRows(b, orderstore.OrderItemsSQL, args, func(rows []orderstore.OrderItemsRow) {
		v.Items = make([]Item, len(rows))
		for i, r := range rows {
			v.Items[i] = Item(r)
		}
	})
	db.QueueRows(b, orderstore.LineCancellationsOfOrderSQL, args, func(rows []orderstore.LineCancellation) {
		v.Cancellations = make([]LineCancellation, len(rows))
		for i, r := range rows {
			v.Cancellations[i] = LineCancellation(r)
		}
	})
	var res inventory.Reservation
	inventory.QueueReservationOf(b, orderID, &res)
	db.QueueRow(b, orderstore.GetPaymentSQL, args, func(r orderstore.Payment, ok bool) {
		if ok {
			p := Payment(r)
			v.Payment = &p
		}
	})
	db.QueueRows(b, orderstore.OrderEventsSQL, args, func(rows []orderstore.OrderEventsRow) {
		for _, e := range rows {
			v.Timeline = append(v.Timeline, TimelineEntry(e))
		}
	})
	db.QueueRows(b, orderstore.StaffActionsOfOrderSQL, args, func(rows []orderstore.StaffActionsOfOrderRow) {
		for _, a := range rows {
			v.StaffActions = append(v.StaffActions, StaffActionEntry(a))
		}
	})
	if err := s.Pool.SendBatch(ctx, b).Close(); err != nil {
		return View{}, err
	}
	if !found {
		return View{}, pgx.ErrNoRows
	}
	v.Reservations = res.Allocations
	return v, nil
}

// shopperDetails are the timeline details a shopper sees: stable codes and statuses, and what a
// line cancellation took off the order and refunded. Raw errors (which may name hosts and
// databases), support's free-text reasons and internal ids stay in support's view and the logs.
var shopperDetails = map[string]bool{"status": true, "code": true, "step": true, "action": true,
	"skuId": true, "units": true, "refund": true, "currency": true, "restocked": true}

// ShopperDetail is a timeline entry's detail as the order's shopper sees it (nil: nothing to show).
func ShopperDetail(raw json.RawMessage) json.RawMessage {
	var d map[string]any
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil
	}
	for k := range d {
		if !shopperDetails[k] {
			delete(d, k)
		}
	}
	if len(d) == 0 {
		return nil
	}
	out, _ := json.Marshal(d)
	return out
}
