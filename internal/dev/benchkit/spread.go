package benchkit

import (
	"fmt"
	"slices"
)

// Spread sums up one figure measured over several runs: a shared machine moves single runs, so
// a report gives the middle with the lowest and the highest beside it.
type Spread struct {
	Median, Mean, Lo, Hi float64
}

// SpreadOf sums up xs; with an even count the median is the mean of the middle two, and with
// none every figure is 0.
func SpreadOf(xs []float64) Spread {
	if len(xs) == 0 {
		return Spread{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	var sum float64
	for _, x := range s {
		sum += x
	}
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Spread{Median: m, Mean: sum / float64(len(s)), Lo: s[0], Hi: s[len(s)-1]}
}

// String is the median with the lowest and highest in brackets.
func (s Spread) String() string {
	return fmt.Sprintf("%.2f (%.2f–%.2f)", s.Median, s.Lo, s.Hi)
}
