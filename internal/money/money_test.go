package money

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDigits_ISO4217Exponents(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]int{"TRY": 2, "EUR": 2, "USD": 2, "JPY": 0, "KRW": 0, "KWD": 3, "BHD": 3} {
		got, ok := Digits(code)
		require.True(t, ok, code)
		assert.Equal(t, want, got, code)
	}
	for _, code := range []string{"", "try", "XYZ", "TRYY", "ABC"} {
		_, ok := Digits(code)
		assert.False(t, ok, code)
		assert.False(t, ValidCurrency(code), code)
	}
}

func TestParseAndFormat_EachCurrencyInItsOwnMinorUnit(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in, currency string
		want         int64
		ok           bool
		formatted    string
	}{
		{"199.90", "TRY", 19990, true, "199.90"},
		{"199.9", "TRY", 19990, true, "199.90"},
		{"0", "TRY", 0, true, "0.00"},
		{"1249", "TRY", 124900, true, "1249.00"},
		{"0.01", "TRY", 1, true, "0.01"},
		{"1.999", "TRY", 0, false, ""},
		{"1500", "JPY", 1500, true, "1500"},
		{"1500.0", "JPY", 0, false, ""},
		{"1500.5", "JPY", 0, false, ""},
		{"12.345", "KWD", 12345, true, "12.345"},
		{"12.3", "KWD", 12300, true, "12.300"},
		{"0.005", "KWD", 5, true, "0.005"},
		{"12.3456", "KWD", 0, false, ""},
		{"-1.00", "TRY", 0, false, ""},
		{"01.00", "TRY", 0, false, ""},
		{"1e3", "TRY", 0, false, ""},
		{"", "TRY", 0, false, ""},
		{"1.", "TRY", 0, false, ""},
		{"99999999999999", "TRY", 0, false, ""},
		{"10000000000000", "JPY", MaxMinor, true, "10000000000000"},
		{"10000000000001", "JPY", 0, false, ""},
		{"10000000000.000", "KWD", MaxMinor, true, "10000000000.000"},
		{"10000000000.001", "KWD", 0, false, ""},
		{"1.00", "XYZ", 0, false, ""},
	}
	for _, c := range cases {
		got, err := Parse(c.in, c.currency)
		if !c.ok {
			assert.Error(t, err, "%s %s", c.in, c.currency)
			continue
		}
		require.NoError(t, err, "%s %s", c.in, c.currency)
		assert.Equal(t, c.want, got, "%s %s", c.in, c.currency)
		assert.Equal(t, c.formatted, FormatIn(got, c.currency), "%s %s", c.in, c.currency)
		back, err := Parse(FormatIn(got, c.currency), c.currency)
		require.NoError(t, err)
		assert.Equal(t, got, back, "round trip of %s %s", c.in, c.currency)
	}
}

func TestFormat_TwoDecimalsAndNegatives(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "1249.90", Format(124990))
	assert.Equal(t, "0.05", Format(5))
	assert.Equal(t, "-0.005", FormatIn(-5, "KWD"))
	assert.Equal(t, "-15", FormatIn(-15, "JPY"))
	assert.Equal(t, "12.50", FormatDecimal(1250, PercentDigits))
}

func FuzzParseDecimal_RoundTrips(f *testing.F) {
	for _, s := range []string{"0", "1.5", "199.90", "12.345", "1500"} {
		f.Add(s, uint8(2))
	}
	f.Fuzz(func(t *testing.T, s string, d uint8) {
		digits := int(d % 4)
		n, err := ParseDecimal(s, digits)
		if err != nil {
			return
		}
		if n < 0 || n > MaxMinor {
			t.Fatalf("%q parsed out of range: %d", s, n)
		}
		back, err := ParseDecimal(FormatDecimal(n, digits), digits)
		if err != nil || back != n {
			t.Fatalf("%q → %d → %q → %d, %v", s, n, FormatDecimal(n, digits), back, err)
		}
	})
}
