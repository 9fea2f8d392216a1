package e2e_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCurrency_JPYAndKWD_ChargedCapturedRefundedInTheirMinorUnits places an order in a currency of
// no decimals (JPY) and one of three (KWD), each paid at once, then refunds it in two line
// cancellations: every amount — the API's strings, the payments row, the provider's intent — is in
// the currency's own minor unit, never in hundredths.
func TestCurrency_JPYAndKWD_ChargedCapturedRefundedInTheirMinorUnits(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	cases := []struct {
		currency, price, total, unit string
		unitMinor                    int64
	}{
		{"JPY", "1500", "3000", "1500", 1500},
		{"KWD", "12.345", "24.690", "12.345", 12345},
	}
	for i, c := range cases {
		code := "CUR-" + c.currency
		r := s.call(http.MethodPut, "/seller-api/v1/skus", s.seller(42), nil, []map[string]any{{"sku": code,
			"title": "Item priced in " + c.currency, "price": c.price, "currency": c.currency, "maxPerOrder": 5}})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		sku := int64(r.body["results"].([]any)[0].(map[string]any)["skuId"].(float64))
		r = s.call(http.MethodPut, "/seller-api/v1/stocks", s.seller(42), nil, []map[string]any{{"sku": code,
			"warehouseId": 1, "quantity": 10, "sourceUpdatedAt": "2026-11-30T10:00:00Z"}})
		require.Equal(t, http.StatusOK, r.status, r.raw)

		sh := s.shopper(int64(9301 + i))
		sh.fill(map[int64]int32{sku: 2})
		pv := sh.s.call(http.MethodPost, "/api/v1/checkout/preview", sh.token, nil, map[string]any{})
		require.Equal(t, http.StatusOK, pv.status, pv.raw)
		assert.Equal(t, c.total, pv.str("total"), c.currency)
		assert.Equal(t, c.currency, pv.str("currency"))

		placed := sh.order("cur-"+randomHex(6), pv.str("priceVersion"), "tok_ok")
		require.Equal(t, http.StatusCreated, placed.status, placed.raw)
		id := placed.int("orderId")
		o := s.waitFinal(sh.token, id, 30*time.Second)
		require.Equal(t, "CONFIRMED", o.str("status"), o.raw)
		assert.Equal(t, c.total, o.str("total"))
		assert.Equal(t, c.total, o.str("payment", "captured"))
		assert.Equal(t, 2*c.unitMinor, s.scalar(`SELECT total_minor FROM orders WHERE id = $1`, id))
		assert.Equal(t, 2*c.unitMinor, s.scalar(`SELECT captured_minor FROM payments WHERE order_id = $1`, id))
		assert.Equal(t, 2*c.unitMinor, s.scalar(`SELECT amount_minor FROM paysim.intents WHERE order_id = $1 AND currency = $2`, id, c.currency))
		assert.Equal(t, 2*c.unitMinor, s.scalar(`SELECT captured_minor FROM paysim.intents WHERE order_id = $1`, id))

		// One unit back (a partial refund), then the other (the rest of the capture).
		for n, key := range []string{"a", "b"} {
			lc := s.cancelLine(id, sku, fmt.Sprintf("cur-%s-%s", c.currency, key), 1, "damaged")
			require.Equal(t, http.StatusOK, lc.status, lc.raw)
			assert.Equal(t, c.unit, lc.str("cancellation", "refund"), c.currency)
			assert.Equal(t, int64(n+1)*c.unitMinor, s.scalar(`SELECT refunded_minor FROM paysim.intents WHERE order_id = $1`, id))
		}
		var status string
		require.NoError(t, s.pool.QueryRow(s.ctx, `SELECT status FROM paysim.intents WHERE order_id = $1`, id).Scan(&status))
		assert.Equal(t, "REFUNDED", status, c.currency)
		o = s.call(http.MethodGet, fmt.Sprintf("/api/v1/orders/%d", id), sh.token, nil, nil)
		require.Equal(t, http.StatusOK, o.status, o.raw)
		assert.Equal(t, c.total, o.str("totals", "refunded"), c.currency)
		assert.Equal(t, c.total, o.str("payment", "refunded"), c.currency)
		assert.Equal(t, c.currency, o.str("payment", "currency"))
	}
	s.auditClean()
}
