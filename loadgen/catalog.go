package loadgen

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/marketplace/checkout/internal/auth"
)

// sku is one SKU of the generator's catalog and what the generator last reported of its stock.
type sku struct {
	code        string
	id          int64
	seller      int64
	hot         bool
	maxPerOrder int32
	refill      int
	warehouses  []int32
	lowWater    int32

	// Guarded by keeper.mu.
	reported map[int32]int
	stamp    time.Time // sourceUpdatedAt of the last count sent
	due      time.Time // when the delivery ordered for a low stock arrives (zero: none ordered)
}

// catalog is the generator's own SKUs: regular ones in popularity order, and the hot ones.
type catalog struct {
	regular []*sku
	hot     []*sku
	byID    map[int64]*sku
}

// setupCatalog creates (or updates) the generator's SKUs through the seller API and sets their
// stock: it starts from a stock it sets itself, so a run measures checkout, not empty shelves.
func (g *gen) setupCatalog(ctx context.Context) (shortfalls int, err error) {
	cat := &catalog{byID: map[int64]*sku{}}
	for i := 1; i <= g.cfg.CatalogSize; i++ {
		cat.regular = append(cat.regular, &sku{code: fmt.Sprintf("LG-%04d", i), seller: g.cfg.Sellers[(i-1)%len(g.cfg.Sellers)],
			maxPerOrder: 5, refill: g.cfg.Stock, warehouses: g.cfg.Warehouses})
	}
	for _, code := range hotCodes(g.cfg.HotSKUs) {
		cat.hot = append(cat.hot, &sku{code: code, seller: g.cfg.Sellers[0], hot: true, maxPerOrder: 1,
			refill: g.cfg.HotStock, warehouses: g.cfg.Warehouses[:1]})
	}
	all := append(append([]*sku{}, cat.regular...), cat.hot...)
	for _, s := range all {
		s.reported = map[int32]int{}
		s.lowWater = int32(max(2, int(g.cfg.LowWater*float64(s.refill*len(s.warehouses)))))
	}

	bySeller := map[int64][]*sku{}
	for _, s := range all {
		bySeller[s.seller] = append(bySeller[s.seller], s)
	}
	for seller, skus := range bySeller {
		for start := 0; start < len(skus); start += 1000 {
			batch := skus[start:min(start+1000, len(skus))]
			rows := make([]map[string]any, len(batch))
			for i, s := range batch {
				rows[i] = map[string]any{"sku": s.code, "title": "Load test " + s.code, "price": price(s),
					"currency": "TRY", "maxPerOrder": s.maxPerOrder}
			}
			var out struct {
				Results []struct {
					SKU   string `json:"sku"`
					SKUID int64  `json:"skuId"`
				} `json:"results"`
			}
			if err := g.sellerCall(ctx, g.setup, "PUT /seller-api/v1/skus", "/seller-api/v1/skus", seller, rows, &out); err != nil {
				return 0, err
			}
			for i, r := range out.Results {
				batch[i].id = r.SKUID
				cat.byID[r.SKUID] = batch[i]
			}
		}
	}
	g.cat = cat
	n, err := g.keeper.report(ctx, g.setup, all, func(s *sku, wh int32) int { return s.refill }, false)
	return n, err
}

// price is a SKU's price: fixed per code, so a later run does not change it.
func price(s *sku) string {
	h := 0
	for _, c := range s.code {
		h = (h*31 + int(c)) % 49_000
	}
	if s.hot {
		return fmt.Sprintf("%d.90", 1000+h%9000)
	}
	return fmt.Sprintf("%d.%02d", 10+h/100, h%100)
}

// sellerToken is the seller's token: its ERP's from the provider (Tokens), else minted.
func (g *gen) sellerToken(ctx context.Context, seller int64) (string, error) {
	if g.cfg.Tokens != nil {
		return g.cfg.Tokens.Seller(ctx, seller)
	}
	return auth.Mint([]byte(g.cfg.JWTSecret), auth.Principal{UserID: 1000 + seller, Role: auth.RoleSeller, SellerID: seller},
		g.cfg.Duration+g.cfg.HoldTTL+time.Hour)
}

func (g *gen) sellerCall(ctx context.Context, c *client, endpoint, path string, seller int64, body, out any) error {
	tok, err := g.sellerToken(ctx, seller)
	if err != nil {
		return err
	}
	a, err := c.send(ctx, request{endpoint: endpoint, method: http.MethodPut, url: path, token: tok, json: body})
	if err != nil {
		return err
	}
	if a.status != http.StatusOK {
		return fmt.Errorf("%s: %d %s %s", endpoint, a.status, a.code, truncate(string(a.body), 300))
	}
	return a.decode(out)
}

// keeper tops up the stock of SKUs that run low, as a seller's ERP reports a delivery: the
// delivery arrives RestockLead after the SKU was seen low, so a hot SKU can run out meanwhile.
// It is an ERP that never hears of our sales: its count is the starting stock plus every delivery,
// true as of the starting count, and it says so by stamping each count a microsecond after the
// last one, so that every count is newer than the one before and all of them precede the run's
// first sale (the load starts stampSpan after the starting counts). The server takes off what was
// sold since.
type keeper struct {
	g        *gen
	mu       sync.Mutex
	topUps   int64
	failures int64
}

// low orders a delivery for a SKU, unless one is on its way.
func (k *keeper) low(s *sku) {
	k.mu.Lock()
	if s.due.IsZero() {
		s.due = time.Now().Add(k.g.cfg.RestockLead)
	}
	k.mu.Unlock()
}

// keeperTick is how often the keeper looks for deliveries due: at most one count per SKU each.
const keeperTick = 200 * time.Millisecond

// stampSpan is how far after its starting count a SKU's later counts may be stamped: room for
// 100,000 counts a microsecond apart, far more than the 18,000 ticks of a run of MaxDuration.
const stampSpan = 100 * time.Millisecond

// run reports the deliveries as they arrive, until stop closes.
func (k *keeper) run(ctx context.Context, stop <-chan struct{}) {
	every(ctx, stop, keeperTick, func() {
		now := time.Now()
		var due []*sku
		k.mu.Lock()
		for _, s := range k.g.cat.byID {
			if !s.due.IsZero() && !now.Before(s.due) {
				s.due = time.Time{}
				due = append(due, s)
			}
		}
		k.mu.Unlock()
		if len(due) == 0 {
			return
		}
		// A delivery of refill units on top of the last count. Less what was sold since, that is
		// the shelf plus the delivery: never below what is reserved, so a top-up never takes stock
		// from an order.
		if _, err := k.report(ctx, k.g.load, due, func(s *sku, wh int32) int { return s.reported[wh] + s.refill }, true); err != nil {
			k.mu.Lock()
			k.failures++
			k.mu.Unlock()
			return
		}
		k.mu.Lock()
		k.topUps += int64(len(due))
		k.mu.Unlock()
	})
}

// every runs f every d until stop closes or ctx ends.
func every(ctx context.Context, stop <-chan struct{}, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f()
	}
}

// report sends absolute counts for every warehouse of skus, one call per seller, and remembers
// them. A count is stamped now, or, when sinceLast, a microsecond after the SKU's last count: true
// as of then, not having heard of any sale since. It returns how many rows the API applied with a
// shortfall.
func (k *keeper) report(ctx context.Context, c *client, skus []*sku, count func(s *sku, wh int32) int, sinceLast bool) (int, error) {
	type row struct {
		s   *sku
		wh  int32
		qty int
		at  time.Time
	}
	bySeller := map[int64][]row{}
	k.mu.Lock()
	for _, s := range skus {
		at := time.Now().UTC().Truncate(time.Microsecond)
		if sinceLast || !at.After(s.stamp) {
			at = s.stamp.Add(time.Microsecond)
		}
		s.stamp = at
		for _, wh := range s.warehouses {
			bySeller[s.seller] = append(bySeller[s.seller], row{s: s, wh: wh, qty: count(s, wh), at: at})
		}
	}
	k.mu.Unlock()
	shortfalls := 0
	for seller, rows := range bySeller {
		for start := 0; start < len(rows); start += 1000 {
			batch := rows[start:min(start+1000, len(rows))]
			body := make([]map[string]any, len(batch))
			for i, r := range batch {
				body[i] = map[string]any{"sku": r.s.code, "warehouseId": r.wh, "quantity": r.qty,
					"sourceUpdatedAt": r.at.Format(time.RFC3339Nano)}
			}
			var out struct {
				Results []struct {
					Status string `json:"status"`
				} `json:"results"`
			}
			if err := k.g.sellerCall(ctx, c, epStocks, "/seller-api/v1/stocks", seller, body, &out); err != nil {
				return shortfalls, err
			}
			k.mu.Lock()
			for i, r := range batch {
				if i < len(out.Results) && out.Results[i].Status != "STALE_IGNORED" {
					r.s.reported[r.wh] = r.qty
				}
				if i < len(out.Results) && out.Results[i].Status == "APPLIED_WITH_SHORTFALL" {
					shortfalls++
				}
			}
			k.mu.Unlock()
		}
	}
	return shortfalls, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
