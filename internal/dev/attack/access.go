package attack

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// roleAttack: a token of role calls an endpoint of another role, and is 403.
func roleAttack(name, what, method, path string, token func(r *Run) string, body any) Attack {
	return Attack{Name: name, Kind: KindAPI, What: what, Run: func(ctx context.Context, r *Run) Outcome {
		a, err := r.call(ctx, method, path, token(r), body)
		return refused(a, err, http.StatusForbidden, "FORBIDDEN")
	}}
}

// withOrder runs an attack that needs the fixtures.
func withOrder(run func(ctx context.Context, r *Run, f *fixtures) Outcome) func(context.Context, *Run) Outcome {
	return func(ctx context.Context, r *Run) Outcome {
		f, err := r.fixtures(ctx)
		if err != nil {
			return failed("set-up", err)
		}
		return run(ctx, r, f)
	}
}

// stillPending: the first shopper's order has not moved.
func (r *Run) stillPending(ctx context.Context, f *fixtures, out Outcome) Outcome {
	if out.Verdict != Pass {
		return out
	}
	status, err := r.orderStatus(ctx, f.a, f.order)
	if err != nil {
		return failed("reading the order after the attack", err)
	}
	if status != "PENDING_PAYMENT" {
		return fail("the order is %s after the attack, no longer PENDING_PAYMENT", status)
	}
	return out
}

var accessAttacks = []Attack{
	roleAttack("role-shopper-as-ops", "a shopper's token on ops' feature switches is 403",
		http.MethodPut, "/api/v1/ops/features", func(r *Run) string { return r.shopper(3) }, map[string]bool{"cart_stock_hints": false}),
	roleAttack("role-seller-as-ops", "a seller's token making an ops coupon is 403",
		http.MethodPost, "/api/v1/ops/coupons", func(r *Run) string { return r.seller(42) },
		map[string]any{"code": "ATK-SELLER", "kind": "PERCENT", "value": "90", "maxRedemptions": 1000}),
	roleAttack("role-support-as-ops", "support's token on ops' line cancellation is 403",
		http.MethodPost, "/api/v1/ops/orders/1/lines/71/cancel", func(r *Run) string { return r.support() },
		map[string]any{"units": 1, "reason": "damaged"}),
	roleAttack("role-shopper-as-seller", "a shopper's token setting a seller's stock is 403",
		http.MethodPut, "/seller-api/v1/stocks", func(r *Run) string { return r.shopper(3) },
		[]map[string]any{{"sku": skuCode, "warehouseId": 1, "quantity": 0, "sourceUpdatedAt": time.Now().UTC().Format(time.RFC3339)}}),
	roleAttack("role-seller-as-shopper", "a seller's token on a shopper's cart is 403",
		http.MethodGet, "/api/v1/cart", func(r *Run) string { return r.seller(42) }, nil),

	{Name: "idor-order-read", Kind: KindAPI, What: "a shopper reading another shopper's order gets 404, as for no order",
		Run: withOrder(func(ctx context.Context, r *Run, f *fixtures) Outcome {
			a, err := r.call(ctx, http.MethodGet, fmt.Sprintf("/api/v1/orders/%d", f.order), f.b, nil)
			return refused(a, err, http.StatusNotFound, "NOT_FOUND")
		})},
	{Name: "idor-order-list", Kind: KindAPI, What: "a shopper's order list holds none of another shopper's orders",
		Run: withOrder(func(ctx context.Context, r *Run, f *fixtures) Outcome {
			a, err := r.call(ctx, http.MethodGet, "/api/v1/orders", f.b, nil)
			if err != nil || a.status != http.StatusOK {
				return fail("listing: %v %s", err, a)
			}
			if strings.Contains(a.raw, fmt.Sprintf(`"orderId":%d`, f.order)) {
				return fail("the other shopper's order %d is listed: %s", f.order, a)
			}
			return pass("200, not listed")
		})},
	{Name: "idor-order-cancel", Kind: KindAPI, What: "a shopper cancelling another shopper's order gets 404, and the order waits on",
		Run: withOrder(func(ctx context.Context, r *Run, f *fixtures) Outcome {
			a, err := r.call(ctx, http.MethodPost, fmt.Sprintf("/api/v1/orders/%d/cancel", f.order), f.b, nil)
			return r.stillPending(ctx, f, refused(a, err, http.StatusNotFound, "NOT_FOUND"))
		})},
	{Name: "idor-hold-extend", Kind: KindAPI, What: "a shopper extending another shopper's hold gets 404",
		Run: withOrder(func(ctx context.Context, r *Run, f *fixtures) Outcome {
			a, err := r.call(ctx, http.MethodPost, fmt.Sprintf("/api/v1/orders/%d/extend-hold", f.order), f.b, nil)
			return r.stillPending(ctx, f, refused(a, err, http.StatusNotFound, "NOT_FOUND"))
		})},
	{Name: "idor-address", Kind: KindAPI, What: "an order to another shopper's address is 400, and the address book shows only one's own",
		Run: withOrder(func(ctx context.Context, r *Run, f *fixtures) Outcome {
			pv, err := r.cartAndPreview(ctx, f.b, f.sku, "")
			if err != nil {
				return failed("set-up", err)
			}
			a, err := r.call(ctx, http.MethodPost, "/api/v1/orders", f.b, map[string]any{"priceVersion": pv,
				"addressId": f.aAddress, "paymentMethodToken": "tok_ok"}, "Idempotency-Key", "atk-"+r.id+"-addr")
			out := refused(a, err, http.StatusBadRequest, "VALIDATION_FAILED")
			if out.Verdict != Pass {
				return out
			}
			if !strings.Contains(a.raw, "addressId") {
				return fail("the refusal names no addressId: %s", a)
			}
			book, err := r.call(ctx, http.MethodGet, "/api/v1/addresses", f.b, nil)
			if err != nil || strings.Contains(book.raw, fmt.Sprintf(`"addressId":%d`, f.aAddress)) {
				return fail("the other shopper's address is listed: %v %s", err, book)
			}
			return out
		})},
	{Name: "idor-line-cancel", Kind: KindAPI, What: "no shopper cancels a line of an order, another's or its own: 403",
		Run: withOrder(func(ctx context.Context, r *Run, f *fixtures) Outcome {
			for _, who := range []string{f.b, f.a} {
				a, err := r.call(ctx, http.MethodPost, fmt.Sprintf("/api/v1/ops/orders/%d/lines/%d/cancel", f.order, f.sku), who,
					map[string]any{"units": 1, "reason": "damaged"}, "Idempotency-Key", "atk-"+r.id+"-line")
				if out := refused(a, err, http.StatusForbidden, "FORBIDDEN"); out.Verdict != Pass {
					return out
				}
			}
			return pass("403 FORBIDDEN for both")
		})},

	{Name: "guest-token-forged", Kind: KindAPI, What: "a guest token the server did not issue is 401 INVALID_GUEST_TOKEN",
		Run: func(ctx context.Context, r *Run) Outcome {
			a, err := r.call(ctx, http.MethodGet, "/api/v1/cart", "", nil, "X-Guest-Token", strings.Repeat("A", 43))
			return refused(a, err, http.StatusUnauthorized, "INVALID_GUEST_TOKEN")
		}},
	{Name: "guest-token-tampered", Kind: KindAPI, What: "a guest token the server issued, one character changed, is 401",
		Run: func(ctx context.Context, r *Run) Outcome {
			a, err := r.call(ctx, http.MethodGet, "/api/v1/cart", "", nil)
			tok := a.header.Get("X-Guest-Token")
			if err != nil || a.status != http.StatusOK || len(tok) < 10 {
				return fail("no guest token issued: %v %s", err, a)
			}
			last := byte('A')
			if tok[len(tok)-1] == 'A' {
				last = 'B'
			}
			a, err = r.call(ctx, http.MethodGet, "/api/v1/cart", "", nil, "X-Guest-Token", tok[:len(tok)-1]+string(last))
			return refused(a, err, http.StatusUnauthorized, "INVALID_GUEST_TOKEN")
		}},
	{Name: "guest-token-merge-forged", Kind: KindAPI, What: "merging a guest cart by a made-up token is 400 and merges nothing",
		Run: func(ctx context.Context, r *Run) Outcome {
			a, err := r.call(ctx, http.MethodPost, "/api/v1/cart/merge", r.shopper(4), map[string]any{"guestCartToken": strings.Repeat("B", 43)})
			return refused(a, err, http.StatusBadRequest, "VALIDATION_FAILED")
		}},

	{Name: "seller-stock-of-another", Kind: KindAPI, What: "seller 43 setting the stock of seller 42's SKU by id is 403",
		Run: withOrder(func(ctx context.Context, r *Run, f *fixtures) Outcome {
			a, err := r.call(ctx, http.MethodPut, "/seller-api/v1/stocks", r.seller(43), []map[string]any{{"skuId": f.sku,
				"warehouseId": 1, "quantity": 0, "sourceUpdatedAt": time.Now().UTC().Format(time.RFC3339Nano)}})
			return refused(a, err, http.StatusForbidden, "FORBIDDEN")
		})},
	{Name: "seller-sku-code-of-another", Kind: KindAPI, What: "seller 43 writing seller 42's SKU code makes its own SKU; 42's price does not move",
		Run: withOrder(func(ctx context.Context, r *Run, f *fixtures) Outcome {
			price := func() (string, error) {
				c, err := r.call(ctx, http.MethodPut, fmt.Sprintf("/api/v1/cart/items/%d", f.sku), r.shopper(5),
					map[string]any{"sellerId": 42, "quantity": 1})
				items, _ := c.at("items").([]any)
				if err != nil || c.status != http.StatusOK || len(items) == 0 {
					return "", fmt.Errorf("the cart: %v %s", err, c)
				}
				p, _ := items[0].(map[string]any)["price"].(string)
				return p, nil
			}
			before, err := price()
			if err != nil {
				return failed("set-up", err)
			}
			a, err := r.call(ctx, http.MethodPut, "/seller-api/v1/skus", r.seller(43), []map[string]any{{"sku": skuCode,
				"title": "hijacked", "price": "0.01", "currency": "TRY", "maxPerOrder": 5}})
			if err != nil || a.status != http.StatusOK {
				return fail("want 200 for seller 43's own SKU: %v %s", err, a)
			}
			results, _ := a.at("results").([]any)
			if len(results) != 1 || results[0].(map[string]any)["skuId"] == float64(f.sku) {
				return fail("seller 43 wrote seller 42's SKU %d: %s", f.sku, a)
			}
			after, err := price()
			if err != nil {
				return failed("reading the price", err)
			}
			if after != before {
				return fail("seller 42's SKU went from %s to %s", before, after)
			}
			return pass("another SKU of seller 43's; 42's price stays %s", after)
		})},
	{Name: "seller-campaign-on-another", Kind: KindAPI, What: "seller 43 starting a campaign on seller 42's SKU is 400",
		Run: withOrder(func(ctx context.Context, r *Run, f *fixtures) Outcome {
			a, err := r.call(ctx, http.MethodPost, "/seller-api/v1/campaigns", r.seller(43), map[string]any{"name": "hijack",
				"skuIds": []int64{f.sku}, "kind": "PERCENT", "value": "99", "startsAt": "2099-01-01T00:00:00Z",
				"endsAt": "2099-01-02T00:00:00Z"})
			return refused(a, err, http.StatusBadRequest, "VALIDATION_FAILED")
		})},
	{Name: "seller-campaign-priority", Kind: KindAPI, What: "a seller's campaign with a priority of the platform's (100 and up) is 400",
		Run: withOrder(func(ctx context.Context, r *Run, f *fixtures) Outcome {
			a, err := r.call(ctx, http.MethodPost, "/seller-api/v1/campaigns", r.seller(42), map[string]any{"name": "outrank",
				"skuIds": []int64{f.sku}, "kind": "PERCENT", "value": "1", "priority": 1_000_000,
				"startsAt": "2099-01-01T00:00:00Z", "endsAt": "2099-01-02T00:00:00Z"})
			if err == nil && a.status == http.StatusCreated {
				r.endCampaignLater(r.seller(42), a.num("id"))
			}
			return refused(a, err, http.StatusBadRequest, "VALIDATION_FAILED")
		})},
	{Name: "seller-end-campaign-of-another", Kind: KindAPI, What: "seller 43 ending seller 42's campaign is 404",
		Run: withOrder(func(ctx context.Context, r *Run, f *fixtures) Outcome {
			mine, err := r.call(ctx, http.MethodPost, "/seller-api/v1/campaigns", r.seller(42), map[string]any{"name": "later",
				"skuIds": []int64{f.sku}, "kind": "PERCENT", "value": "1", "startsAt": "2099-01-01T00:00:00Z",
				"endsAt": "2099-01-02T00:00:00Z"})
			if err != nil || mine.status != http.StatusCreated {
				return fail("set-up: seller 42's campaign: %v %s", err, mine)
			}
			r.endCampaignLater(r.seller(42), mine.num("id"))
			a, err := r.call(ctx, http.MethodPost, fmt.Sprintf("/seller-api/v1/campaigns/%d/end", mine.num("id")), r.seller(43), nil)
			return refused(a, err, http.StatusNotFound, "NOT_FOUND")
		})},
}

func (r *Run) endCampaignLater(token string, id int64) {
	r.later(func(ctx context.Context) {
		_, _ = r.call(ctx, http.MethodPost, fmt.Sprintf("/seller-api/v1/campaigns/%d/end", id), token, nil)
	})
}
