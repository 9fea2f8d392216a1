package audit

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/marketplace/checkout/payment"
)

func TestProviderSide_AnIntentInAnotherCurrencyIsNotTheOrdersMoney(t *testing.T) {
	t.Parallel()
	captured := func(currency string, amount int64) []payment.Intent {
		return []payment.Intent{{ID: "pi_1", Status: payment.StatusCaptured, AmountMinor: amount, CapturedMinor: amount,
			Currency: currency}}
	}
	jpy := providerSideOf(true, "JPY", captured("JPY", 3000))
	assert.True(t, jpy.paidOnce(3000, "pi_1"))
	assert.True(t, jpy.keeps(3000))
	assert.Contains(t, jpy.intentsDetail(), "captured 3000,")

	// The same number in another currency is another amount: 3000 JPY is not 30.00 USD.
	usd := providerSideOf(true, "JPY", captured("USD", 3000))
	assert.False(t, usd.paidOnce(3000, "pi_1"))
	assert.False(t, usd.keeps(3000))
	assert.Contains(t, usd.keptDetail(), "1 intents not in JPY")

	kwd := providerSideOf(true, "KWD", captured("KWD", 24690))
	assert.Contains(t, kwd.movedDetail(), "captured 24.690")
}
