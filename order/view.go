package order

import (
	"context"
	"encoding/json"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/inventory"
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

// View reads the rest of an order its caller has read (and may see).
func (s Store) View(ctx context.Context, o Order) (View, error) {
	d, q := DataOf(s.Pool), s.q()
	v := View{Order: o}
	var err error
	if v.Items, err = d.OrderItems(ctx, o.ID); err != nil {
		return v, err
	}
	if v.Cancellations, err = d.LineCancellationsOfOrder(ctx, o.ID); err != nil {
		return v, err
	}
	res, err := inventory.ReservationOf(ctx, s.Pool, o.ID)
	if err != nil {
		return v, err
	}
	v.Reservations = res.Allocations
	pay, err := d.GetPayment(ctx, o.ID)
	switch {
	case err == nil:
		v.Payment = &pay
	case !db.NotFound(err):
		return v, err
	}
	events, err := q.OrderEvents(ctx, o.ID)
	if err != nil {
		return v, err
	}
	for _, e := range events {
		v.Timeline = append(v.Timeline, TimelineEntry(e))
	}
	actions, err := q.StaffActionsOfOrder(ctx, o.ID)
	for _, a := range actions {
		v.StaffActions = append(v.StaffActions, StaffActionEntry(a))
	}
	return v, err
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
