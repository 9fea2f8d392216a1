package attack

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"time"
)

// fixtures are what several attacks need made first, once per run: a SKU of the run's (seller
// 42's, plenty of stock), two shoppers with an address each, and an order of the first one waiting
// for its 3-D Secure answer.
type fixtures struct {
	sku                int64
	a, b               string // the shoppers' tokens
	aAddress, bAddress int64
	order              int64
	orderKey, intent   string
}

// skuCode is the run's SKU, seller 42's: the same code every run (an update after the first), so
// that runs against a long-lived stack do not grow its catalog.
const skuCode = "ATK-ITEM"

var intentRe = regexp.MustCompile(`/paysim/3ds/([^/?#]+)`)

// fixtures makes the fixtures the first time; an error fails every attack that needs them.
func (r *Run) fixtures(ctx context.Context) (*fixtures, error) {
	r.setup.Do(func() { r.fixErr = r.makeFixtures(ctx) })
	return &r.fix, r.fixErr
}

func (r *Run) makeFixtures(ctx context.Context) error {
	f := &r.fix
	var err error
	if f.sku, err = r.ensureSKU(ctx, skuCode, 100_000); err != nil {
		return err
	}
	f.a, f.b = r.shopper(1), r.shopper(2)
	if f.aAddress, err = r.address(ctx, f.a); err != nil {
		return err
	}
	if f.bAddress, err = r.address(ctx, f.b); err != nil {
		return err
	}
	f.orderKey = "atk-" + r.id + "-a"
	o, err := r.placeOrder(ctx, f.a, f.aAddress, f.sku, f.orderKey, "tok_3ds", "")
	if err != nil {
		return err
	}
	if o.status != http.StatusCreated {
		return fmt.Errorf("the first shopper's order: %s", o)
	}
	f.order = o.num("orderId")
	m := intentRe.FindStringSubmatch(o.str("payment", "redirectUrl"))
	if m == nil {
		return fmt.Errorf("the order's 3-D Secure page names no intent: %s", o)
	}
	f.intent = m[1]
	r.cancelLater(f.a, f.order)
	return nil
}

// ensureSKU creates or updates a SKU of seller 42 and sets its stock in warehouse 1.
func (r *Run) ensureSKU(ctx context.Context, code string, stock int) (int64, error) {
	seller := r.seller(42)
	a, err := r.call(ctx, http.MethodPut, "/seller-api/v1/skus", seller, []map[string]any{{"sku": code,
		"title": "Attack suite item", "price": "10.00", "currency": "TRY", "maxPerOrder": 5}})
	if err != nil || a.status != http.StatusOK {
		return 0, fmt.Errorf("SKU %s: %v %s", code, err, a)
	}
	results, _ := a.at("results").([]any)
	if len(results) != 1 {
		return 0, fmt.Errorf("SKU %s: %s", code, a)
	}
	id, _ := results[0].(map[string]any)["skuId"].(float64)
	a, err = r.call(ctx, http.MethodPut, "/seller-api/v1/stocks", seller, []map[string]any{{"sku": code, "warehouseId": 1,
		"quantity": stock, "sourceUpdatedAt": time.Now().UTC().Format(time.RFC3339Nano)}})
	if err != nil || a.status != http.StatusOK {
		return 0, fmt.Errorf("stock of %s: %v %s", code, err, a)
	}
	return int64(id), nil
}

// address gives the shopper an address in Istanbul.
func (r *Run) address(ctx context.Context, token string) (int64, error) {
	a, err := r.call(ctx, http.MethodPost, "/api/v1/addresses", token,
		map[string]any{"city": "Istanbul", "line1": "Attack suite 1", "lat": 41.01, "lon": 28.97})
	if err != nil || a.status != http.StatusCreated {
		return 0, fmt.Errorf("an address: %v %s", err, a)
	}
	return a.num("addressId"), nil
}

// placeOrder puts one unit of sku in the shopper's cart, previews it (with the coupon, if any)
// and places the order with the key and payment token.
func (r *Run) placeOrder(ctx context.Context, token string, address, sku int64, key, payment, coupon string) (answer, error) {
	pv, err := r.cartAndPreview(ctx, token, sku, coupon)
	if err != nil {
		return answer{}, err
	}
	body := map[string]any{"priceVersion": pv, "addressId": address, "paymentMethodToken": payment}
	if coupon != "" {
		body["couponCode"] = coupon
	}
	return r.call(ctx, http.MethodPost, "/api/v1/orders", token, body, "Idempotency-Key", key)
}

// cartAndPreview puts one unit of sku in the shopper's cart and returns the preview's priceVersion.
func (r *Run) cartAndPreview(ctx context.Context, token string, sku int64, coupon string) (string, error) {
	a, err := r.call(ctx, http.MethodPut, fmt.Sprintf("/api/v1/cart/items/%d", sku), token,
		map[string]any{"sellerId": 42, "quantity": 1})
	if err != nil || a.status != http.StatusOK {
		return "", fmt.Errorf("cart: %v %s", err, a)
	}
	var body any
	if coupon != "" {
		body = map[string]any{"couponCode": coupon}
	}
	p, err := r.call(ctx, http.MethodPost, "/api/v1/checkout/preview", token, body)
	if err != nil || p.status != http.StatusOK {
		return "", fmt.Errorf("preview: %v %s", err, p)
	}
	return p.str("priceVersion"), nil
}

// cancelLater cancels the order when the run ends, so that it holds no stock or open-order place.
func (r *Run) cancelLater(token string, order int64) {
	r.later(func(ctx context.Context) {
		_, _ = r.call(ctx, http.MethodPost, fmt.Sprintf("/api/v1/orders/%d/cancel", order), token, nil)
	})
}

// orderStatus is the order's status as its shopper reads it.
func (r *Run) orderStatus(ctx context.Context, token string, order int64) (string, error) {
	a, err := r.call(ctx, http.MethodGet, fmt.Sprintf("/api/v1/orders/%d", order), token, nil)
	if err != nil {
		return "", err
	}
	if a.status != http.StatusOK {
		return "", fmt.Errorf("reading order %d: %s", order, a)
	}
	return a.str("status"), nil
}
