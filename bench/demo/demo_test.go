package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/events"
	"github.com/marketplace/checkout/internal/dev/attack"
	"github.com/marketplace/checkout/internal/dev/benchkit"
)

// TestDemo_AgainstADevStack_EachOrderEndsAsItsKindSays runs `make demo` against a `checkout-dev
// dev` stack of its own with a hold short enough to wait for: every kind of order ends as it
// should, and what the broker carried for each is printed.
func TestDemo_AgainstADevStack_EachOrderEndsAsItsKindSays(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: builds checkout and checkout-dev and starts a dev stack of its own (PostgreSQL, the Temporal dev server, NATS)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	bin := t.TempDir()
	build := exec.CommandContext(ctx, "go", "build", "-o", bin+"/", "./cmd/checkout", "./cmd/checkout-dev")
	build.Dir = filepath.Join("..", "..")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)

	st, err := benchkit.StartStackOf(ctx, filepath.Join(bin, "checkout-dev"), "demo-test-", "HOLD_TTL=20s")
	require.NoError(t, err)
	t.Cleanup(st.Stop)
	target, err := attack.DevTarget(func(k string) string {
		return map[string]string{"DATA_DIR": st.Dir, "PUBLIC_BASE_URL": st.Base}[k]
	})
	require.NoError(t, err)

	var printed bytes.Buffer
	d := newDemo(target, 74, 42, time.Minute, &printed)
	// The worker makes the stream as it starts, which may be just after the API answers ready.
	require.Eventually(t, func() bool {
		d.events, err = watch(ctx, st.NATS, "checkout")
		return err == nil
	}, time.Minute, 500*time.Millisecond, "the stack's event stream")
	defer d.events.stop()
	ok := d.placeAll(ctx)
	text := printed.String()
	t.Log("\n" + text)
	require.True(t, ok, "an order did not end as its kind says")
	for _, s := range scenarios {
		assert.Contains(t, text, "\n"+s.name+": order ", "every kind placed, the hold's end waited for too")
		assert.Contains(t, text, "  ended     "+s.want+" (as it should)")
	}
	for _, e := range []string{events.OrderConfirmed, events.OrderFailed, events.OrderLineCancelled, events.PaymentRefunded} {
		assert.Contains(t, text, e, "the broker carried %s", e)
	}
	assert.Equal(t, len(scenarios), strings.Count(text, "  events    "), "each order's events printed")
}
