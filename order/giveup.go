package order

import (
	"context"
	"fmt"

	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/inventory"
)

// Giving an order's stock and money back.
//
// The saga gives back step by step, each step a compensation it registered as it went (the
// reservation's release, a confirm's restock, the payment's reversal), stock before money, and
// then ends the order (Finish): it owns the order, so nobody ends it under it. Anyone else — the
// payment reconciler and the hold child, for an order whose workflow is gone; the plain benchmark,
// for orders that never had one — first wins the order by ending it (GiveUp), since its workflow
// may have confirmed it meanwhile, and only then gives back. Both sides run the same statements:
// inventory's Release and Restock, Transition, and the payment's Reverse at the provider, which is
// the caller's (this package never calls the provider).

// GaveBack is what GiveUp or GiveBack did.
type GaveBack struct {
	// Ended: this call ended the order (GiveUp).
	Ended bool
	// Released counts reservations given back from ACTIVE; Restocked those whose confirmed units
	// went back on the shelf.
	Released, Restocked int
}

// GiveUp ends an open order its own workflow will not end, as to (FAILED or CANCELLED) for code,
// and gives back the stock it holds (GiveBack). An order that has already ended is left as it is:
// Ended is false and nothing is given back here (whoever ended it gives back). The money the
// provider holds is the caller's to reverse once Ended.
func (s Store) GiveUp(ctx context.Context, orderID int64, to Status, code problem.Code,
	detail map[string]any) (GaveBack, error) {
	if !to.GaveUp() {
		return GaveBack{}, fmt.Errorf("order %d given up as %s: %w", orderID, to, ErrNotFinal)
	}
	ended, err := s.Transition(ctx, orderID, to, code, detail)
	if err != nil || !ended {
		return GaveBack{}, err
	}
	g, err := s.returnStock(ctx, orderID)
	g.Ended = true
	return g, err
}

// GiveBack gives back the stock of an order that gave up (FAILED or CANCELLED): its reservations
// still ACTIVE are released and its confirmed units put back on the shelf. An order that has not
// given up keeps its stock. Every step is conditional, so a repeat gives back nothing more.
func (s Store) GiveBack(ctx context.Context, orderID int64) (GaveBack, error) {
	o, err := s.q().GetOrder(ctx, orderID)
	if err != nil || !Status(o.Status).GaveUp() {
		return GaveBack{}, err
	}
	return s.returnStock(ctx, orderID)
}

// returnStock releases what the order still reserves, then puts back what it had confirmed (its
// workflow stopped between confirm and capture).
func (s Store) returnStock(ctx context.Context, orderID int64) (GaveBack, error) {
	var g GaveBack
	inv := inventory.New(s.Pool, nil, inventory.WithCombining(0))
	var err error
	if g.Released, err = inv.Release(ctx, orderID); err != nil {
		return g, err
	}
	g.Restocked, err = inv.Restock(ctx, orderID)
	return g, err
}
