package e2e_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/payment"
)

// proofSKU creates a SKU of seller 42 with stock in the Istanbul warehouse, through the seller API.
func (s *stack) proofSKU(code string, stock int) int64 {
	s.t.Helper()
	seller := s.seller(42)
	r := s.call(http.MethodPut, "/seller-api/v1/skus", seller, nil, []map[string]any{{"sku": code, "title": "Proof " + code,
		"price": "100.00", "currency": "TRY", "maxPerOrder": 5}})
	require.Equal(s.t, http.StatusOK, r.status, r.raw)
	id := int64(r.body["results"].([]any)[0].(map[string]any)["skuId"].(float64))
	r = s.call(http.MethodPut, "/seller-api/v1/stocks", seller, nil, []map[string]any{{"sku": code, "warehouseId": 1,
		"quantity": stock, "sourceUpdatedAt": time.Now().UTC().Format(time.RFC3339Nano)}})
	require.Equal(s.t, http.StatusOK, r.status, r.raw)
	return id
}

type placed struct {
	sh       *shopper
	key      string
	orderID  int64
	redirect string
}

// placeOrders has n new shoppers each order one unit of sku, from clients goroutines; every
// order is sent twice at once (a double click). then, when given, runs right after each order.
func (s *stack) placeOrders(n, clients int, firstUser int64, sku int64, token string, then func(i int, p placed)) []placed {
	s.t.Helper()
	out := make([]placed, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				sh := s.shopper(firstUser + int64(i))
				sh.fill(map[int64]int32{sku: 1})
				pv := sh.preview()
				key := "proof-" + randomHex(8)
				var a, b reply
				var inner sync.WaitGroup
				inner.Add(2)
				go func() { defer inner.Done(); a = sh.orderRetrying(key, pv, token) }()
				go func() { defer inner.Done(); b = sh.orderRetrying(key, pv, token) }()
				inner.Wait()
				if !assert.Equal(s.t, http.StatusCreated, a.status, a.raw) || !assert.Equal(s.t, a.int("orderId"), b.int("orderId"), "a double click makes one order") {
					return
				}
				out[i] = placed{sh: sh, key: key, orderID: a.int("orderId"), redirect: a.str("payment", "redirectUrl")}
				if then != nil {
					then(i, out[i])
				}
			}
		}()
	}
	wg.Wait()
	require.False(s.t, s.t.Failed())
	return out
}

// orderRetrying repeats the request with the same key while the answer is 503, as a client does.
func (sh *shopper) orderRetrying(key, pv, token string) reply {
	for i := 0; ; i++ {
		r := sh.order(key, pv, token)
		if r.status != http.StatusServiceUnavailable || i == 20 {
			return r
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestSeedProof3_70Paid30Expired proves the saga end to end through HTTP only: 100 orders, 70
// paid through the provider's 3-D Secure page and its signed webhook, 30 left to expire.
func TestSeedProof3_70Paid30Expired(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{hold: 15 * time.Second})
	sku := s.proofSKU("PROOF3", 100)
	// Seven shoppers in ten pay on the provider's page right after ordering; the others walk away.
	pays := func(i int) bool { return i%10 < 7 }
	orders := s.placeOrders(100, 10, 30001, sku, "tok_3ds", func(i int, p placed) {
		if pays(i) {
			page := s.answer3DS(p.redirect, "approve")
			assert.Equal(t, http.StatusOK, page.status, "order %d", p.orderID)
		}
	})
	statuses := map[string]int{}
	for _, o := range orders {
		final := s.waitFinal(o.sh.token, o.orderID, 60*time.Second)
		statuses[final.str("status")+"/"+final.str("failureCode")]++
	}
	assert.Equal(t, map[string]int{"CONFIRMED/": 70, "FAILED/HOLD_EXPIRED": 30}, statuses)

	assert.Equal(t, int64(30), s.scalar(`SELECT on_hand FROM inventory WHERE sku_id = $1`, sku), "70 units left the warehouse")
	assert.Zero(t, s.scalar(`SELECT reserved FROM inventory WHERE sku_id = $1`, sku))
	assert.Equal(t, int64(70), s.scalar(`SELECT count(*) FROM stock_reservations WHERE sku_id = $1 AND status = 'CONFIRMED'`, sku))
	assert.Equal(t, int64(30), s.scalar(`SELECT count(*) FROM stock_reservations WHERE sku_id = $1 AND status = 'RELEASED'`, sku))
	assert.Zero(t, s.scalar(`SELECT count(*) FROM paysim.intents i JOIN orders o ON o.id = i.order_id
		WHERE i.status = 'CAPTURED' AND o.status <> 'CONFIRMED'`), "every captured payment belongs to a CONFIRMED order")
	assert.Equal(t, int64(70), s.scalar(`SELECT count(*) FROM paysim.intents i JOIN orders o ON o.id = i.order_id
		WHERE i.status = 'CAPTURED' AND i.captured_minor = o.total_minor`))
	assert.Equal(t, int64(30), s.scalar(`SELECT count(*) FROM paysim.intents WHERE status = 'VOIDED'`))

	// A late payment for an expired order: the page refuses it, and a valid late webhook is
	// acknowledged but changes nothing.
	late := orders[99]
	require.False(t, pays(99))
	assert.Equal(t, http.StatusConflict, s.answer3DS(late.redirect, "approve").status)
	intent := intentRe.FindStringSubmatch(late.redirect)[1]
	body := []byte(fmt.Sprintf(`{"id":"evt_late_%s","type":%q,"created":%q,"intent":{"id":%q,"idempotencyKey":"order-%d","status":"AUTHORIZED"}}`,
		randomHex(4), payment.EventAuthorized, time.Now().UTC().Format(time.RFC3339), intent, late.orderID))
	assert.Equal(t, http.StatusOK, s.webhook(body, s.cfg.PaymentWebhookSecret).status)
	time.Sleep(500 * time.Millisecond)
	after := s.waitFinal(late.sh.token, late.orderID, time.Second)
	assert.Equal(t, "FAILED", after.str("status"))
	assert.Equal(t, "0.00", after.str("payment", "captured"), "no money kept without goods")
}

// TestWorkerKilledMidBatch_EveryOrderEndsAndStockIsExact kills the worker process (SIGKILL) while
// orders are being placed and paid, starts a new one, and checks that nothing was lost.
func TestWorkerKilledMidBatch_EveryOrderEndsAndStockIsExact(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	s := startStack(t, stackOptions{hold: time.Minute, noWorker: true})
	sku := s.proofSKU("KILL", 100)
	a := s.workerProcess(bin)

	var wg sync.WaitGroup
	var result []placed
	wg.Add(1)
	go func() {
		defer wg.Done()
		result = s.placeOrders(40, 8, 40001, sku, "tok_ok", nil)
	}()
	// Let part of the batch through, then kill the worker in the middle of it.
	deadline := time.Now().Add(time.Minute)
	for s.scalar(`SELECT count(*) FROM orders`) < 10 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, a.Process.Signal(syscall.SIGKILL))
	_, _ = a.Process.Wait()
	b := s.workerProcess(bin)
	defer func() { _ = b.Process.Kill(); _, _ = b.Process.Wait() }()
	wg.Wait()
	require.Len(t, result, 40)

	confirmed := 0
	for _, o := range result {
		final := s.waitFinal(o.sh.token, o.orderID, 90*time.Second)
		if assert.Equal(t, "CONFIRMED", final.str("status"), final.raw) {
			confirmed++
		}
	}
	assert.Equal(t, 40, confirmed)
	assert.Equal(t, int64(40), s.scalar(`SELECT count(*) FROM orders`), "no order lost, none doubled")
	assert.Equal(t, int64(60), s.scalar(`SELECT on_hand FROM inventory WHERE sku_id = $1`, sku))
	assert.Zero(t, s.scalar(`SELECT reserved FROM inventory WHERE sku_id = $1`, sku))
	assert.Equal(t, int64(40), s.scalar(`SELECT count(*) FROM paysim.intents WHERE status = 'CAPTURED'`), "each captured once")
	assert.Equal(t, int64(40), s.scalar(`SELECT count(*) FROM stock_reservations WHERE status = 'CONFIRMED'`))
}

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// buildBinary builds bin/checkout's code once per test run, and bin/checkout-dev's beside it.
func buildBinary(t *testing.T) string {
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "checkout-e2e-bin-")
		if err != nil {
			buildErr = err
			return
		}
		buildPath = filepath.Join(dir, "checkout")
		out, err := exec.Command("go", "build", "-o", dir+"/", "../cmd/checkout", "../cmd/checkout-dev").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return buildPath
}

// buildHarness is the harness's binary, checkout-dev, built beside buildBinary's checkout, which it
// runs.
func buildHarness(t *testing.T) string {
	return filepath.Join(filepath.Dir(buildBinary(t)), "checkout-dev")
}

// workerProcess runs `checkout worker` against this stack's database and Temporal task queue.
// It leaves the namespace's schedules alone unless env (KEY=value pairs, applied last) says
// otherwise.
func (s *stack) workerProcess(bin string, env ...string) *exec.Cmd {
	s.t.Helper()
	cmd := exec.Command(bin, "worker")
	cmd.Env = append(os.Environ(),
		"DATABASE_URL="+s.cfg.DatabaseURL,
		"TEMPORAL_ADDRESS="+s.cfg.TemporalAddress,
		"TEMPORAL_TASK_QUEUE="+s.cfg.TaskQueue,
		"HOLD_TTL="+s.cfg.HoldTTL.String(),
		"PUBLIC_BASE_URL="+s.cfg.PublicBaseURL,
		"PAYMENT_WEBHOOK_URL="+s.cfg.PaymentWebhookURL,
		"AUTH_JWT_SECRET="+s.cfg.JWTSecret,
		"PAYMENT_WEBHOOK_SECRET="+s.cfg.PaymentWebhookSecret,
		"PAYMENT_PROVIDER="+s.cfg.PaymentProvider,
		"TEMPORAL_CODEC_KEY="+base64.StdEncoding.EncodeToString(s.cfg.CodecKey.Secret),
		"TEMPORAL_CODEC_KID="+s.cfg.CodecKey.ID,
		"NATS_URL="+s.cfg.Events.NATSURL,
		"EVENTS_PREFIX="+s.cfg.Events.Prefix, "EVENTS_MAX_MB="+testenv.TestEventsMaxMB,
		"METRICS_ADDR=127.0.0.1:0",
		"LOG_LEVEL=warn",
		"SCHEDULES_ENABLED=false",
		// The test's dev server speaks plaintext on loopback.
		"TEMPORAL_ALLOW_PLAINTEXT=true",
	)
	cmd.Env = append(cmd.Env, env...)
	if os.Getenv("E2E_LOG") != "" {
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(s.t, cmd.Start())
	return cmd
}

// TestSeedProof5_SellerCountBelowReservations_NewestOrdersFailVoided: a seller sets stock 3 under
// 5 active reservations; the update is applied, the 2 newest reservations released, their orders
// fail with the payment voided, and the other 3 can still complete.
func TestSeedProof5_SellerCountBelowReservations_NewestOrdersFailVoided(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{hold: time.Minute})
	sku := s.proofSKU("SHORT", 5)
	var orders []placed
	for i := 0; i < 5; i++ {
		orders = append(orders, s.placeOrders(1, 1, int64(50001+i), sku, "tok_3ds", nil)...)
	}

	r := s.call(http.MethodPut, "/seller-api/v1/stocks", s.seller(42), nil, []map[string]any{{"sku": "SHORT",
		"warehouseId": 1, "quantity": 3, "sourceUpdatedAt": time.Now().UTC().Format(time.RFC3339Nano)}})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	row := r.body["results"].([]any)[0].(map[string]any)
	assert.Equal(t, "APPLIED_WITH_SHORTFALL", row["status"])
	assert.Equal(t, float64(2), row["cancelledReservations"])

	for _, o := range orders[3:] {
		final := s.waitFinal(o.sh.token, o.orderID, 30*time.Second)
		assert.Equal(t, "FAILED", final.str("status"))
		assert.Equal(t, "STOCK_SHORTFALL", final.str("failureCode"))
		assert.Equal(t, "VOIDED", final.str("payment", "status"), "payment voided")
	}
	s.recordHistory("seller-shortfall", orders[4].sh.workflowOf(orders[4].key))
	for _, o := range orders[:3] {
		require.Equal(t, http.StatusOK, s.answer3DS(o.redirect, "approve").status)
		assert.Equal(t, "CONFIRMED", s.waitFinal(o.sh.token, o.orderID, 30*time.Second).str("status"), "the other three complete")
	}
	assert.Zero(t, s.scalar(`SELECT on_hand FROM inventory WHERE sku_id = $1`, sku))
	assert.Zero(t, s.scalar(`SELECT reserved FROM inventory WHERE sku_id = $1`, sku))
	assert.Equal(t, int64(1), s.scalar(`SELECT count(*) FROM seller_shortfall_events WHERE seller_id = 42 AND sku_id = $1`, sku))
}
