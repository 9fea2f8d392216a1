package attack

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
)

var abuseAttacks = []Attack{
	{Name: "coupon-concurrent-reuse", Kind: KindAPI, Long: true,
		What: "eight shoppers at once ordering with a coupon of one redemption: one order gets it, the others 409",
		Run: withOrder(func(ctx context.Context, r *Run, f *fixtures) Outcome {
			code := "ATK-ONCE-" + strings.ToUpper(r.id)
			c, err := r.call(ctx, http.MethodPost, "/api/v1/ops/coupons", r.ops(), map[string]any{"code": code, "kind": "FIXED",
				"value": "1.00", "currency": "TRY", "maxRedemptions": 1, "endsAt": "2099-01-01T00:00:00Z"})
			if err != nil || c.status != http.StatusCreated {
				return fail("set-up: the coupon: %v %s", err, c)
			}
			type shopper struct {
				token   string
				address int64
				pv      string
			}
			shoppers := make([]shopper, 8)
			for i := range shoppers {
				s := &shoppers[i]
				s.token = r.shopper(int64(100 + i))
				if s.address, err = r.address(ctx, s.token); err != nil {
					return failed("set-up", err)
				}
				if s.pv, err = r.cartAndPreview(ctx, s.token, f.sku, code); err != nil {
					return failed("set-up", err)
				}
			}
			answers := make([]answer, len(shoppers))
			errs := make([]error, len(shoppers))
			var wg sync.WaitGroup
			for i, s := range shoppers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					answers[i], errs[i] = r.call(ctx, http.MethodPost, "/api/v1/orders", s.token, map[string]any{
						"priceVersion": s.pv, "addressId": s.address, "paymentMethodToken": "tok_ok", "couponCode": code},
						"Idempotency-Key", fmt.Sprintf("atk-%s-coupon-%d", r.id, i))
				}()
			}
			wg.Wait()
			placed := 0
			for i, a := range answers {
				if errs[i] != nil {
					return failed("order", errs[i])
				}
				switch {
				case a.status == http.StatusCreated:
					placed++
				case refusal(a, http.StatusConflict, "COUPON_NOT_APPLICABLE") == "":
				default:
					return fail("an order answered %s", a)
				}
			}
			if placed != 1 {
				return fail("%d orders got the coupon of one redemption", placed)
			}
			return pass("1 order placed, %d refused 409 COUPON_NOT_APPLICABLE", len(answers)-1)
		})},
	{Name: "open-order-cap-many-keys", Kind: KindAPI,
		What: "one shopper placing unpaid orders under new keys meets 429 TOO_MANY_OPEN_ORDERS with Retry-After",
		Run: withOrder(func(ctx context.Context, r *Run, f *fixtures) Outcome {
			token := r.shopper(200)
			address, err := r.address(ctx, token)
			if err != nil {
				return failed("set-up", err)
			}
			pv, err := r.cartAndPreview(ctx, token, f.sku, "")
			if err != nil {
				return failed("set-up", err)
			}
			for i := range 12 {
				a, err := r.call(ctx, http.MethodPost, "/api/v1/orders", token, map[string]any{"priceVersion": pv,
					"addressId": address, "paymentMethodToken": "tok_3ds"}, "Idempotency-Key", fmt.Sprintf("atk-%s-cap-%d", r.id, i))
				if err != nil {
					return failed("order", err)
				}
				switch {
				case a.status == http.StatusCreated:
					r.cancelLater(token, a.num("orderId"))
				case a.status == http.StatusTooManyRequests:
					if why := refusal(a, http.StatusTooManyRequests, "TOO_MANY_OPEN_ORDERS"); why != "" {
						return fail("%s", why)
					}
					return pass("%d orders placed, then 429 TOO_MANY_OPEN_ORDERS", i)
				default:
					return fail("order %d answered %s", i+1, a)
				}
			}
			return fail("12 unpaid orders under 12 keys were all placed: no open-order cap")
		})},
	{Name: "preview-rate-limit", Kind: KindAPI, What: "one shopper's previews in a tight loop meet 429 RATE_LIMITED with Retry-After",
		Run: withOrder(func(ctx context.Context, r *Run, f *fixtures) Outcome {
			token := r.shopper(300)
			if _, err := r.cartAndPreview(ctx, token, f.sku, ""); err != nil {
				return failed("set-up", err)
			}
			for i := range 500 {
				a, err := r.call(ctx, http.MethodPost, "/api/v1/checkout/preview", token, map[string]any{"couponCode": fmt.Sprintf("GUESS-%d", i)})
				if err != nil {
					return failed("preview", err)
				}
				if a.status == http.StatusTooManyRequests {
					return refused(a, nil, http.StatusTooManyRequests, "RATE_LIMITED")
				}
				if a.status != http.StatusOK {
					return fail("preview %d answered %s", i+1, a)
				}
			}
			return fail("500 previews in a row were never limited")
		})},
	{Name: "coupon-code-oracle", Kind: KindAPI,
		What: "a code no coupon has and a live coupon that cannot apply to the cart get the same answer",
		Run: withOrder(func(ctx context.Context, r *Run, f *fixtures) Outcome {
			code := "ATK-MUGS-" + strings.ToUpper(r.id)
			c, err := r.call(ctx, http.MethodPost, "/api/v1/ops/coupons", r.ops(), map[string]any{"code": code, "kind": "FIXED",
				"value": "1.00", "currency": "TRY", "maxRedemptions": 10, "sellerId": 43, "endsAt": "2099-01-01T00:00:00Z"})
			if err != nil || c.status != http.StatusCreated {
				return fail("set-up: the coupon: %v %s", err, c)
			}
			token := r.shopper(301)
			if _, err := r.cartAndPreview(ctx, token, f.sku, ""); err != nil {
				return failed("set-up", err)
			}
			var seen []any
			for _, try := range []string{code, "ATK-NONE-" + strings.ToUpper(r.id)} {
				a, err := r.call(ctx, http.MethodPost, "/api/v1/checkout/preview", token, map[string]any{"couponCode": try})
				if err != nil || a.status != http.StatusOK {
					return fail("preview with %s: %v %s", try, err, a)
				}
				m, _ := a.at("coupon").(map[string]any)
				if m == nil || m["applies"] != false {
					return fail("preview with %s: %s", try, a)
				}
				seen = append(seen, fmt.Sprint(m["reason"], " / ", m["message"]))
			}
			if seen[0] != seen[1] {
				return fail("a live coupon says %q, a made-up code %q: the codes can be told apart", seen[0], seen[1])
			}
			return pass("both: %s", seen[0])
		})},
	{Name: "preview-stock-counts", Kind: KindAPI, What: "the preview shows no exact stock above the low-stock threshold",
		Run: withOrder(func(ctx context.Context, r *Run, f *fixtures) Outcome {
			token := r.shopper(302)
			if _, err := r.cartAndPreview(ctx, token, f.sku, ""); err != nil {
				return failed("set-up", err)
			}
			a, err := r.call(ctx, http.MethodPost, "/api/v1/checkout/preview", token, nil)
			if err != nil || a.status != http.StatusOK {
				return fail("preview: %v %s", err, a)
			}
			if strings.Contains(a.raw, `"available":`) {
				return fail("the preview shows a count of a SKU with about 100,000 units: %s", a)
			}
			return pass("hints only")
		})},
}
