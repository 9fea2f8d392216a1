package money

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestParseAndFormat(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"199.90", 19990, true},
		{"199.9", 19990, true},
		{"0", 0, true},
		{"1249", 124900, true},
		{"0.01", 1, true},
		{"-1.00", 0, false},
		{"1.999", 0, false},
		{"01.00", 0, false},
		{"1e3", 0, false},
		{"", 0, false},
		{"99999999999999", 0, false},
	}
	for _, c := range cases {
		got, err := Parse(c.in)
		if !c.ok {
			assert.Error(t, err, c.in)
			continue
		}
		assert.NoError(t, err, c.in)
		assert.Equal(t, c.want, got, c.in)
		assert.Equal(t, got, must(Parse(Format(got))), "round trip of %s", c.in)
	}
	assert.Equal(t, "1249.90", Format(124990))
	assert.Equal(t, "0.05", Format(5))
}

func must(v int64, err error) int64 {
	if err != nil {
		panic(err)
	}
	return v
}
