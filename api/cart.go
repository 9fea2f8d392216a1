package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/marketplace/checkout/availability"
	"github.com/marketplace/checkout/cart"
	"github.com/marketplace/checkout/features"
	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/money"
	"github.com/marketplace/checkout/internal/problem"
)

// GuestTokenHeader carries a guest's cart token, both ways: the server issues one when a cart call
// comes without a bearer token and without this header.
const GuestTokenHeader = "X-Guest-Token"

// MaxQuantity is the largest quantity a PUT may name at all; above it the request is nonsense
// (400), below it but above the line's limit it is refused as CART_LIMIT (422).
const MaxQuantity = 1000

const (
	cartOwnerKey  = "cartOwner"
	headerETag    = "ETag"
	headerIfMatch = "If-Match"
)

// cartHandlers are the cart endpoints: guest or member, chosen per request by cartOwner.
type cartHandlers struct {
	*Server
	store  *cart.Store
	viewer *cart.Viewer
}

func (s *Server) cartRoutes(e *echo.Echo) {
	h := &cartHandlers{Server: s, viewer: cart.NewViewer(s.Pool, s.Options.CartViewCacheTTL).WithCache(s.CartCache),
		store: cart.NewStore(s.Pool, s.Options.CartLimits).WithCache(s.CartCache).WithNotices(s.CartNotices)}
	e.GET("/api/v1/cart", h.getCart, s.cartOwner)
	writes := s.rateLimit(s.limits.cart)
	e.PUT("/api/v1/cart/items/:skuId", h.putItem, s.cartOwner, writes)
	e.DELETE("/api/v1/cart/items/:skuId", h.deleteItem, s.cartOwner, writes)
	e.POST("/api/v1/cart/merge", h.merge, s.authenticate, requireRole(auth.RoleShopper), writes)
	// The preview prices the cart against the catalog, the campaigns, a coupon and the inventory:
	// limited as the writes are.
	e.POST("/api/v1/checkout/preview", h.preview, s.authenticate, requireRole(auth.RoleShopper),
		s.rateLimit(s.limits.preview))
}

// cartOwner picks the cart of the request: a valid shopper token means the member cart (a guest
// token beside it is ignored); no token means the guest cart of X-Guest-Token, issued here when
// absent. A bad bearer token is 401, never a silent fall back to a guest cart; so is a guest token
// this server did not issue.
func (s *Server) cartOwner(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		p, present, err := s.bearer(c)
		if present {
			if err != nil {
				return unauthorized("invalid or expired token")
			}
			if p.Role != auth.RoleShopper {
				return forbidden("this endpoint is for the shopper role")
			}
			c.Set(principalKey, p)
			c.Set(cartOwnerKey, cart.Member(p.UserID))
			return next(c)
		}
		token := strings.TrimSpace(c.Request().Header.Get(GuestTokenHeader))
		if token == "" {
			// A new guest cart: counted against the client address's guest cart limit.
			if err := s.admit(c, s.limits.guestCarts); err != nil {
				return err
			}
			token = s.guests.Issue()
		} else if !s.guests.Valid(token) {
			return problem.New(problem.InvalidGuestToken, "this guest token was not issued by "+
				"this server; send the request without "+GuestTokenHeader+" to start a new guest cart")
		}
		c.Response().Header().Set(GuestTokenHeader, token)
		c.Set(cartOwnerKey, cart.Guest(token))
		return next(c)
	}
}

func ownerOf(c echo.Context) cart.Owner {
	o, _ := c.Get(cartOwnerKey).(cart.Owner)
	return o
}

type cartItemView struct {
	SKUID      int64     `json:"skuId"`
	SellerID   int64     `json:"sellerId"`
	Title      string    `json:"title,omitempty"`
	Quantity   int32     `json:"quantity"`
	AddedAt    time.Time `json:"addedAt"`
	PriceAtAdd string    `json:"priceAtAdd"`
	Price      string    `json:"price,omitempty"`
	LineTotal  string    `json:"lineTotal,omitempty"`
	Currency   string    `json:"currency,omitempty"`
	Stock      string    `json:"stock,omitempty"`
	Available  *int32    `json:"available,omitempty"`
}

type cartLimitsView struct {
	LinesPerCart int `json:"linesPerCart"`
	UnitsPerLine int `json:"unitsPerLine"`
}

type cartView struct {
	Version  int64          `json:"version"`
	Items    []cartItemView `json:"items"`
	Units    int64          `json:"units"`
	Subtotal string         `json:"subtotal,omitempty"`
	Currency string         `json:"currency,omitempty"`
	MergedAt *time.Time     `json:"mergedAt,omitempty"`
	Limits   cartLimitsView `json:"limits"`
	// Omitted names what a feature switch left out of the answer (cart_stock_hints: no stock).
	Omitted []string `json:"omitted,omitempty"`
}

// render turns a cart with its hints into the answer, and sets the version as the ETag. With the
// cart_stock_hints switch off, the lines carry no stock and the answer says so.
func (h *cartHandlers) render(c echo.Context, v cart.View) cartView {
	out := cartView{Version: v.Version, Items: make([]cartItemView, len(v.Lines)), MergedAt: v.MergedAt,
		Limits: cartLimitsView{LinesPerCart: h.store.Limits().MaxLines, UnitsPerLine: int(h.store.Limits().MaxUnitsPerLine)}}
	hints := h.Features.Enabled(c.Request().Context(), features.CartStockHints)
	if !hints {
		out.Omitted = []string{string(features.CartStockHints)}
	}
	threshold := int32(h.Options.LowStockThreshold)
	var subtotal int64
	currency, single := "", true
	for i, l := range v.Lines {
		it := cartItemView{SKUID: l.SKUID, SellerID: l.SellerID, Title: l.Title, Quantity: l.Quantity,
			AddedAt: l.AddedAt, PriceAtAdd: l.PriceAtAdd}
		if hints {
			it.Stock = availability.Unknown
		}
		if l.InCatalog {
			it.Price, it.Currency = money.FormatIn(l.PriceMinor, l.Currency), l.Currency
			it.LineTotal = money.FormatIn(l.PriceMinor*int64(l.Quantity), l.Currency)
			if hints {
				it.Stock = availability.Hint(l.Available, l.Known, threshold)
			}
			if it.Stock == availability.LowStock {
				n := l.Available
				it.Available = &n
			}
			subtotal += l.PriceMinor * int64(l.Quantity)
			if currency == "" {
				currency = l.Currency
			} else if currency != l.Currency {
				single = false
			}
		}
		out.Units += int64(l.Quantity)
		out.Items[i] = it
	}
	if single && currency != "" {
		out.Subtotal, out.Currency = money.FormatIn(subtotal, currency), currency
	}
	c.Response().Header().Set(headerETag, `"`+strconv.FormatInt(v.Version, 10)+`"`)
	return out
}

// respond answers with the cart a write left (no second read of it).
func (h *cartHandlers) respond(c echo.Context, snap cart.Snapshot) error {
	v, err := h.viewer.Of(c.Request().Context(), snap)
	if err != nil {
		return fmt.Errorf("viewing cart %s: %w", snap.ID, err)
	}
	return c.JSON(http.StatusOK, h.render(c, v))
}

// getCart shows the cart with current prices and stock hints from the availability projection:
// the document through the process's cart cache (CART_CACHE_ENTRIES), the figures through the
// viewer's short cache (CART_VIEW_CACHE_TTL).
func (h *cartHandlers) getCart(c echo.Context) error {
	v, err := h.viewer.View(c.Request().Context(), ownerOf(c).CartID)
	if err != nil {
		return fmt.Errorf("viewing the cart: %w", err)
	}
	return c.JSON(http.StatusOK, h.render(c, v))
}

type putItemRequest struct {
	SellerID *int64 `json:"sellerId"`
	Quantity *int64 `json:"quantity"`
}

// putItem sets the quantity of one SKU; a repeat changes nothing.
func (h *cartHandlers) putItem(c echo.Context) error {
	var v validation
	sku := skuParam(c, &v)
	ifMatch := ifMatchHeader(c, &v)
	var req putItemRequest
	if err := bind(c, &req); err != nil {
		return err
	}
	if req.SellerID == nil || *req.SellerID <= 0 {
		v.add("sellerId", "required, the seller of the SKU")
	}
	if req.Quantity == nil || *req.Quantity < 0 || *req.Quantity > MaxQuantity {
		v.add("quantity", "required, between 0 and "+strconv.Itoa(MaxQuantity)+" (0 removes the line)")
	}
	if err := v.err(); err != nil {
		return err
	}
	snap, err := h.store.SetQuantity(c.Request().Context(), ownerOf(c), sku, *req.SellerID, int32(*req.Quantity), ifMatch)
	if err != nil {
		return cartError(err, sku)
	}
	return h.respond(c, snap)
}

// deleteItem removes one SKU's line; removing a line that is not there changes nothing.
func (h *cartHandlers) deleteItem(c echo.Context) error {
	var v validation
	sku := skuParam(c, &v)
	ifMatch := ifMatchHeader(c, &v)
	if err := v.err(); err != nil {
		return err
	}
	snap, err := h.store.SetQuantity(c.Request().Context(), ownerOf(c), sku, 0, 0, ifMatch)
	if err != nil {
		return cartError(err, sku)
	}
	return h.respond(c, snap)
}

type mergeRequest struct {
	GuestCartToken string `json:"guestCartToken"`
}

type mergeView struct {
	cartView
	Merge struct {
		Outcome     string            `json:"outcome"`
		Adjustments []cart.Adjustment `json:"adjustments"`
	} `json:"merge"`
}

// merge adds the guest cart into the caller's member cart, once.
func (h *cartHandlers) merge(c echo.Context) error {
	var req mergeRequest
	if err := bind(c, &req); err != nil {
		return err
	}
	req.GuestCartToken = strings.TrimSpace(req.GuestCartToken)
	if !h.guests.Valid(req.GuestCartToken) {
		return problem.New(problem.ValidationFailed, "some fields are invalid").
			WithDetails(problem.Fields{Fields: []problem.FieldError{{Field: "guestCartToken", Message: "required, the X-Guest-Token this server issued for the guest cart"}}})
	}
	ctx := c.Request().Context()
	res, err := h.store.Merge(ctx, mustPrincipal(c).UserID, req.GuestCartToken)
	if err != nil {
		return fmt.Errorf("merging the guest cart: %w", err)
	}
	v, err := h.viewer.Of(ctx, res.Cart)
	if err != nil {
		return fmt.Errorf("viewing the merged cart: %w", err)
	}
	out := mergeView{cartView: h.render(c, v)}
	out.Merge.Outcome, out.Merge.Adjustments = res.Outcome, res.Adjustments
	return c.JSON(http.StatusOK, out)
}

func skuParam(c echo.Context, v *validation) int64 {
	id, err := strconv.ParseInt(c.Param("skuId"), 10, 64)
	if err != nil || id <= 0 {
		v.add("skuId", "a positive integer")
		return 0
	}
	return id
}

// ifMatchHeader reads If-Match as a cart version: `"18"`, `W/"18"` or `18`; `*` or none means
// no precondition.
func ifMatchHeader(c echo.Context, v *validation) *int64 {
	raw := strings.TrimSpace(c.Request().Header.Get(headerIfMatch))
	if raw == "" || raw == "*" {
		return nil
	}
	tag := strings.Trim(strings.TrimPrefix(raw, "W/"), `"`)
	n, err := strconv.ParseInt(tag, 10, 64)
	if err != nil || n < 0 {
		v.add(headerIfMatch, `the cart's ETag, such as "18"`)
		return nil
	}
	return &n
}

// cartError maps the cart's refusals to the error model.
func cartError(err error, sku int64) error {
	var conflict *cart.ConflictError
	var seller *cart.SellerMismatchError
	var limit *cart.LimitError
	switch {
	case errors.As(err, &conflict):
		return problem.New(problem.CartConflict, "the cart changed since the version in If-Match; read it again").
			WithDetails(cartConflict{CurrentVersion: conflict.Current})
	case errors.Is(err, cart.ErrMerged):
		return problem.New(problem.CartMerged,
			"this guest cart was merged into a member cart; sign in, or start a new guest cart without X-Guest-Token")
	case errors.Is(err, cart.ErrUnknownSKU):
		return problem.New(problem.SKUNotFound, "no such SKU").WithDetails(skuDetails{SKUID: sku})
	case errors.As(err, &seller):
		return problem.New(problem.ValidationFailed, "some fields are invalid").
			WithDetails(problem.Fields{Fields: []problem.FieldError{{Field: "sellerId", Message: seller.Error()}}})
	case errors.As(err, &limit):
		return problem.New(problem.CartLimit, limitMessage(limit)).
			WithDetails(cartLimit{Limit: limit.Limit, Max: limit.Max})
	case err != nil:
		return fmt.Errorf("writing the cart: %w", err)
	}
	return nil
}

func limitMessage(l *cart.LimitError) string {
	switch l.Limit {
	case cart.LimitLines:
		return "a cart holds at most " + strconv.Itoa(l.Max) + " lines"
	case cart.LimitMaxPerOrder:
		return "this SKU sells at most " + strconv.Itoa(l.Max) + " per order"
	}
	return "a line holds at most " + strconv.Itoa(l.Max) + " units"
}

// cartConflict are the details of CART_CONFLICT: the cart's version now.
type cartConflict struct {
	CurrentVersion int64 `json:"currentVersion"`
}

// skuDetails name the SKU a request names and the catalog does not hold.
type skuDetails struct {
	SKUID int64 `json:"skuId"`
}

// cartLimit are the details of CART_LIMIT: which limit (maxPerOrder, unitsPerLine, linesPerCart)
// and its value.
type cartLimit struct {
	Limit string `json:"limit"`
	Max   int    `json:"max"`
}
