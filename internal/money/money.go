// Package money converts between the API's decimal strings ("1249.90") and integer minor units.
// Amounts are never floats.
package money

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// MaxMinor bounds an amount at 10^13 minor units, far above any price, so sums of a cart cannot
// overflow.
const MaxMinor int64 = 10_000_000_000_000

var (
	decimalRe  = regexp.MustCompile(`^(0|[1-9][0-9]{0,12})(\.[0-9]{1,2})?$`)
	currencyRe = regexp.MustCompile(`^[A-Z]{3}$`)
)

// ErrInvalid reports a string that is not a non-negative amount with at most two decimals.
var ErrInvalid = errors.New(`amount must be a decimal string such as "199.90"`)

// Parse reads "199.90", "199.9" or "199" as minor units (19990).
func Parse(s string) (int64, error) {
	if !decimalRe.MatchString(s) {
		return 0, ErrInvalid
	}
	whole, frac, _ := strings.Cut(s, ".")
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil {
		return 0, ErrInvalid
	}
	for len(frac) < 2 {
		frac += "0"
	}
	f, _ := strconv.ParseInt(frac, 10, 64)
	v := w*100 + f
	if v > MaxMinor {
		return 0, ErrInvalid
	}
	return v, nil
}

// Format writes minor units as a decimal string with two decimals.
func Format(minor int64) string {
	sign := ""
	if minor < 0 {
		if minor == math.MinInt64 {
			return "invalid"
		}
		sign, minor = "-", -minor
	}
	return fmt.Sprintf("%s%d.%02d", sign, minor/100, minor%100)
}

// ValidCurrency accepts ISO 4217 style codes (three capital letters).
func ValidCurrency(c string) bool { return currencyRe.MatchString(c) }
