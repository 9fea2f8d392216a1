package benchkit

import (
	"math"
	"testing"
	"time"
)

func TestReadings_PerOrderLessTheIdleRateAndTheOthersShare(t *testing.T) {
	at := time.Unix(1000, 0)
	a := Reading{At: at, Parts: map[string]float64{"checkout": 100, "postgres": 50}, Busy: 1000, Total: 4000, Self: 10}
	b := Reading{At: at.Add(10 * time.Second), Parts: map[string]float64{"checkout": 300, "postgres": 70},
		Busy: 1400, Total: 6000, Self: 30}
	idle := Rates(a, b)
	if idle["checkout"] != 20 || idle["postgres"] != 2 {
		t.Fatalf("rates %v", idle)
	}
	// 10 orders; checkout's idle rate 5 jiffies a second: (200 - 50) jiffies = 1.5 s = 150 ms an order.
	got := PerOrder(a, b, map[string]float64{"checkout": 5}, 10)
	if want := 150.0 * 100 / UserHZ; math.Abs(got["checkout"]-want) > 1e-9 {
		t.Fatalf("checkout %.3f ms an order, want %.3f", got["checkout"], want)
	}
	// Busy 400 jiffies, of which the parts 220 and the tool 20: the other 160 of 2000.
	if s := OtherShare(a, b); math.Abs(s-0.08) > 1e-9 {
		t.Fatalf("other share %.4f, want 0.08", s)
	}
}
