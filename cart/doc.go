// Package cart holds shoppers' carts: one JSONB document per cart with a version for optimistic
// locking. A cart is a shopping list, never a reservation: stock is reserved at order time.
package cart

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/marketplace/checkout/cart/internal/cartstore"
	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/pricing"
)

// Item is one line of a cart. PriceAtAdd is for display only ("the price went down"); orders
// always recompute prices.
type Item struct {
	SKUID      int64     `json:"skuId"`
	SellerID   int64     `json:"sellerId"`
	Quantity   int32     `json:"quantity"`
	AddedAt    time.Time `json:"addedAt"`
	PriceAtAdd string    `json:"priceAtAdd"`
}

// Doc is the stored document of a cart.
type Doc struct {
	Items []Item `json:"items"`
}

// MemberID is the cart id of a signed-in user.
func MemberID(userID int64) string { return "u:" + strconv.FormatInt(userID, 10) }

// GuestID is the cart id of a guest token; only a hash of the token is stored.
func GuestID(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "g:" + hex.EncodeToString(sum[:])
}

// Snapshot is a cart as read, with its version.
type Snapshot struct {
	ID      string
	Version int64
	Doc     Doc
}

// ErrNotFound: no cart with that id.
var ErrNotFound = errors.New("cart not found")

// Load reads a cart.
func Load(ctx context.Context, conn db.DBTX, id string) (Snapshot, error) {
	row, err := cartstore.New(conn).GetCart(ctx, id)
	if db.NotFound(err) {
		return Snapshot{ID: id}, ErrNotFound
	}
	if err != nil {
		return Snapshot{}, err
	}
	return docOf(id, row)
}

// QueueLoad is Load with its read queued on b, to go with the caller's other reads in one round
// trip: once the batch is read, *dst is the cart, or *missing is ErrNotFound (*dst then the empty
// cart). A failed read is the batch's error.
func QueueLoad(b *pgx.Batch, id string, dst *Snapshot, missing *error) {
	db.QueueRow(b, cartstore.GetCartSQL, []any{id}, func(row cartstore.Cart, found bool) {
		if !found {
			*dst, *missing = Snapshot{ID: id}, ErrNotFound
			return
		}
		*dst, *missing = docOf(id, row)
	})
}

func docOf(id string, row cartstore.Cart) (Snapshot, error) {
	s := Snapshot{ID: id, Version: row.Version}
	if err := json.Unmarshal(row.Doc, &s.Doc); err != nil {
		return Snapshot{}, fmt.Errorf("cart %s: %w", id, err)
	}
	return s, nil
}

// Lines are the cart's SKUs and quantities, as pricing.Compute takes them: the checkout preview and
// the order both price exactly these (Price), so they agree on the priceVersion.
func (d Doc) Lines() []pricing.Line {
	lines := make([]pricing.Line, 0, len(d.Items))
	for _, it := range d.Items {
		lines = append(lines, pricing.Line{SKUID: it.SKUID, Quantity: it.Quantity})
	}
	return lines
}
