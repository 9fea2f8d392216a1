package cart

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/inventory"
)

// Outcomes of a merge.
const (
	MergeMerged        = "MERGED"         // this call merged the guest cart
	MergeAlreadyMerged = "ALREADY_MERGED" // an earlier call did; nothing changed now
	MergeNoGuestCart   = "NO_GUEST_CART"  // no cart for that guest token; nothing changed
)

// Adjustment tells the shopper how a guest line fared in the merge.
type Adjustment struct {
	SKUID     int64  `json:"skuId"`
	Requested int32  `json:"requested"`
	Quantity  int32  `json:"quantity"`
	Reason    string `json:"reason"` // a Limit* name, or "SKU_NOT_FOUND"
}

// MergeResult is the member cart after a merge, and what the merge did.
type MergeResult struct {
	Cart        Snapshot
	Outcome     string
	Adjustments []Adjustment
}

// Merge adds a guest cart into the user's cart after login: quantities of the same SKU are summed
// and clipped to the SKU's maxPerOrder and the per-line cap, and the guest cart is marked merged.
// The guest cart's row lock serialises merges of one guest cart, and the merged mark makes every
// later call a no-op, so quantities are summed once however often or concurrently it is called.
func (s *Store) Merge(ctx context.Context, userID int64, guestToken string) (MergeResult, error) {
	memberID, guestID := MemberID(userID), GuestID(guestToken)
	token := s.cache.reserve(memberID)
	res, err := s.merge(ctx, userID, guestToken)
	if err != nil {
		s.cache.forget(memberID)
		s.cache.forget(guestID)
		s.notices.changed(memberID, -1)
		s.notices.changed(guestID, -1)
		return res, err
	}
	s.settle(memberID, token, res.Cart, nil)
	if res.Outcome == MergeMerged {
		s.cache.forget(guestID) // merged now: its version and mark are the database's to tell
		s.notices.changed(guestID, -1)
	}
	return res, nil
}

func (s *Store) merge(ctx context.Context, userID int64, guestToken string) (MergeResult, error) {
	member := Member(userID)
	guestID := GuestID(guestToken)
	var res MergeResult
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		q := s.q.WithTx(tx)
		guest, err := q.LockCart(ctx, guestID)
		switch {
		case db.NotFound(err):
			res.Outcome = MergeNoGuestCart
		case err != nil:
			return err
		case guest.MergedAt != nil:
			res.Outcome = MergeAlreadyMerged
		default:
			res.Outcome = MergeMerged
		}
		// Lock order: the guest cart, then the member cart.
		if err := q.EnsureCart(ctx, member.CartID, member.UserID); err != nil {
			return err
		}
		row, err := q.LockCart(ctx, member.CartID)
		if err != nil {
			return err
		}
		mine, err := snapshotOf(member.CartID, row.Version, row.Doc)
		if err != nil {
			return err
		}
		res.Cart = mine
		if res.Outcome != MergeMerged {
			return nil
		}
		theirs, err := snapshotOf(guestID, guest.Version, guest.Doc)
		if err != nil {
			return err
		}
		next, adjustments, changed, err := s.combine(ctx, tx, mine.Doc, theirs.Doc)
		if err != nil {
			return err
		}
		res.Adjustments = adjustments
		if changed {
			raw, err := json.Marshal(next)
			if err != nil {
				return err
			}
			if _, err := q.UpdateCartDoc(ctx, raw, member.CartID, mine.Version); err != nil {
				return err
			}
			res.Cart = Snapshot{ID: member.CartID, Version: mine.Version + 1, Doc: next}
		}
		n, err := q.MarkCartMerged(ctx, &member.CartID, guestID)
		if err != nil {
			return err
		}
		if n != 1 { // cannot happen while we hold the guest row; refuse rather than sum twice
			return errors.New("guest cart changed during merge")
		}
		return nil
	})
	if err != nil {
		return MergeResult{}, err
	}
	if res.Adjustments == nil {
		res.Adjustments = []Adjustment{}
	}
	return res, nil
}

// combine adds the guest lines to the member's document.
func (s *Store) combine(ctx context.Context, tx db.DBTX, mine, theirs Doc) (Doc, []Adjustment, bool, error) {
	if len(theirs.Items) == 0 {
		return mine, nil, false, nil
	}
	ids := make([]int64, len(theirs.Items))
	for i, it := range theirs.Items {
		ids[i] = it.SKUID
	}
	rows, err := inventory.SKUs(ctx, tx, ids)
	if err != nil {
		return mine, nil, false, err
	}
	skus := make(map[int64]inventory.SKU, len(rows))
	for _, r := range rows {
		skus[r.ID] = r
	}
	items := append([]Item(nil), mine.Items...)
	at := make(map[int64]int, len(items))
	for i, it := range items {
		at[it.SKUID] = i
	}
	var adjustments []Adjustment
	changed := false
	for _, g := range theirs.Items {
		sku, ok := skus[g.SKUID]
		if !ok {
			adjustments = append(adjustments, Adjustment{SKUID: g.SKUID, Requested: g.Quantity, Reason: "SKU_NOT_FOUND"})
			continue
		}
		limit, reason := sku.MaxPerOrder, LimitMaxPerOrder
		if s.limits.MaxUnitsPerLine < limit {
			limit, reason = s.limits.MaxUnitsPerLine, LimitUnitsPerLine
		}
		i, exists := at[g.SKUID]
		if !exists && len(items) >= s.limits.MaxLines {
			adjustments = append(adjustments, Adjustment{SKUID: g.SKUID, Requested: g.Quantity, Reason: LimitLines})
			continue
		}
		want := int64(g.Quantity)
		if exists {
			want += int64(items[i].Quantity)
		}
		qty := int32(min(want, int64(limit)))
		if want > int64(limit) {
			adjustments = append(adjustments, Adjustment{SKUID: g.SKUID, Requested: int32(min(want, 1<<30)), Quantity: qty, Reason: reason})
		}
		switch {
		case exists && items[i].Quantity != qty:
			items[i].Quantity = qty
			changed = true
		case exists:
		case qty > 0:
			line := g
			line.Quantity, line.SellerID = qty, sku.SellerID
			at[g.SKUID] = len(items)
			items = append(items, line)
			changed = true
		}
	}
	mine.Items = items
	return mine, adjustments, changed, nil
}
