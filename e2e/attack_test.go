package e2e_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/dev/attack"
)

// TestAttack_Short_EveryAttackRefused is `make attack`'s short form against the test stack (API,
// worker, PostgreSQL, the Temporal dev server): forged tokens, other people's orders, seller
// cross-writes, forged and replayed webhooks, oversized and odd requests, spoofed addresses,
// coupon and open-order abuse, the codec endpoint and /metrics are each refused as the error model
// says. The control plane's attacks are skipped: the test stack's Temporal authenticates nobody.
func TestAttack_Short_EveryAttackRefused(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	target := attack.Target{Name: "the test stack", Base: s.base, MetricsURL: s.metrics,
		TemporalAddress: s.cfg.TemporalAddress, Namespace: s.cfg.TemporalNamespace, Keys: s.cfg.AuthKeys(),
		WebhookSecret: s.cfg.PaymentWebhookSecret}
	var out strings.Builder
	rep, err := attack.Execute(context.Background(), target, attack.Options{Short: true, Out: &out})
	require.NoError(t, err)
	t.Log("\n" + out.String())
	assert.False(t, rep.Failed(), "no attack got through")
	assert.GreaterOrEqual(t, rep.Count(attack.Pass), 40, "at least 40 attacks tried and refused")
	for _, r := range rep.Results {
		if r.Outcome.Verdict == attack.Skip {
			assert.NotEmpty(t, r.Outcome.Detail, "%s says why it was skipped", r.Name)
		}
	}
}
