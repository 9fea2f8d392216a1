package e2e_test

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOrder_OpenOrderCap_FourthRefusedConcurrentNeverPassCancelFreesAPlace: a shopper sends eight
// 3-D Secure orders at once under the default cap of 3 (ORDERS_MAX_OPEN_PER_SHOPPER): exactly three
// are placed, the others get 429 TOO_MANY_OPEN_ORDERS with Retry-After and reserve nothing. Once
// the shopper cancels one, a refused request sent again with its own key is placed: the refusal
// was not recorded under the key.
func TestOrder_OpenOrderCap_FourthRefusedConcurrentNeverPassCancelFreesAPlace(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	sku := s.proofSKU("CAP1", 50)
	sh := s.shopper(7401)
	sh.fill(map[int64]int32{sku: 1})
	pv := sh.preview()

	replies := make([]reply, 8)
	keys := make([]string, len(replies))
	var wg sync.WaitGroup
	for i := range replies {
		keys[i] = fmt.Sprintf("cap-%d-%s", i, randomHex(4))
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies[i] = sh.order(keys[i], pv, "tok_3ds")
		}()
	}
	wg.Wait()
	var placed []reply
	var refusedKey string
	for i, r := range replies {
		switch r.status {
		case http.StatusCreated:
			assert.Equal(t, "PENDING_PAYMENT", r.str("status"))
			placed = append(placed, r)
		case http.StatusTooManyRequests:
			assert.Equal(t, "TOO_MANY_OPEN_ORDERS", r.str("code"), r.raw)
			assert.NotEmpty(t, r.str("message"))
			assert.Equal(t, int64(3), r.int("limit"))
			assertRetryAfter(t, r, 1, 60)
			refusedKey = keys[i]
		default:
			t.Errorf("unexpected answer %d: %s", r.status, r.raw)
		}
	}
	require.Len(t, placed, 3, "concurrent orders never pass the cap")
	require.NotEmpty(t, refusedKey)

	fourthKey := "cap-fourth-" + randomHex(4)
	fourth := sh.order(fourthKey, pv, "tok_3ds")
	assert.Equal(t, http.StatusTooManyRequests, fourth.status, fourth.raw)
	s.recordHistory("refused-open-order-cap", sh.workflowOf(fourthKey))
	assert.Equal(t, "TOO_MANY_OPEN_ORDERS", fourth.str("code"))
	assertRetryAfter(t, fourth, 1, 60)
	assert.Equal(t, int64(3), s.scalar(`SELECT count(*) FROM orders WHERE user_id = $1`, sh.id), "a refused order has no row")
	assert.Equal(t, int64(3), s.scalar(`SELECT COALESCE(sum(reserved), 0) FROM inventory WHERE sku_id = $1`, sku),
		"nothing reserved for the refused ones")
	assert.Equal(t, int64(3), s.scalar(`SELECT count(*) FROM paysim.intents i JOIN orders o ON o.id = i.order_id
		WHERE o.user_id = $1`, sh.id), "nothing authorized for them")
	assert.Zero(t, s.scalar(`SELECT count(*) FROM idempotency_records WHERE user_id = $1 AND idempotency_key = $2`,
		sh.id, refusedKey), "the refusal is not the key's answer")

	cancel := s.call(http.MethodPost, fmt.Sprintf("/api/v1/orders/%d/cancel", placed[0].int("orderId")), sh.token, nil, nil)
	require.Equal(t, http.StatusOK, cancel.status, cancel.raw)
	again := sh.order(refusedKey, pv, "tok_3ds")
	require.Equal(t, http.StatusCreated, again.status, "the same key, once a place is free: %s", again.raw)
	after := sh.order("cap-after-"+randomHex(4), pv, "tok_3ds")
	assert.Equal(t, http.StatusTooManyRequests, after.status, "three open again: %s", after.raw)
	assert.Equal(t, int64(3), s.scalar(`SELECT count(*) FROM orders WHERE user_id = $1 AND status = 'PENDING_PAYMENT'`, sh.id))
}

func assertRetryAfter(t *testing.T, r reply, least, most int) {
	t.Helper()
	n, err := strconv.Atoi(r.header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After in seconds: %q", r.header.Get("Retry-After"))
	assert.GreaterOrEqual(t, n, least)
	assert.LessOrEqual(t, n, most)
}
