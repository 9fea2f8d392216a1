package e2e_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestOrder_TheWorkersHoldAndStepRetryWindow_NotTheAPIs: an order holds its stock for the
// worker's HOLD_TTL and parks once its step has retried for the worker's STEP_RETRY_WINDOW; the
// API's settings, here a 20 s hold and an hour's window, change nothing.
func TestOrder_TheWorkersHoldAndStepRetryWindow_NotTheAPIs(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{hold: 20 * time.Second, stepRetryWindow: time.Hour,
		workerEnv: map[string]string{"HOLD_TTL": "10m", "STEP_RETRY_WINDOW": "2s"}})

	// Parked within parkedOrder's minute: the capture retried for the worker's 2 s, not the API's hour.
	sh, id, wf := s.parkedOrder(60021)
	held := time.Duration(s.scalar(`SELECT extract(epoch FROM hold_expires_at - created_at)::bigint FROM orders WHERE id = $1`, id)) * time.Second
	assert.InDelta(t, (10 * time.Minute).Seconds(), held.Seconds(), 30, "held for the worker's HOLD_TTL, not the API's 20 s")

	// The provider is back: the parked capture goes through on its own retries.
	s.providerUp()
	assert.Equal(t, "CONFIRMED", s.waitFinal(sh.token, id, time.Minute).str("status"))
	s.recordHistory("worker-settings", wf)
}
