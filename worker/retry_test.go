package worker

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.temporal.io/api/serviceerror"
)

// A call that timed out or found the server unavailable is tried again; one refused for another
// reason is not, and none is tried past its context.
func TestRetryTransient(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, failure := range []error{serviceerror.NewDeadlineExceeded("context deadline exceeded"),
		serviceerror.NewUnavailable("no shard"), fmt.Errorf("update schedule x: %w", context.DeadlineExceeded)} {
		tries := 0
		err := retryTransient(ctx, func() error {
			if tries++; tries < 3 {
				return failure
			}
			return nil
		})
		assert.NoError(t, err, "%v", failure)
		assert.Equal(t, 3, tries, "%v", failure)
	}

	refused := serviceerror.NewInvalidArgument("bad spec")
	tries := 0
	err := retryTransient(ctx, func() error { tries++; return refused })
	assert.ErrorIs(t, err, refused)
	assert.Equal(t, 1, tries)

	cancelled, cancel := context.WithCancel(ctx)
	tries = 0
	err = retryTransient(cancelled, func() error {
		tries++
		cancel()
		return serviceerror.NewUnavailable("down")
	})
	var unavailable *serviceerror.Unavailable
	assert.True(t, errors.As(err, &unavailable))
	assert.Equal(t, 1, tries, "no try after the context ended")
}
