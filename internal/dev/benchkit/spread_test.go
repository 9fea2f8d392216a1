package benchkit

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSpreadOf_MedianMeanAndBounds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		xs   []float64
		want Spread
	}{
		{"none", nil, Spread{}},
		{"one", []float64{4}, Spread{Median: 4, Mean: 4, Lo: 4, Hi: 4}},
		{"odd count, unsorted", []float64{9, 1, 5}, Spread{Median: 5, Mean: 5, Lo: 1, Hi: 9}},
		{"even count takes the middle two", []float64{8, 1, 2, 5}, Spread{Median: 3.5, Mean: 4, Lo: 1, Hi: 8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, SpreadOf(tc.xs))
		})
	}
}

func TestSpreadOf_LeavesItsInputAlone(t *testing.T) {
	t.Parallel()
	xs := []float64{3, 1, 2}
	SpreadOf(xs)
	require.Equal(t, []float64{3, 1, 2}, xs)
}
