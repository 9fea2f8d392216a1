package inventory

// Waiting says whether the order waits for a combined batch.
func Waiting(e *Engine, orderID int64) bool {
	e.comb.mu.Lock()
	defer e.comb.mu.Unlock()
	for _, p := range e.comb.queue {
		if p.req.OrderID == orderID && p.ctx.Err() == nil {
			return true
		}
	}
	return false
}
