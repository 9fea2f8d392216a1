package cart

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/marketplace/checkout/cart/internal/cartstore"
	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/internal/money"
	"github.com/marketplace/checkout/pricing"
)

// Limits bound a cart against bots and abuse. A line is also bounded by its SKU's maxPerOrder.
type Limits struct {
	MaxLines        int
	MaxUnitsPerLine int32
}

// Default limits.
const (
	DefaultMaxLines        = 50
	DefaultMaxUnitsPerLine = 99
)

// Names of the limits, as LimitError and the API name them.
const (
	LimitLines        = "linesPerCart"
	LimitUnitsPerLine = "unitsPerLine"
	LimitMaxPerOrder  = "maxPerOrder"
)

// Owner names a cart and, for a member cart, its user.
type Owner struct {
	CartID string
	UserID *int64
}

// Member is the owner of a signed-in user's cart.
func Member(userID int64) Owner { return Owner{CartID: MemberID(userID), UserID: &userID} }

// Guest is the owner of a guest token's cart.
func Guest(token string) Owner { return Owner{CartID: GuestID(token)} }

// Errors of cart writes.
var (
	// ErrConflict: the client's If-Match names a version the cart no longer has.
	ErrConflict = errors.New("cart changed since the version given")
	// ErrMerged: the guest cart was merged into a member cart and takes no more writes.
	ErrMerged = errors.New("guest cart already merged")
	// ErrUnknownSKU: the SKU is not in the catalog.
	ErrUnknownSKU = errors.New("unknown SKU")
	// ErrInvalidQuantity: quantity below zero.
	ErrInvalidQuantity = errors.New("quantity must not be negative")
)

// ConflictError carries the cart's current version with ErrConflict.
type ConflictError struct{ Current int64 }

func (e *ConflictError) Error() string {
	return fmt.Sprintf("%v (current version %d)", ErrConflict, e.Current)
}

func (e *ConflictError) Unwrap() error { return ErrConflict }

// SellerMismatchError: the request names a seller that does not sell the SKU.
type SellerMismatchError struct {
	SKUID, SellerID int64
}

func (e *SellerMismatchError) Error() string {
	return fmt.Sprintf("SKU %d is sold by seller %d", e.SKUID, e.SellerID)
}

// LimitError names the limit a write would break and its value.
type LimitError struct {
	Limit string
	Max   int
}

func (e *LimitError) Error() string { return fmt.Sprintf("cart limit %s is %d", e.Limit, e.Max) }

// Store writes carts: optimistic locking on the version, re-reading and re-applying on a lost race
// unless the caller pinned a version with If-Match.
type Store struct {
	pool    *pgxpool.Pool
	q       *cartstore.Queries
	limits  Limits
	cache   *Cache
	notices *Notices
}

// NewStore returns a store on pool; zero limits take the defaults.
func NewStore(pool *pgxpool.Pool, limits Limits) *Store {
	if limits.MaxLines <= 0 {
		limits.MaxLines = DefaultMaxLines
	}
	if limits.MaxUnitsPerLine <= 0 {
		limits.MaxUnitsPerLine = DefaultMaxUnitsPerLine
	}
	return &Store{pool: pool, q: cartstore.New(pool), limits: limits}
}

// Limits are the store's limits.
func (s *Store) Limits() Limits { return s.limits }

// WithCache makes every write of the store update the process's cart cache c before it returns,
// so that this process serves the write (or a newer version) from then on; nil: no cache.
func (s *Store) WithCache(c *Cache) *Store {
	s.cache = c
	return s
}

// WithNotices makes every committed write of the store announce itself to the other processes'
// caches; nil: none are told (a process with no cache of its own still announces).
func (s *Store) WithNotices(n *Notices) *Store {
	s.notices = n
	return s
}

// settle tells the cache what a write did: the cart it committed (or found already so), or, after
// an error that may have followed a commit, that the cached cart cannot be trusted.
func (s *Store) settle(id string, token uint64, snap Snapshot, err error) {
	switch {
	case err == nil:
		s.cache.wrote(id, token, Entry{Snapshot: snap, Exists: snap.Version > 0})
		s.notices.changed(id, snap.Version)
	case !refused(err):
		s.cache.forget(id)
		s.notices.changed(id, -1)
	}
}

// refused: the write was turned down before anything was written.
func refused(err error) bool {
	var seller *SellerMismatchError
	var limit *LimitError
	return errors.Is(err, ErrConflict) || errors.Is(err, ErrMerged) || errors.Is(err, ErrUnknownSKU) ||
		errors.Is(err, ErrInvalidQuantity) || errors.As(err, &seller) || errors.As(err, &limit)
}

// optimisticAttempts is how many lost races a write retries before it takes the row lock, which
// always succeeds: a busy cart is slower, never a lost write.
const optimisticAttempts = 4

// SetQuantity sets the quantity of one SKU in the cart: 0 removes the line, a repeat changes
// nothing (no write, same version). ifMatch, when given, must be the cart's current version.
// sellerID is checked against the catalog; 0 skips the catalog (removal by DELETE).
func (s *Store) SetQuantity(ctx context.Context, o Owner, skuID, sellerID int64, quantity int32, ifMatch *int64) (Snapshot, error) {
	// The cache slot is named before the cart is read, so that a change announced meanwhile voids
	// this write's update of the cache instead of being overwritten by it.
	token := s.cache.reserve(o.CartID)
	snap, err := s.setQuantity(ctx, o, skuID, sellerID, quantity, ifMatch)
	s.settle(o.CartID, token, snap, err)
	return snap, err
}

func (s *Store) setQuantity(ctx context.Context, o Owner, skuID, sellerID int64, quantity int32, ifMatch *int64) (Snapshot, error) {
	if quantity < 0 {
		return Snapshot{}, ErrInvalidQuantity
	}
	// One round trip: the SKU's seller and limit with its price now (campaigns applied), and the
	// cart as it is.
	b := &pgx.Batch{}
	priced := quantity > 0 || sellerID != 0
	var quote pricing.Quote
	var refused error
	if priced {
		pricing.QueueCompute(b, []pricing.Line{{SKUID: skuID, Quantity: 1}}, &quote, &refused)
	}
	var first loaded
	queueLoad(b, o.CartID, &first)
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return Snapshot{}, err
	}
	var line *Item
	if priced {
		if errors.Is(refused, pricing.ErrUnknownSKUs) {
			return Snapshot{}, ErrUnknownSKU
		}
		if refused != nil {
			return Snapshot{}, refused
		}
		sku := quote.Items[0]
		if sellerID != sku.SellerID {
			return Snapshot{}, &SellerMismatchError{SKUID: skuID, SellerID: sku.SellerID}
		}
		if err := s.checkUnits(quantity, sku.MaxPerOrder); err != nil {
			return Snapshot{}, err
		}
		line = &Item{SKUID: skuID, SellerID: sku.SellerID, Quantity: quantity,
			PriceAtAdd: money.FormatIn(sku.UnitPriceMinor, sku.Currency)}
	}
	edit := func(d Doc) (Doc, bool, error) { return s.setLine(d, skuID, quantity, line) }
	cur := &first
	for attempt := 0; attempt < optimisticAttempts; attempt++ {
		snap, done, err := s.tryOptimistic(ctx, o, ifMatch, edit, cur)
		if err != nil || done {
			return snap, err
		}
		cur = nil
		if ifMatch != nil {
			now, _, err := s.load(ctx, o.CartID)
			if err != nil {
				return Snapshot{}, err
			}
			return Snapshot{}, &ConflictError{Current: now.Version}
		}
	}
	return s.locked(ctx, o, ifMatch, edit)
}

func (s *Store) checkUnits(quantity, maxPerOrder int32) error {
	if maxPerOrder <= s.limits.MaxUnitsPerLine {
		if quantity > maxPerOrder {
			return &LimitError{Limit: LimitMaxPerOrder, Max: int(maxPerOrder)}
		}
	} else if quantity > s.limits.MaxUnitsPerLine {
		return &LimitError{Limit: LimitUnitsPerLine, Max: int(s.limits.MaxUnitsPerLine)}
	}
	return nil
}

// setLine applies "this SKU, this quantity" to a document. An existing line keeps its addedAt and
// priceAtAdd; a new one takes the current price and time.
func (s *Store) setLine(d Doc, skuID int64, quantity int32, line *Item) (Doc, bool, error) {
	at := -1
	for i, it := range d.Items {
		if it.SKUID == skuID {
			at = i
			break
		}
	}
	switch {
	case quantity == 0 && at < 0:
		return d, false, nil
	case quantity == 0:
		items := make([]Item, 0, len(d.Items)-1)
		items = append(items, d.Items[:at]...)
		d.Items = append(items, d.Items[at+1:]...)
		return d, true, nil
	case at >= 0 && d.Items[at].Quantity == quantity && d.Items[at].SellerID == line.SellerID:
		return d, false, nil
	case at >= 0:
		items := append([]Item(nil), d.Items...)
		items[at].Quantity, items[at].SellerID = quantity, line.SellerID
		d.Items = items
		return d, true, nil
	case len(d.Items) >= s.limits.MaxLines:
		return d, false, &LimitError{Limit: LimitLines, Max: s.limits.MaxLines}
	}
	it := *line
	it.AddedAt = time.Now().UTC().Truncate(time.Millisecond)
	d.Items = append(append(make([]Item, 0, len(d.Items)+1), d.Items...), it)
	return d, true, nil
}

type editFunc func(Doc) (Doc, bool, error)

// tryOptimistic reads the cart (unless read is the cart already read), applies edit and writes on
// the version read. done=false means another write won the race.
func (s *Store) tryOptimistic(ctx context.Context, o Owner, ifMatch *int64, edit editFunc, read *loaded) (Snapshot, bool, error) {
	if read == nil {
		read = &loaded{}
		read.snap, read.exists, read.err = s.load(ctx, o.CartID)
	}
	cur, exists, err := read.snap, read.exists, read.err
	if err != nil {
		return Snapshot{}, false, err
	}
	if ifMatch != nil && *ifMatch != cur.Version {
		return Snapshot{}, false, &ConflictError{Current: cur.Version}
	}
	next, changed, err := edit(cur.Doc)
	if err != nil || !changed {
		return cur, err == nil, err
	}
	raw, err := json.Marshal(next)
	if err != nil {
		return Snapshot{}, false, err
	}
	var n int64
	if exists {
		n, err = s.q.UpdateCartDoc(ctx, raw, o.CartID, cur.Version)
	} else {
		n, err = s.q.CreateCart(ctx, o.CartID, o.UserID, raw)
	}
	if err != nil || n == 0 {
		return Snapshot{}, false, err
	}
	return Snapshot{ID: o.CartID, Version: cur.Version + 1, Doc: next}, true, nil
}

// locked applies edit under the cart's row lock; it cannot lose a race.
func (s *Store) locked(ctx context.Context, o Owner, ifMatch *int64, edit editFunc) (Snapshot, error) {
	var out Snapshot
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		q := s.q.WithTx(tx)
		if err := q.EnsureCart(ctx, o.CartID, o.UserID); err != nil {
			return err
		}
		row, err := q.LockCart(ctx, o.CartID)
		if err != nil {
			return err
		}
		cur, err := snapshotOf(o.CartID, row.Version, row.Doc)
		if err != nil {
			return err
		}
		if row.MergedAt != nil {
			return ErrMerged
		}
		if ifMatch != nil && *ifMatch != cur.Version {
			return &ConflictError{Current: cur.Version}
		}
		next, changed, err := edit(cur.Doc)
		if err != nil {
			return err
		}
		if !changed {
			out = cur
			return nil
		}
		raw, err := json.Marshal(next)
		if err != nil {
			return err
		}
		if _, err := q.UpdateCartDoc(ctx, raw, o.CartID, cur.Version); err != nil {
			return err
		}
		out = Snapshot{ID: o.CartID, Version: cur.Version + 1, Doc: next}
		return nil
	})
	return out, err
}

// load reads a cart for writing: a missing cart is empty at version 0; a merged guest cart is
// ErrMerged.
func (s *Store) load(ctx context.Context, id string) (Snapshot, bool, error) {
	row, err := s.q.CartDoc(ctx, id)
	if db.NotFound(err) {
		return loadedOf(id, row, false)
	}
	if err != nil {
		return Snapshot{}, false, err
	}
	return loadedOf(id, row, true)
}

// loaded is a cart as load reads it.
type loaded struct {
	snap   Snapshot
	exists bool
	err    error
}

// queueLoad queues load's read on b; once the batch is read, dst is what load would have returned
// (a failed read is the batch's error).
func queueLoad(b *pgx.Batch, id string, dst *loaded) {
	db.QueueRow(b, cartstore.CartDocSQL, []any{id}, func(row cartstore.CartDocRow, found bool) {
		dst.snap, dst.exists, dst.err = loadedOf(id, row, found)
	})
}

func loadedOf(id string, row cartstore.CartDocRow, found bool) (Snapshot, bool, error) {
	if !found {
		return Snapshot{ID: id}, false, nil
	}
	if row.MergedAt != nil {
		return Snapshot{}, true, ErrMerged
	}
	snap, err := snapshotOf(id, row.Version, []byte(row.Doc))
	return snap, true, err
}

func snapshotOf(id string, version int64, raw []byte) (Snapshot, error) {
	s := Snapshot{ID: id, Version: version}
	if err := json.Unmarshal(raw, &s.Doc); err != nil {
		return Snapshot{}, fmt.Errorf("cart %s: %w", id, err)
	}
	return s, nil
}
