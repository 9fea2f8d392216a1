package cart

import (
	"context"
	"sync"
	"time"

	"github.com/marketplace/checkout/cart/internal/cartstore"
	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/pricing"
)

// LineInfo is what the cart page shows beside a line: the current price (campaigns applied) and the
// availability projection's stock figure (Available is meaningful only when Known).
type LineInfo struct {
	Title      string
	PriceMinor int64
	Currency   string
	Available  int32
	Known      bool
}

// Line is a cart line as the cart page shows it. InCatalog is false for a SKU no longer sold.
type Line struct {
	Item
	LineInfo
	InCatalog bool
}

// View is a cart with what its page shows beside each line.
type View struct {
	ID       string
	Version  int64
	MergedAt *time.Time
	Lines    []Line
}

// Viewer reads carts for their page. The cart document comes from the process's cart cache when
// one is attached (WithCache; coherent across processes, see Cache) and from a primary-key read
// otherwise; the price and stock figure of each SKU come from a short-lived in-process cache in
// front of the catalog and the availability projection, so that the cart page, the busiest read of
// the product, usually costs no query at all. The figures are display hints at most TTL old (the
// projection itself is seconds behind); the checkout preview and the order read the truth.
type Viewer struct {
	conn  db.DBTX
	q     *cartstore.Queries
	ttl   time.Duration
	carts *Cache

	mu      sync.RWMutex
	entries map[int64]cached
}

type cached struct {
	info    LineInfo
	expires time.Time
}

// MaxCachedSKUs bounds the viewer's cache; past it, expired entries go, and if that is not
// enough the cache starts over.
const MaxCachedSKUs = 100_000

// NewViewer returns a viewer whose SKU figures live ttl; 0 turns the cache off.
func NewViewer(conn db.DBTX, ttl time.Duration) *Viewer {
	return &Viewer{conn: conn, q: cartstore.New(conn), ttl: ttl, entries: map[int64]cached{}}
}

// WithCache makes the viewer read cart documents through c (nil: always from the database).
func (v *Viewer) WithCache(c *Cache) *Viewer {
	v.carts = c
	return v
}

// View reads a cart with current prices and stock hints. A missing cart is an empty one at
// version 0.
func (v *Viewer) View(ctx context.Context, id string) (View, error) {
	e, err := v.carts.Read(ctx, v.conn, id)
	if err != nil {
		return View{}, err
	}
	out, err := v.Of(ctx, e.Snapshot)
	out.MergedAt = e.MergedAt
	return out, err
}

// Of dresses a cart already in hand (such as the one a write just stored) for its page.
func (v *Viewer) Of(ctx context.Context, snap Snapshot) (View, error) {
	ids := make([]int64, len(snap.Doc.Items))
	for i, it := range snap.Doc.Items {
		ids[i] = it.SKUID
	}
	infos, err := v.Lookup(ctx, ids)
	if err != nil {
		return View{}, err
	}
	out := View{ID: snap.ID, Version: snap.Version, Lines: make([]Line, len(snap.Doc.Items))}
	for i, it := range snap.Doc.Items {
		info, ok := infos[it.SKUID]
		out.Lines[i] = Line{Item: it, LineInfo: info, InCatalog: ok}
	}
	return out, nil
}

// Lookup returns the figures of the SKUs that are in the catalog, from the cache where fresh and
// from one query for the rest.
func (v *Viewer) Lookup(ctx context.Context, ids []int64) (map[int64]LineInfo, error) {
	out := make(map[int64]LineInfo, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	now := time.Now()
	var missing []int64
	v.mu.RLock()
	for _, id := range ids {
		if e, ok := v.entries[id]; ok && now.Before(e.expires) {
			out[id] = e.info
		} else {
			missing = append(missing, id)
		}
	}
	v.mu.RUnlock()
	if len(missing) == 0 {
		return out, nil
	}
	rows, err := v.q.CartLineInfo(ctx, missing)
	if err != nil {
		return nil, err
	}
	infos := make(map[int64]LineInfo, len(rows))
	for _, r := range rows {
		price, _, err := pricing.Apply(r.PriceMinor, r.Currency, r.Campaigns)
		if err != nil {
			return nil, err
		}
		infos[r.ID] = LineInfo{Title: r.Title, PriceMinor: price, Currency: r.Currency,
			Available: r.Available, Known: r.Known}
		out[r.ID] = infos[r.ID]
	}
	if v.ttl > 0 {
		v.store(infos, now.Add(v.ttl))
	}
	return out, nil
}

func (v *Viewer) store(infos map[int64]LineInfo, expires time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.entries)+len(infos) > MaxCachedSKUs {
		now := time.Now()
		for id, e := range v.entries {
			if !now.Before(e.expires) {
				delete(v.entries, id)
			}
		}
		if len(v.entries)+len(infos) > MaxCachedSKUs {
			v.entries = make(map[int64]cached, len(infos))
		}
	}
	for id, info := range infos {
		v.entries[id] = cached{expires: expires, info: info}
	}
}
