package inventory

// ConfirmWaiting says how many confirms of the order wait for a combined confirm batch.
func ConfirmWaiting(e *Engine, orderID int64) int {
	return waiting(e.confirmComb, orderID)
}

// Waiting says whether the order waits for a combined reserve batch.
func Waiting(e *Engine, orderID int64) bool {
	return waiting(e.comb, orderID) > 0
}

func waiting[J, R any](c *combiner[J, R], orderID int64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, p := range c.queue {
		if p.order == orderID && p.ctx.Err() == nil {
			n++
		}
	}
	return n
}
