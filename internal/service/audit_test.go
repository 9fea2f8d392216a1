package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/payment/paysim"
)

// TestAuditProvider_TheSimulatorsRecordOnlyWhenItIsTheProvider: the audit reads the simulator's
// record when it is the provider, also on the local stack with PAYMENT_PROVIDER unset; any other
// provider is not asked, and the report says so.
func TestAuditProvider_TheSimulatorsRecordOnlyWhenItIsTheProvider(t *testing.T) {
	assert.IsType(t, &paysim.Records{}, auditProvider(config.Config{PaymentProvider: config.ProviderPaysim}, nil))
	assert.IsType(t, &paysim.Records{}, auditProvider(devDefaults(config.Config{}), nil), "the local stack's simulator")
	assert.Nil(t, auditProvider(config.Config{PaymentProvider: "stripe"}, nil))
}
