package service

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/internal/dev/pgserver"
	"github.com/marketplace/checkout/payment/paysim"
)

// TestAuditProvider_TheSimulatorsRecordOnlyWhenItIsTheProvider: the audit reads the simulator's
// record when it is the provider, also on the local stack with PAYMENT_PROVIDER unset; any other
// provider is not asked, and the report says so.
func TestAuditProvider_TheSimulatorsRecordOnlyWhenItIsTheProvider(t *testing.T) {
	assert.IsType(t, &paysim.Records{}, auditProvider(config.Config{PaymentProvider: config.ProviderPaysim}, nil))
	assert.IsType(t, &paysim.Records{}, auditProvider(DevDefaults(config.Config{}), nil), "the local stack's simulator")
	assert.Nil(t, auditProvider(config.Config{PaymentProvider: "stripe"}, nil))
}

// TestDevDefaults_TheLocalStacksDatabase: with DATABASE_URL unset, the tools reach the database of
// the local stack's PostgreSQL on PG_PORT, as that server names it.
func TestDevDefaults_TheLocalStacksDatabase(t *testing.T) {
	pg := &pgserver.Server{Port: 55432}
	assert.Equal(t, pg.URL("checkout"), DevDefaults(config.Config{Dev: config.DevStack{PGPort: 55432}}).DatabaseURL)
}
