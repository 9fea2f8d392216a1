package pgserver_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/dev/pgserver"
)

// The kernel picks a bound port 0 at random from its ephemeral range, so a thousand binds in a
// row repeat some: about 60 of them on this Linux. FreePort never repeats one.
func TestFreePort_NeverGivesAPortTwice(t *testing.T) {
	seen := map[int]bool{}
	for range 1000 {
		port, err := pgserver.FreePort()
		require.NoError(t, err)
		require.False(t, seen[port], "port %d given twice", port)
		seen[port] = true
	}
}
