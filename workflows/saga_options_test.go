package workflows_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/order"
)

// sagaTiming runs an order whose input carries a 15-minute hold and an hour's step retry window,
// CreateOrder answering with created, and whose capture fails its quick tries; it returns the
// hold the order reserved for and the window its capture then retried within on the server.
func sagaTiming(t *testing.T, created activities.CreatedOrder) (hold, window time.Duration) {
	s := newSaga(t)
	s.authorizeReturns("AUTHORIZED")
	s.on("CreateOrder").Return(created, nil)
	s.on("Reserve").Return(func(ctx context.Context, in activities.ReserveInput) (inventory.Reservation, error) {
		hold = in.Hold
		return inventory.Reservation{OrderID: in.OrderID, ExpiresAt: s.env.Now().Add(in.Hold),
			Allocations: []inventory.Allocation{{ReservationID: 1, SKUID: 77, WarehouseID: 1, Quantity: 1, Status: "ACTIVE"}}}, nil
	})
	s.on("CaptureFinish").Return(func(ctx context.Context, in activities.CaptureFinishInput) (activities.CaptureFinished, error) {
		if info := activity.GetInfo(ctx); !info.IsLocalActivity {
			window = info.ScheduleToCloseTimeout
			return s.captured(ctx, in)
		}
		return activities.CaptureFinished{}, down
	})
	in := input("tok_ok")
	in.StepRetryWindow = time.Hour
	st := s.run(in)
	require.Equal(t, order.StatusConfirmed, st.Status)
	return hold, window
}

// TestOrder_TimingOfTheWorkerThatCreatedIt_NotOfItsInput: an order holds its stock and retries its
// steps by the settings CreateOrder returns (the worker's), whatever the input carries.
func TestOrder_TimingOfTheWorkerThatCreatedIt_NotOfItsInput(t *testing.T) {
	hold, window := sagaTiming(t, activities.CreatedOrder{OrderID: orderID,
		Saga: &activities.SagaOptions{HoldTTL: 3 * time.Minute, StepRetryWindow: 10 * time.Second, Provider: "paysim"}})

	assert.Equal(t, 3*time.Minute, hold, "the worker's hold, not the input's")
	assert.Equal(t, 10*time.Second, window, "the worker's step retry window, not the input's")
}

// TestOrder_CreatedByAnEarlierRelease_KeepsTheTimingOfItsInput: a CreateOrder result without the
// worker's settings (recorded by an earlier release) leaves the order on its input's.
func TestOrder_CreatedByAnEarlierRelease_KeepsTheTimingOfItsInput(t *testing.T) {
	hold, window := sagaTiming(t, activities.CreatedOrder{OrderID: orderID})

	assert.Equal(t, 15*time.Minute, hold)
	assert.Equal(t, time.Hour, window)
}
