package inventory

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestCombiner_ManyArrivals_EveryOrderSentAndTheRulesKept drives the combiner alone, its batches
// run by a stand-in that checks the rules of dispatch while they are in flight: at most
// maxInFlight batches at once, no SKU in two of them, no order twice in one. Thousands of orders
// of one or two of a few SKUs arrive from their own goroutines, as at a hot SKU's peak; every one
// must be sent and answered, so an arrival left waiting with nothing in flight to send it fails
// the test.
func TestCombiner_ManyArrivals_EveryOrderSentAndTheRulesKept(t *testing.T) {
	t.Parallel()
	const orders, skus, maxInFlight = 3000, 4, 3
	var (
		mu       sync.Mutex
		inFlight int
		busy     = map[int64]bool{}
		broken   []string
	)
	run := func(_ context.Context, batch []*pending[int64, int64]) ([]*pending[int64, int64], error) {
		var mine, ids []int64
		mu.Lock()
		for _, p := range batch {
			if slices.Contains(ids, p.order) {
				broken = append(broken, fmt.Sprintf("order %d twice in one batch", p.order))
			}
			ids = append(ids, p.order)
			for _, sku := range p.skus {
				if !slices.Contains(mine, sku) {
					mine = append(mine, sku)
				}
			}
		}
		if inFlight++; inFlight > maxInFlight {
			broken = append(broken, fmt.Sprintf("%d batches in flight", inFlight))
		}
		for _, sku := range mine {
			if busy[sku] {
				broken = append(broken, fmt.Sprintf("SKU %d in two batches in flight", sku))
			}
			busy[sku] = true
		}
		mu.Unlock()
		time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
		mu.Lock()
		inFlight--
		for _, sku := range mine {
			delete(busy, sku)
		}
		mu.Unlock()
		for _, p := range batch {
			p.done <- outcome[int64]{val: p.order}
		}
		return nil, nil
	}
	c := newCombiner(maxInFlight, run)

	var wg sync.WaitGroup
	answers := make(chan error, orders)
	for order := range int64(orders) {
		wg.Go(func() {
			first := rand.Int64N(skus)
			lines := []int64{first}
			if order%3 == 0 {
				lines = append(lines, (first+1+rand.Int64N(skus-1))%skus)
			}
			val, fallback, err := c.submit(t.Context(), order, lines, order)
			switch {
			case err != nil:
				answers <- err
			case fallback || val != order:
				answers <- fmt.Errorf("order %d answered %d (fallback %v)", order, val, fallback)
			}
		})
	}
	sent := make(chan struct{})
	go func() { wg.Wait(); close(sent) }()
	select {
	case <-sent:
	case <-time.After(time.Minute):
		c.mu.Lock()
		defer c.mu.Unlock()
		t.Fatalf("orders never sent: %d waiting, %d batches in flight", len(c.queue), c.inFlight)
	}
	close(answers)
	for err := range answers {
		t.Error(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(broken) > 0 {
		t.Fatalf("rules of dispatch broken %d times, first: %s", len(broken), broken[0])
	}
}
