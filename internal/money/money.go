// Package money converts between the API's decimal strings ("1249.90") and integer minor units,
// each currency in its own minor unit: the ISO 4217 exponent (TRY 2, JPY 0, KWD 3), taken from
// github.com/bojanz/currency's table rather than assumed. Amounts are never floats.
package money

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/bojanz/currency"
)

// MaxMinor bounds an amount at 10^13 minor units, far above any price, so sums of a cart cannot
// overflow.
const MaxMinor int64 = 10_000_000_000_000

// PercentDigits is the number of decimals of a percentage: "12.5" is 1250 basis points.
const PercentDigits = 2

var (
	decimalRe  = regexp.MustCompile(`^(0|[1-9][0-9]{0,15})(\.[0-9]+)?$`)
	currencyRe = regexp.MustCompile(`^[A-Z]{3}$`)
)

// ErrInvalid reports a string that is not a non-negative amount with at most the currency's
// decimals.
var ErrInvalid = errors.New(`amount must be a decimal string such as "199.90", with at most the currency's decimals`)

// ErrUnknownCurrency reports a code that is not an ISO 4217 currency.
var ErrUnknownCurrency = errors.New("not an ISO 4217 currency code")

// Digits is the number of decimals of the currency's minor unit (ISO 4217: JPY 0, TRY 2, KWD 3);
// ok is false for a code that is not an ISO 4217 currency.
func Digits(code string) (int, bool) {
	if !currencyRe.MatchString(code) {
		return 0, false
	}
	d, ok := currency.GetDigits(code)
	return int(d), ok
}

// ValidCurrency accepts the ISO 4217 currency codes ("TRY", "JPY", "KWD"), and nothing else: an
// amount in an unknown currency has no minor unit to be held in.
func ValidCurrency(code string) bool {
	_, ok := Digits(code)
	return ok
}

// Parse reads an amount in code's minor units: for TRY "199.90", "199.9" or "199" is 19990; for
// JPY "1500" is 1500 and "1500.5" is refused; for KWD "12.345" is 12345. More decimals than the
// currency has are refused, never rounded.
func Parse(s, code string) (int64, error) {
	d, ok := Digits(code)
	if !ok {
		return 0, fmt.Errorf("%w: %q", ErrUnknownCurrency, code)
	}
	return ParseDecimal(s, d)
}

// ParseDecimal reads a non-negative decimal string with at most digits decimals as an integer
// count of 10^-digits (ParseDecimal("12.5", 2) is 1250), at most MaxMinor.
func ParseDecimal(s string, digits int) (int64, error) {
	if !decimalRe.MatchString(s) {
		return 0, ErrInvalid
	}
	whole, frac, _ := strings.Cut(s, ".")
	if len(frac) > digits {
		return 0, ErrInvalid
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil {
		return 0, ErrInvalid
	}
	frac += strings.Repeat("0", digits-len(frac))
	var f int64
	if frac != "" {
		f, _ = strconv.ParseInt(frac, 10, 64)
	}
	scale := pow10(digits)
	if w > MaxMinor/scale {
		return 0, ErrInvalid
	}
	v := w*scale + f
	if v > MaxMinor {
		return 0, ErrInvalid
	}
	return v, nil
}

// FormatIn writes minor units of code as the API's decimal string, with exactly the currency's
// decimals: 124990 TRY is "1249.90", 1500 JPY is "1500", 12345 KWD is "12.345". A code that is
// not a currency is written with two decimals (it cannot have been accepted anywhere).
func FormatIn(minor int64, code string) string {
	d, ok := Digits(code)
	if !ok {
		d = 2
	}
	return FormatDecimal(minor, d)
}

// Format writes minor units with two decimals. It is right only for a currency of two decimals:
// callers that know the currency use FormatIn.
func Format(minor int64) string { return FormatDecimal(minor, 2) }

// FormatDecimal writes n counts of 10^-digits as a decimal string with exactly digits decimals.
func FormatDecimal(n int64, digits int) string {
	sign := ""
	if n < 0 {
		if n == math.MinInt64 {
			return "invalid"
		}
		sign, n = "-", -n
	}
	if digits <= 0 {
		return sign + strconv.FormatInt(n, 10)
	}
	scale := pow10(digits)
	return fmt.Sprintf("%s%d.%0*d", sign, n/scale, digits, n%scale)
}

func pow10(n int) int64 {
	p := int64(1)
	for range n {
		p *= 10
	}
	return p
}
