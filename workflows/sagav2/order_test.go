package sagav2_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/pricing"
	"github.com/marketplace/checkout/workflows/sagav2"
)

const (
	orderID = int64(501)
	hash    = "req-hash-1"
	hold    = 15 * time.Minute
)

var quote = pricing.Quote{
	Items:      []pricing.Item{{SKUID: 77, SellerID: 42, Title: "Konsol", Quantity: 1, UnitPriceMinor: 1999900, LineTotalMinor: 1999900, Currency: "TRY", MaxPerOrder: 1}},
	TotalMinor: 1999900, Currency: "TRY", PriceVersion: "pv_1",
}

// saga is one workflow run under the SDK's test suite, with every activity mocked and the time
// skipped.
type saga struct {
	t      *testing.T
	env    *testsuite.TestWorkflowEnvironment
	placed *sagav2.PlaceOrderResult
	err    error
	final  map[string]int // final status transitions written, by status
	calls  map[string]int
	mocked map[string]bool
	// holds counts the hold-expiry children started.
	holds int
}

func newSaga(t *testing.T) *saga {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(sagav2.OrderWorkflow)
	env.RegisterWorkflow(sagav2.HoldWorkflow)
	env.RegisterActivity(&activities.Orders{})
	env.RegisterActivity(&activities.Payments{})
	env.RegisterActivity(&activities.Inventory{})
	s := &saga{t: t, env: env, final: map[string]int{}, calls: map[string]int{}, mocked: map[string]bool{}}
	env.SetOnChildWorkflowStartedListener(func(info *workflow.Info, _ workflow.Context, _ converter.EncodedValues) {
		if info.WorkflowType.Name == "HoldWorkflow" {
			s.holds++
		}
	})
	return s
}

// defaults mocks every activity the test did not: the happy path.
func (s *saga) defaults() {
	env := s.env
	def := func(name string, ret ...any) {
		if !s.mocked[name] {
			s.on(name).Return(ret...).Maybe()
		}
	}
	def("CheckPrices", quote, nil)
	def("CreateOrder", activities.CreatedOrder{OrderID: orderID, ShipTo: inventory.Location{Lat: 41, Lon: 29}}, nil)
	def("Reserve", func(ctx context.Context, in activities.ReserveInput) (inventory.Reservation, error) {
		return inventory.Reservation{OrderID: in.OrderID, ExpiresAt: env.Now().Add(in.Hold),
			Allocations: []inventory.Allocation{{ReservationID: 1, SKUID: 77, WarehouseID: 1, Quantity: 1, Status: "ACTIVE"}}}, nil
	})
	def("SetHold", nil)
	def("RecordOutcome", nil)
	def("Timeline", nil)
	def("Park", nil)
	def("Resume", nil)
	def("Release", 1, nil)
	def("Restock", 0, nil)
	def("Reverse", activities.PaymentResult{Status: "VOIDED"}, nil)
	def("Confirm", inventory.ConfirmResult{Confirmed: 1}, nil)
	def("Capture", activities.PaymentResult{Status: "CAPTURED", IntentID: "pi_1"}, nil)
	def("Authorize", activities.PaymentResult{Status: "AUTHORIZED", IntentID: "pi_1"}, nil)
	def("ResolvePayment", activities.PaymentResult{Status: activities.PaymentNotFound}, nil)
	def("Transition", func(ctx context.Context, in activities.TransitionInput) (bool, error) {
		s.final[in.To]++
		return true, nil
	})
}

// on mocks an activity (the first matching mock answers) and counts its calls.
func (s *saga) on(name string) *testsuite.MockCallWrapper {
	s.mocked[name] = true
	return s.env.OnActivity(name, mock.Anything, mock.Anything).Run(func(mock.Arguments) { s.calls[name]++ })
}

func (s *saga) authorizeReturns(status string) {
	s.on("Authorize").Return(activities.PaymentResult{Status: status, IntentID: "pi_1",
		RedirectURL: map[bool]string{true: "http://localhost:8080/paysim/3ds/pi_1"}[status == "REQUIRES_ACTION"]}, nil)
}

// at runs f after d of workflow time.
func (s *saga) at(d time.Duration, f func()) { s.env.RegisterDelayedCallback(f, d) }

func (s *saga) signal(d time.Duration, name string, arg any) {
	s.at(d, func() { s.env.SignalWorkflow(name, arg) })
}

func (s *saga) run(in sagav2.OrderInput) sagav2.OrderState {
	s.defaults()
	s.at(0, func() {
		s.env.UpdateWorkflow(sagav2.UpdatePlaceOrder, "place", &testsuite.TestUpdateCallback{
			OnAccept: func() {},
			OnReject: func(err error) { s.err = err },
			OnComplete: func(v any, err error) {
				if err != nil {
					s.err = err
					return
				}
				r := v.(sagav2.PlaceOrderResult)
				s.placed = &r
			},
		}, in.RequestHash)
	})
	s.env.ExecuteWorkflow(sagav2.OrderWorkflow, in)
	require.True(s.t, s.env.IsWorkflowCompleted())
	require.NoError(s.t, s.env.GetWorkflowError())
	var st sagav2.OrderState
	require.NoError(s.t, s.env.GetWorkflowResult(&st))
	return st
}

func input(token string) sagav2.OrderInput {
	return sagav2.OrderInput{UserID: 7, IdempotencyKey: "k1", RequestHash: hash, PriceVersion: "pv_1",
		AddressID: 5, PaymentMethodToken: token, HoldTTL: hold, Provider: "paysim"}
}

func TestOrder_ImmediateAuthorization_Confirmed(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("AUTHORIZED")
	st := s.run(input("tok_ok"))

	require.NotNil(t, s.placed)
	assert.Equal(t, sagav2.OutcomeCreated, s.placed.Outcome)
	assert.Equal(t, "AUTHORIZED", s.placed.Payment.Status)
	assert.Equal(t, sagav2.StatusConfirmed, st.Status)
	assert.Equal(t, "CAPTURED", st.PaymentStatus)
	assert.Equal(t, 1, s.calls["Confirm"])
	assert.Equal(t, 1, s.calls["Capture"])
	assert.Equal(t, 1, s.final[sagav2.StatusConfirmed])
	assert.Zero(t, s.calls["Release"]+s.calls["Reverse"], "nothing compensated")
	assert.Zero(t, s.holds, "decided in its first workflow task: no hold child to start and stop")
}

func TestOrder_3DSApproved_Confirmed(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("REQUIRES_ACTION")
	s.signal(2*time.Minute, sagav2.SignalPaymentResult, sagav2.PaymentSignal{EventID: "evt_1", IntentID: "pi_1", Status: "AUTHORIZED"})
	st := s.run(input("tok_3ds"))

	assert.Equal(t, "REQUIRES_ACTION", s.placed.Payment.Status)
	assert.Equal(t, "http://localhost:8080/paysim/3ds/pi_1", s.placed.Payment.RedirectURL)
	assert.Equal(t, sagav2.StatusConfirmed, st.Status)
	assert.Equal(t, 1, s.calls["Capture"])
	assert.Equal(t, 1, s.holds, "an order that waits for 3-D Secure has its hold child")
}

func TestOrder_3DSDeclined_FailedAndCompensated(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("REQUIRES_ACTION")
	s.signal(time.Minute, sagav2.SignalPaymentResult, sagav2.PaymentSignal{EventID: "evt_1", Status: "DECLINED"})
	st := s.run(input("tok_3ds"))

	assert.Equal(t, sagav2.StatusFailed, st.Status)
	assert.Equal(t, sagav2.FailPaymentDeclined, st.FailureCode)
	assert.Equal(t, 1, s.calls["Release"], "stock given back")
	assert.Equal(t, 1, s.calls["Reverse"], "authorization voided")
	assert.Zero(t, s.calls["Capture"])
}

func TestOrder_DeclinedAtOnce_402WithStockBack(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("DECLINED")
	order := []string{}
	s.on("Release").Return(1, nil).Run(func(mock.Arguments) { order = append(order, "release") })
	s.on("RecordOutcome").Return(nil).Run(func(mock.Arguments) { order = append(order, "answer") })
	st := s.run(input("tok_decline"))

	assert.Equal(t, sagav2.OutcomePaymentDeclined, s.placed.Outcome)
	assert.Equal(t, orderID, s.placed.OrderID)
	assert.Equal(t, sagav2.StatusFailed, st.Status)
	assert.Equal(t, []string{"release", "answer"}, order, "the stock is back before the shopper hears of the decline")
}

func TestOrder_HoldExpiresBeforePayment_Failed(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("REQUIRES_ACTION")
	st := s.run(input("tok_3ds"))

	assert.Equal(t, sagav2.StatusFailed, st.Status)
	assert.Equal(t, sagav2.FailHoldExpired, st.FailureCode)
	assert.GreaterOrEqual(t, s.calls["Release"], 1, "the hold child released the stock")
	assert.Equal(t, 1, s.calls["Reverse"], "the pending authorization is voided")
	assert.Zero(t, s.calls["Confirm"])
}

func TestOrder_LatePaymentAfterExpiry_VoidedNeverConfirmed(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("REQUIRES_ACTION")
	s.signal(hold+time.Second, sagav2.SignalPaymentResult, sagav2.PaymentSignal{EventID: "evt_late", Status: "AUTHORIZED"})
	st := s.run(input("tok_3ds"))

	assert.Equal(t, sagav2.StatusFailed, st.Status)
	assert.Equal(t, sagav2.FailHoldExpired, st.FailureCode)
	assert.Zero(t, s.calls["Confirm"])
	assert.Zero(t, s.calls["Capture"], "no money taken without goods")
	assert.Equal(t, 1, s.calls["Reverse"])
}

func TestOrder_ConfirmFindsReservationReleased_VoidedAndFailed(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("AUTHORIZED")
	s.on("Confirm").Return(inventory.ConfirmResult{},
		temporal.NewNonRetryableApplicationError("released", activities.ErrTypeReservationNotActive, nil))
	st := s.run(input("tok_ok"))

	assert.Equal(t, sagav2.StatusFailed, st.Status)
	assert.Equal(t, sagav2.FailStockReleased, st.FailureCode)
	assert.Zero(t, s.calls["Capture"])
	assert.Equal(t, 1, s.calls["Reverse"], "authorization voided")
}

func TestOrder_CaptureFailsThenSucceedsOnRetry_Confirmed(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("AUTHORIZED")
	s.on("Capture").Return(activities.PaymentResult{},
		temporal.NewApplicationError("provider unavailable", activities.ErrTypeProviderDown)).Times(2)
	s.on("Capture").Return(activities.PaymentResult{Status: "CAPTURED"}, nil)
	st := s.run(input("tok_ok"))

	assert.Equal(t, sagav2.StatusConfirmed, st.Status)
	assert.Equal(t, 3, s.calls["Capture"])
	assert.Zero(t, s.calls["Park"], "retries absorbed it; nobody was paged")
}

func TestOrder_PaymentUnknown_ResolvedAuthorized(t *testing.T) {
	s := newSaga(t)
	s.on("Authorize").Return(activities.PaymentResult{Status: activities.PaymentUnknown},
		temporal.NewNonRetryableApplicationError("timeout", activities.ErrTypePaymentUnknown, nil))
	s.on("ResolvePayment").Return(activities.PaymentResult{Status: "AUTHORIZED", IntentID: "pi_1"}, nil)
	st := s.run(input("tok_timeout"))

	assert.Equal(t, "AUTHORIZED", s.placed.Payment.Status, "decided by asking, not by guessing")
	assert.Equal(t, sagav2.StatusConfirmed, st.Status)
	assert.Equal(t, 1, s.calls["Authorize"])
}

func TestOrder_PaymentUnknown_ProviderNeverSawIt_AuthorizedAgainThenDeclined(t *testing.T) {
	s := newSaga(t)
	s.on("Authorize").Return(activities.PaymentResult{Status: activities.PaymentUnknown},
		temporal.NewNonRetryableApplicationError("timeout", activities.ErrTypePaymentUnknown, nil)).Once()
	s.on("Authorize").Return(activities.PaymentResult{Status: "DECLINED"}, nil)
	s.on("ResolvePayment").Return(activities.PaymentResult{Status: activities.PaymentNotFound}, nil)
	st := s.run(input("tok_timeout"))

	assert.Equal(t, 2, s.calls["Authorize"], "the same key again, once the provider said it never saw it")
	assert.Equal(t, sagav2.OutcomePaymentDeclined, s.placed.Outcome)
	assert.Equal(t, sagav2.StatusFailed, st.Status)
	assert.Equal(t, 1, s.calls["Release"])
}

func TestOrder_ShopperCancels_CancelledAndCompensated(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("REQUIRES_ACTION")
	var cancelled *sagav2.CancelResult
	s.at(time.Minute, func() {
		s.env.UpdateWorkflow(sagav2.UpdateCancel, "c1", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(err error) { t.Errorf("cancel rejected: %v", err) },
			OnComplete: func(v any, err error) {
				require.NoError(t, err)
				r := v.(sagav2.CancelResult)
				cancelled = &r
			}})
	})
	st := s.run(input("tok_3ds"))

	require.NotNil(t, cancelled)
	assert.Equal(t, sagav2.StatusCancelled, cancelled.Status)
	assert.Equal(t, sagav2.StatusCancelled, st.Status)
	assert.Equal(t, 1, s.calls["Release"])
	assert.Equal(t, 1, s.calls["Reverse"])
}

func TestOrder_CancelAfterConfirmation_Refused(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("AUTHORIZED")
	var rejected error
	// Keep the workflow open after confirming by holding the capture for a while.
	s.on("Capture").Return(activities.PaymentResult{Status: "CAPTURED"}, nil).After(time.Second)
	s.at(time.Millisecond, func() {
		s.env.UpdateWorkflow(sagav2.UpdateCancel, "c1", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(err error) { rejected = err }, OnComplete: func(any, error) {}})
	})
	st := s.run(input("tok_ok"))
	assert.Equal(t, sagav2.StatusConfirmed, st.Status)
	require.Error(t, rejected)
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(rejected, &appErr))
	assert.Equal(t, sagav2.ErrTypeNotCancellable, appErr.Type())
}

func TestOrder_SellerShortfall_PendingOrderFails(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("REQUIRES_ACTION")
	s.signal(3*time.Minute, sagav2.SignalStockShortfall, sagav2.ShortfallSignal{SKUID: 77, WarehouseID: 1})
	st := s.run(input("tok_3ds"))

	assert.Equal(t, sagav2.StatusFailed, st.Status)
	assert.Equal(t, sagav2.FailStockShortfall, st.FailureCode)
	assert.Equal(t, 1, s.calls["Reverse"], "payment voided")
	assert.Equal(t, 1, s.calls["Release"], "what is left of the reservation goes back")
}

func TestOrder_PriceChanged_NoOrder(t *testing.T) {
	s := newSaga(t)
	s.on("CheckPrices").Return(pricing.Quote{}, temporal.NewNonRetryableApplicationError("changed",
		activities.ErrTypePriceChanged, nil, activities.PriceChangedDetails{PriceVersion: "pv_2"}))
	st := s.run(input("tok_ok"))

	assert.Equal(t, sagav2.OutcomePriceChanged, s.placed.Outcome)
	assert.Equal(t, "pv_2", s.placed.PriceVersion)
	assert.Zero(t, s.calls["CreateOrder"]+s.calls["Reserve"]+s.calls["Authorize"], "nothing reserved, nothing charged")
	assert.Zero(t, st.OrderID)
}

func TestOrder_OutOfStock_FailedWithShortLines(t *testing.T) {
	s := newSaga(t)
	short := []inventory.ShortLine{{SKUID: 77, Requested: 1, Available: 0}}
	s.on("Reserve").Return(inventory.Reservation{},
		temporal.NewNonRetryableApplicationError("out of stock", activities.ErrTypeOutOfStock, nil, short))
	st := s.run(input("tok_ok"))

	assert.Equal(t, sagav2.OutcomeOutOfStock, s.placed.Outcome)
	assert.Equal(t, short, s.placed.Short)
	assert.Equal(t, sagav2.StatusFailed, st.Status)
	assert.Zero(t, s.calls["Authorize"])
}

func TestOrder_SameKeyDifferentBody_Rejected(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("AUTHORIZED")
	var rejected error
	s.at(0, func() {
		s.env.UpdateWorkflow(sagav2.UpdatePlaceOrder, "other", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(err error) { rejected = err }, OnComplete: func(any, error) {}}, "another-hash")
	})
	s.run(input("tok_ok"))
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(rejected, &appErr))
	assert.Equal(t, sagav2.ErrTypeIdempotencyKeyReused, appErr.Type())
}

// triesBeforePark is how often a failing step runs before the order parks: its quick first try
// (3 attempts inside the workflow task), then its full retries (8 attempts on durable timers).
const triesBeforePark = 3 + 8

func TestOrder_CaptureExhausted_ParkedThenSupportRetry_Confirmed(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("AUTHORIZED")
	down := temporal.NewApplicationError("provider unavailable", activities.ErrTypeProviderDown)
	s.on("Capture").Return(activities.PaymentResult{}, down).Times(triesBeforePark)
	s.on("Capture").Return(activities.PaymentResult{Status: "CAPTURED"}, nil)
	var parked sagav2.OrderState
	// Retries end after about 2 minutes; support retries within the first parked period.
	s.at(3*time.Minute, func() {
		v, err := s.env.QueryWorkflow(sagav2.QueryStatus)
		require.NoError(t, err)
		require.NoError(t, v.Get(&parked))
		s.env.SignalWorkflow(sagav2.SupportAction, sagav2.SupportRequest{Action: "retry", Reason: "provider back"})
	})
	st := s.run(input("tok_ok"))

	assert.Equal(t, sagav2.StatusNeedsAttention, parked.Status)
	assert.True(t, parked.NeedsAttention)
	require.NotNil(t, parked.Attention)
	assert.Equal(t, "capture", parked.Attention.Step)
	assert.Equal(t, sagav2.StatusConfirmed, st.Status)
	assert.False(t, st.NeedsAttention)
	assert.Equal(t, 1, s.calls["Park"])
}

func TestOrder_ParkedStep_RetriesByItselfWhenTheOutageEnds(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("AUTHORIZED")
	down := temporal.NewApplicationError("provider unavailable", activities.ErrTypeProviderDown)
	s.on("Capture").Return(activities.PaymentResult{}, down).Times(triesBeforePark)
	s.on("Capture").Return(activities.PaymentResult{Status: "CAPTURED"}, nil)
	st := s.run(input("tok_ok"))

	assert.Equal(t, sagav2.StatusConfirmed, st.Status, "no support action: the parked step tried again by itself")
	assert.Equal(t, 1, s.calls["Park"])
	assert.Equal(t, triesBeforePark+1, s.calls["Capture"])
}

func TestOrder_SupportRetryWhileNotParked_Refused(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("REQUIRES_ACTION")
	var rejected error
	s.at(time.Minute, func() {
		s.env.UpdateWorkflow(sagav2.SupportAction, "s1", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(err error) { rejected = err }, OnComplete: func(any, error) {}},
			sagav2.SupportRequest{Action: "refund", Reason: "customer asked"})
	})
	s.signal(2*time.Minute, sagav2.SignalPaymentResult, sagav2.PaymentSignal{Status: "AUTHORIZED"})
	st := s.run(input("tok_3ds"))

	require.Error(t, rejected, "refund applies to a parked order only")
	assert.Equal(t, sagav2.StatusConfirmed, st.Status)
}

func TestOrder_StepRetriesPastItsQuickTry_HoldChildStartsFirst(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("AUTHORIZED")
	blip := errors.New("database restarting")
	// The quick try fails; the longer retries wait on durable timers, so the order holds stock
	// while it waits: its hold child must run by then.
	s.on("Confirm").Return(inventory.ConfirmResult{}, blip).Times(4)
	s.on("Confirm").Return(inventory.ConfirmResult{Confirmed: 1}, nil)
	st := s.run(input("tok_ok"))

	assert.Equal(t, sagav2.StatusConfirmed, st.Status)
	assert.Equal(t, 5, s.calls["Confirm"])
	assert.Equal(t, 1, s.holds, "the hold child started before the order waited on a retry")
}

func TestOrder_StockReleasedDirectly_NoHoldChildLater(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("DECLINED")
	down := temporal.NewApplicationError("provider unavailable", activities.ErrTypeProviderDown)
	// The stock goes back at once; reversing the payment then has to wait on retries.
	s.on("Reverse").Return(activities.PaymentResult{}, down).Times(4)
	s.on("Reverse").Return(activities.PaymentResult{Status: "VOIDED"}, nil)
	st := s.run(input("tok_decline"))

	assert.Equal(t, sagav2.StatusFailed, st.Status)
	assert.Equal(t, 1, s.calls["Release"])
	assert.Zero(t, s.holds, "nothing left to hold once the stock is back")
}

func TestOrder_RecordingTheAnswerFailsAWhile_AnsweredAndRecordedLater(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("AUTHORIZED")
	s.on("RecordOutcome").Return(errors.New("database restarting")).Times(4)
	s.on("RecordOutcome").Return(nil)
	st := s.run(input("tok_ok"))

	require.NotNil(t, s.placed, "the shopper had the answer")
	assert.Equal(t, sagav2.OutcomeCreated, s.placed.Outcome)
	assert.Equal(t, 5, s.calls["RecordOutcome"], "recorded once the database was back")
	assert.Equal(t, sagav2.StatusConfirmed, st.Status)
}

func TestOrder_CompensationReleaseRetries_NoHoldChildStarted(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("DECLINED")
	s.on("Release").Return(0, errors.New("database restarting")).Times(4)
	s.on("Release").Return(1, nil)
	st := s.run(input("tok_decline"))

	assert.Equal(t, sagav2.StatusFailed, st.Status)
	assert.Equal(t, 5, s.calls["Release"], "released directly, once the database was back")
	assert.Zero(t, s.holds, "compensating: no hold child started to do it")
}

func TestOrder_CancelWhileTheOrderIsBeingFailed_Refused(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("DECLINED")
	// The decline's answer is out, and recording it retries while the database is down.
	s.on("RecordOutcome").Return(errors.New("database restarting")).Times(7)
	s.on("RecordOutcome").Return(nil)
	var rejected error
	s.at(2*time.Second, func() {
		s.env.UpdateWorkflow(sagav2.UpdateCancel, "c1", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(err error) { rejected = err }, OnComplete: func(any, error) {}})
	})
	st := s.run(input("tok_decline"))

	assert.Equal(t, sagav2.OutcomePaymentDeclined, s.placed.Outcome)
	assert.Equal(t, sagav2.StatusFailed, st.Status)
	require.Error(t, rejected, "an order already failing is not cancellable")
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(rejected, &appErr))
	assert.Equal(t, sagav2.ErrTypeNotCancellable, appErr.Type())
}
