package workflows_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/internal/staff"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/order"
	"github.com/marketplace/checkout/payment"
	"github.com/marketplace/checkout/pricing"
	"github.com/marketplace/checkout/workflows"
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
	placed *workflows.PlaceOrderResult
	err    error
	final  map[order.Status]int // final status transitions written, by status
	calls  map[string]int
	mocked map[string]bool
	// holds counts the hold-expiry children started, orderTimers the timers started (the test
	// environment also times activity retries with them).
	holds       int
	orderTimers int
	// parked is what support saw of a parked order, when a test looked.
	parked *workflows.Attention
	// recorded are the answers recorded under the key by the default mocks, each as the write
	// that carried it and the outcome ("FinishAnswered PAYMENT_DECLINED").
	recorded []string
	// heard, when set, is called as the shopper hears the answer.
	heard func()
}

func newSaga(t *testing.T) *saga {
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(workflows.OrderWorkflow)
	env.RegisterWorkflow(workflows.HoldWorkflow)
	env.RegisterActivity(&activities.Orders{})
	env.RegisterActivity(&activities.Payments{})
	env.RegisterActivity(&activities.Inventory{})
	env.RegisterActivity(&activities.PaymentReconciler{})
	s := &saga{t: t, env: env, final: map[order.Status]int{}, calls: map[string]int{}, mocked: map[string]bool{}}
	env.SetOnChildWorkflowStartedListener(func(info *workflow.Info, _ workflow.Context, _ converter.EncodedValues) {
		if info.WorkflowType.Name == "HoldWorkflow" {
			s.holds++
		}
	})
	env.SetOnTimerScheduledListener(func(timerID string, d time.Duration) { s.orderTimers++ })
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
	def("RecordOutcome", func(ctx context.Context, in activities.RecordOutcomeInput) error {
		s.record("RecordOutcome", &in)
		return nil
	})
	def("Timeline", nil)
	def("Park", nil)
	def("Escalate", nil)
	def("StaffAction", nil)
	def("Resume", nil)
	def("Release", 1, nil)
	def("ReleaseExpired", inventory.Expiry{Released: 1}, nil)
	def("Restock", 0, nil)
	def("Reverse", activities.PaymentResult{Status: "VOIDED"}, nil)
	def("Confirm", inventory.ConfirmResult{Confirmed: 1}, nil)
	def("Capture", activities.PaymentResult{Status: "CAPTURED", IntentID: "pi_1"}, nil)
	def("Authorize", activities.PaymentResult{Status: "AUTHORIZED", IntentID: "pi_1"}, nil)
	def("ResolvePayment", activities.PaymentResult{Status: payment.StatusNotFound}, nil)
	def("Finish", func(ctx context.Context, in activities.TransitionInput) (activities.Finished, error) {
		s.final[order.Status(in.To)]++
		return activities.Finished{Changed: true, Status: order.Status(in.To), FailureCode: problem.Code(in.Code)}, nil
	})
	def("AuthorizeForCapture", activities.PaymentResult{Status: "AUTHORIZED", IntentID: "pi_1"}, nil)
	def("FinishAnswered", func(ctx context.Context, in activities.FinishInput) (activities.Finished, error) {
		s.final[order.Status(in.To)]++
		s.record("FinishAnswered", in.Answer)
		s.record("FinishAnswered", in.Refusal) // this call ends the order
		return activities.Finished{Changed: true, Status: order.Status(in.To), FailureCode: problem.Code(in.Code)}, nil
	})
	def("CaptureFinish", s.captured)
	def("EndIfOrphaned", activities.Orphan{Running: true}, nil)
	def("SettleUnknown", activities.PaymentResult{Status: "AUTHORIZED", IntentID: "pi_1"}, nil)
	// The provider backs every event unless a test says otherwise.
	def("VerifyEvent", func(ctx context.Context, in activities.VerifyEventInput) (activities.PaymentResult, error) {
		return activities.PaymentResult{Status: in.Claimed, IntentID: "pi_1"}, nil
	})
}

// captured is CaptureFinish when the provider captures and the order is confirmed.
func (s *saga) captured(ctx context.Context, in activities.CaptureFinishInput) (activities.CaptureFinished, error) {
	s.final[order.StatusConfirmed]++
	s.record("CaptureFinish", in.Answer)
	return activities.CaptureFinished{Payment: activities.PaymentResult{Status: "CAPTURED", IntentID: "pi_1"},
		Finished: activities.Finished{Changed: true, Status: order.StatusConfirmed}}, nil
}

// record notes an answer recorded under the key by the write named by.
func (s *saga) record(by string, in *activities.RecordOutcomeInput) {
	if in == nil {
		return
	}
	var res workflows.PlaceOrderResult
	require.NoError(s.t, json.Unmarshal([]byte(jsonOf(s.t, in.Outcome)), &res))
	s.recorded = append(s.recorded, by+" "+string(res.Outcome))
}

// captureFails makes CaptureFinish fail with err times times (every time when times is 0), then
// capture.
func (s *saga) captureFails(err error, times int) {
	c := s.on("CaptureFinish").Return(activities.CaptureFinished{}, err)
	if times > 0 {
		c.Times(times)
		s.on("CaptureFinish").Return(s.captured)
	}
}

// earlierSteps are the activities builds before saga-8 ran and this one does not: the hold's own
// write, Authorize with its mirror, Capture and Finish as steps of their own.
var earlierSteps = []string{"SetHold", "Authorize", "Capture", "Finish"}

// on mocks an activity (the first matching mock answers) and counts its calls.
func (s *saga) on(name string) *testsuite.MockCallWrapper {
	s.mocked[name] = true
	return s.env.OnActivity(name, mock.Anything, mock.Anything).Run(func(mock.Arguments) { s.calls[name]++ })
}

func (s *saga) authorizeReturns(status payment.Status) {
	s.on("AuthorizeForCapture").Return(activities.PaymentResult{Status: status, IntentID: "pi_1",
		RedirectURL: map[bool]string{true: "http://localhost:8080/paysim/3ds/pi_1"}[status == payment.StatusRequiresAction]}, nil)
}

// at runs f after d of workflow time.
func (s *saga) at(d time.Duration, f func()) { s.env.RegisterDelayedCallback(f, d) }

func (s *saga) signal(d time.Duration, name string, arg any) {
	s.at(d, func() { s.env.SignalWorkflow(name, arg) })
}

func (s *saga) run(in workflows.OrderInput) workflows.OrderState {
	s.defaults()
	s.at(0, func() {
		s.env.UpdateWorkflow(workflows.UpdatePlaceOrder, "place", &testsuite.TestUpdateCallback{
			OnAccept: func() {},
			OnReject: func(err error) { s.err = err },
			OnComplete: func(v any, err error) {
				if err != nil {
					s.err = err
					return
				}
				var r workflows.PlaceOrderResult
				require.NoError(s.t, json.Unmarshal([]byte(jsonOf(s.t, v)), &r))
				s.placed = &r
				if s.heard != nil {
					s.heard()
				}
			},
		}, in.RequestHash)
	})
	s.env.ExecuteWorkflow(workflows.OrderWorkflow, in)
	for _, name := range earlierSteps {
		assert.Zero(s.t, s.calls[name], "%s is an earlier build's step", name)
	}
	require.True(s.t, s.env.IsWorkflowCompleted())
	require.NoError(s.t, s.env.GetWorkflowError())
	var st workflows.OrderState
	require.NoError(s.t, s.env.GetWorkflowResult(&st))
	return st
}

func input(token string) workflows.OrderInput {
	return workflows.OrderInput{UserID: 7, IdempotencyKey: "k1", RequestHash: hash, PriceVersion: "pv_1",
		AddressID: 5, PaymentMethodToken: token, HoldTTL: hold, Provider: "paysim"}
}

var down = temporal.NewApplicationError("provider unavailable", string(problem.PaymentProviderUnavailable))

func TestOrder_ImmediateAuthorization_ConfirmedInOneTaskWithoutHold(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("AUTHORIZED")
	st := s.run(input("tok_ok"))

	require.NotNil(t, s.placed)
	assert.Equal(t, workflows.OutcomeCreated, s.placed.Outcome)
	assert.Equal(t, payment.StatusAuthorized, s.placed.Payment.Status)
	assert.Equal(t, order.StatusConfirmed, st.Status)
	assert.Equal(t, payment.StatusCaptured, st.PaymentStatus)
	assert.Equal(t, 1, s.calls["Confirm"])
	assert.Equal(t, 1, s.calls["CaptureFinish"])
	assert.Equal(t, 1, s.final[order.StatusConfirmed])
	assert.Zero(t, s.calls["Release"]+s.calls["Reverse"]+s.calls["Restock"], "nothing compensated")
	assert.Zero(t, s.holds, "decided in its first workflow task: no hold child to start and stop")
	assert.Zero(t, s.orderTimers)
}

func TestOrder_3DSApproved_Confirmed_NoTimerButTheHolds(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("REQUIRES_ACTION")
	s.signal(2*time.Minute, workflows.SignalPaymentResult, workflows.PaymentSignal{EventID: "evt_1", IntentID: "pi_1", Status: "AUTHORIZED"})
	st := s.run(input("tok_3ds"))

	assert.Equal(t, payment.StatusRequiresAction, s.placed.Payment.Status)
	assert.Equal(t, "http://localhost:8080/paysim/3ds/pi_1", s.placed.Payment.RedirectURL)
	assert.Equal(t, order.StatusConfirmed, st.Status)
	assert.Equal(t, 1, s.calls["CaptureFinish"])
	assert.Equal(t, 1, s.holds, "an order that waits for 3-D Secure has its hold child")
	assert.Equal(t, s.holds, s.orderTimers, "the hold's timer is the only one: the order keeps none of its own")
}

func TestOrder_3DSDeclined_FailedAndCompensated(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("REQUIRES_ACTION")
	s.signal(time.Minute, workflows.SignalPaymentResult, workflows.PaymentSignal{EventID: "evt_1", Status: "DECLINED"})
	st := s.run(input("tok_3ds"))

	assert.Equal(t, order.StatusFailed, st.Status)
	assert.Equal(t, problem.PaymentDeclined, st.FailureCode)
	assert.GreaterOrEqual(t, s.calls["Release"], 1, "stock given back")
	assert.Equal(t, 1, s.calls["Reverse"], "authorization voided")
	assert.Zero(t, s.calls["CaptureFinish"])
}

func TestOrder_EventTheProviderDoesNotBack_NotActedOn(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("REQUIRES_ACTION")
	s.on("VerifyEvent").Return(activities.PaymentResult{}, temporal.NewNonRetryableApplicationError(
		"the event names intent pi_forged, the order's is pi_1", string(problem.PaymentEventRefused), nil))
	s.signal(time.Minute, workflows.SignalPaymentResult, workflows.PaymentSignal{EventID: "evt_forged", IntentID: "pi_forged", Status: "AUTHORIZED"})
	st := s.run(input("tok_3ds"))

	assert.Equal(t, 1, s.calls["VerifyEvent"], "the provider was asked before acting")
	assert.Equal(t, order.StatusFailed, st.Status)
	assert.Equal(t, problem.HoldExpired, st.FailureCode, "the order kept waiting for a real payment")
	assert.Zero(t, s.calls["Confirm"]+s.calls["CaptureFinish"], "nothing confirmed on the event's word")
}

func TestOrder_EventClaimsDeclined_ProviderStillWaiting_ThenApproved(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("REQUIRES_ACTION")
	s.on("VerifyEvent").Return(activities.PaymentResult{Status: "REQUIRES_ACTION", IntentID: "pi_1"}, nil).Once()
	s.signal(time.Minute, workflows.SignalPaymentResult, workflows.PaymentSignal{EventID: "evt_fake", IntentID: "pi_1", Status: "DECLINED"})
	s.signal(2*time.Minute, workflows.SignalPaymentResult, workflows.PaymentSignal{EventID: "evt_2", IntentID: "pi_1", Status: "AUTHORIZED"})
	s.on("VerifyEvent").Return(activities.PaymentResult{Status: "AUTHORIZED", IntentID: "pi_1"}, nil)
	st := s.run(input("tok_3ds"))

	assert.Equal(t, 2, s.calls["VerifyEvent"])
	assert.Equal(t, order.StatusConfirmed, st.Status, "the provider's status is acted on, not the event's")
	assert.Equal(t, 1, s.calls["CaptureFinish"])
}

func TestOrder_ProviderDownWhenAsked_EventCheckedByServerRetries(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("REQUIRES_ACTION")
	tries := 0
	s.on("VerifyEvent").Return(func(ctx context.Context, in activities.VerifyEventInput) (activities.PaymentResult, error) {
		tries++
		if tries <= 6 {
			return activities.PaymentResult{}, down
		}
		return activities.PaymentResult{Status: "AUTHORIZED", IntentID: "pi_1"}, nil
	})
	s.signal(time.Minute, workflows.SignalPaymentResult, workflows.PaymentSignal{EventID: "evt_1", IntentID: "pi_1", Status: "AUTHORIZED"})
	st := s.run(input("tok_3ds"))

	assert.Greater(t, tries, 6)
	assert.Equal(t, order.StatusConfirmed, st.Status)
}

func TestOrder_DeclinedAtOnce_402WithStockBack(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("DECLINED")
	steps := []string{}
	s.on("Release").Return(1, nil).Run(func(mock.Arguments) { steps = append(steps, "release") })
	s.heard = func() { steps = append(steps, "answer") }
	st := s.run(input("tok_decline"))

	assert.Equal(t, workflows.OutcomePaymentDeclined, s.placed.Outcome)
	assert.Equal(t, orderID, s.placed.OrderID)
	assert.Equal(t, order.StatusFailed, st.Status)
	assert.Equal(t, []string{"release", "answer"}, steps, "the stock is back before the shopper hears of the decline")
	assert.Equal(t, []string{"FinishAnswered PAYMENT_DECLINED"}, s.recorded, "recorded with the order's end")
	assert.Zero(t, s.calls["RecordOutcome"], "no transaction of its own")
	assert.Zero(t, s.holds)
}

func TestOrder_HoldExpiresBeforePayment_FailedOnTheHoldsEnd(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("REQUIRES_ACTION")
	st := s.run(input("tok_3ds"))

	assert.Equal(t, order.StatusFailed, st.Status)
	assert.Equal(t, problem.HoldExpired, st.FailureCode)
	assert.GreaterOrEqual(t, s.calls["ReleaseExpired"], 1, "the hold child released the stock")
	assert.Equal(t, 1, s.calls["Reverse"], "the pending authorization is voided")
	assert.Equal(t, 1, s.calls["EndIfOrphaned"], "the hold looked whether its order was still there")
	assert.Zero(t, s.calls["Confirm"])
}

func TestOrder_LatePaymentAfterExpiry_VoidedNeverConfirmed(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("REQUIRES_ACTION")
	s.signal(hold+time.Second, workflows.SignalPaymentResult, workflows.PaymentSignal{EventID: "evt_late", Status: "AUTHORIZED"})
	st := s.run(input("tok_3ds"))

	assert.Equal(t, order.StatusFailed, st.Status)
	assert.Equal(t, problem.HoldExpired, st.FailureCode)
	assert.Zero(t, s.calls["Confirm"])
	assert.Zero(t, s.calls["CaptureFinish"], "no money taken without goods")
	assert.Equal(t, 1, s.calls["Reverse"])
}

func TestOrder_ConfirmFindsReservationReleased_VoidedAndFailed(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("AUTHORIZED")
	s.on("Confirm").Return(inventory.ConfirmResult{},
		temporal.NewNonRetryableApplicationError("released", string(problem.ReservationNotActive), nil))
	st := s.run(input("tok_ok"))

	assert.Equal(t, order.StatusFailed, st.Status)
	assert.Equal(t, problem.StockReleased, st.FailureCode)
	assert.Zero(t, s.calls["CaptureFinish"])
	assert.Equal(t, 1, s.calls["Reverse"], "authorization voided")
}

func TestOrder_CaptureFailsThenSucceedsOnItsServerRetries_Confirmed(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("AUTHORIZED")
	s.captureFails(down, 4)
	st := s.run(input("tok_ok"))

	assert.Equal(t, order.StatusConfirmed, st.Status)
	assert.Equal(t, 5, s.calls["CaptureFinish"])
	assert.Zero(t, s.calls["Park"], "retries absorbed it; nobody was paged")
	assert.Zero(t, s.holds, "the stock was confirmed: nothing left to hold while it waited")
}

func TestOrder_ConfirmRetriesPastItsQuickTry_HoldChildStartsFirst(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("AUTHORIZED")
	blip := errors.New("database restarting")
	s.on("Confirm").Return(inventory.ConfirmResult{}, blip).Times(4)
	s.on("Confirm").Return(inventory.ConfirmResult{Confirmed: 1}, nil)
	st := s.run(input("tok_ok"))

	assert.Equal(t, order.StatusConfirmed, st.Status)
	assert.Equal(t, 5, s.calls["Confirm"])
	assert.Equal(t, 1, s.holds, "the hold child started before the order waited on the server with stock held")
}

func TestOrder_PaymentUnknown_ResolvedInTheSameTask_NoHoldChild(t *testing.T) {
	s := newSaga(t)
	s.on("AuthorizeForCapture").Return(activities.PaymentResult{Status: payment.StatusUnknown},
		temporal.NewNonRetryableApplicationError("timeout", string(problem.PaymentOutcomeUnknown), nil))
	s.on("ResolvePayment").Return(activities.PaymentResult{Status: "AUTHORIZED", IntentID: "pi_1"}, nil)
	st := s.run(input("tok_timeout"))

	assert.Equal(t, payment.StatusAuthorized, s.placed.Payment.Status, "decided by asking, not by guessing")
	assert.Equal(t, order.StatusConfirmed, st.Status)
	assert.Equal(t, 1, s.calls["AuthorizeForCapture"])
	assert.Zero(t, s.holds, "decided in the same workflow task: no hold child")
	assert.Zero(t, s.calls["SettleUnknown"])
}

func TestOrder_PaymentUnknown_ProviderNeverSawIt_AuthorizedAgainThenDeclined(t *testing.T) {
	s := newSaga(t)
	s.on("AuthorizeForCapture").Return(activities.PaymentResult{Status: payment.StatusUnknown},
		temporal.NewNonRetryableApplicationError("timeout", string(problem.PaymentOutcomeUnknown), nil)).Once()
	s.on("AuthorizeForCapture").Return(activities.PaymentResult{Status: "DECLINED"}, nil)
	s.on("ResolvePayment").Return(activities.PaymentResult{Status: payment.StatusNotFound}, nil)
	st := s.run(input("tok_timeout"))

	assert.Equal(t, 2, s.calls["AuthorizeForCapture"], "the same key again, once the provider said it never saw it")
	assert.Equal(t, workflows.OutcomePaymentDeclined, s.placed.Outcome)
	assert.Equal(t, order.StatusFailed, st.Status)
	assert.Equal(t, 1, s.calls["Release"])
}

func TestOrder_PaymentStillUnknown_SettledByServerRetriesNotPolling(t *testing.T) {
	s := newSaga(t)
	s.on("AuthorizeForCapture").Return(activities.PaymentResult{Status: payment.StatusUnknown},
		temporal.NewNonRetryableApplicationError("timeout", string(problem.PaymentOutcomeUnknown), nil))
	s.on("ResolvePayment").Return(activities.PaymentResult{}, down)
	// The provider cannot tell for five attempts; the server retries with backoff.
	s.on("SettleUnknown").Return(activities.PaymentResult{},
		temporal.NewApplicationError("still unknown", string(problem.PaymentStillUnknown))).Times(5)
	s.on("SettleUnknown").Return(activities.PaymentResult{Status: "AUTHORIZED", IntentID: "pi_1"}, nil)
	st := s.run(input("tok_timeout"))

	assert.Equal(t, payment.StatusUnknown, s.placed.Payment.Status)
	assert.Equal(t, order.StatusConfirmed, st.Status)
	assert.Equal(t, 6, s.calls["SettleUnknown"])
	assert.Equal(t, 1, s.holds, "it waited with stock held: its hold ran")
}

func TestOrder_ShopperCancels_CancelledAndCompensated(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("REQUIRES_ACTION")
	var cancelled *workflows.CancelResult
	s.at(time.Minute, func() {
		s.env.UpdateWorkflow(workflows.UpdateCancel, "c1", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(err error) { t.Errorf("cancel rejected: %v", err) },
			OnComplete: func(v any, err error) {
				require.NoError(t, err)
				r := v.(workflows.CancelResult)
				cancelled = &r
			}})
	})
	st := s.run(input("tok_3ds"))

	require.NotNil(t, cancelled)
	assert.Equal(t, order.StatusCancelled, cancelled.Status)
	assert.Equal(t, order.StatusCancelled, st.Status)
	assert.GreaterOrEqual(t, s.calls["Release"], 1)
	assert.Equal(t, 1, s.calls["Reverse"])
}

func TestOrder_CancelAfterConfirmation_Refused(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("AUTHORIZED")
	var rejected error
	// Keep the workflow open after confirming by holding the capture for a while.
	s.on("CaptureFinish").Return(s.captured).After(time.Second)
	s.at(time.Millisecond, func() {
		s.env.UpdateWorkflow(workflows.UpdateCancel, "c1", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(err error) { rejected = err }, OnComplete: func(any, error) {}})
	})
	st := s.run(input("tok_ok"))
	assert.Equal(t, order.StatusConfirmed, st.Status)
	requireAppError(t, rejected, string(problem.OrderNotCancellable))
}

func TestOrder_SellerShortfall_PendingOrderFails(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("REQUIRES_ACTION")
	s.signal(3*time.Minute, workflows.SignalStockShortfall, workflows.ShortfallSignal{SKUID: 77, WarehouseID: 1})
	st := s.run(input("tok_3ds"))

	assert.Equal(t, order.StatusFailed, st.Status)
	assert.Equal(t, problem.StockShortfall, st.FailureCode)
	assert.Equal(t, 1, s.calls["Reverse"], "payment voided")
	assert.GreaterOrEqual(t, s.calls["Release"], 1, "what is left of the reservation goes back")
}

func TestOrder_PriceChanged_NoOrder(t *testing.T) {
	s := newSaga(t)
	s.on("CheckPrices").Return(pricing.Quote{}, activities.RefusalError(problem.New(problem.PriceChanged, "changed").
		WithDetails(pricing.PriceChangedDetails{PriceVersion: "pv_2"})))
	st := s.run(input("tok_ok"))

	assert.Equal(t, workflows.OutcomePriceChanged, s.placed.Outcome)
	assert.Equal(t, "pv_2", s.placed.PriceVersion)
	assert.Zero(t, s.calls["CreateOrder"]+s.calls["Reserve"]+s.calls["AuthorizeForCapture"], "nothing reserved, nothing charged")
	assert.Zero(t, st.OrderID)
}

func TestOrder_OutOfStock_FailedWithShortLines(t *testing.T) {
	s := newSaga(t)
	short := []inventory.ShortLine{{SKUID: 77, Requested: 1, Available: 0}}
	s.on("Reserve").Return(inventory.Reservation{},
		activities.RefusalError(problem.New(problem.OutOfStock, "out of stock").WithDetails(activities.OutOfStockDetails{Items: short})))
	st := s.run(input("tok_ok"))

	assert.Equal(t, workflows.OutcomeOutOfStock, s.placed.Outcome)
	assert.Equal(t, short, s.placed.Short)
	assert.Equal(t, order.StatusFailed, st.Status)
	assert.Zero(t, s.calls["AuthorizeForCapture"])
}

// TestOrder_DatabaseRestartsWhilePlacing_OrderPlacedNotGivenUp: the database restarts as the order
// is placed — each placing step that writes it fails for about five seconds (eight attempts) — and
// the order is still placed and paid: the steps ride the restart out within the shopper's wait,
// instead of giving up an order whose row is written and spending its key.
func TestOrder_DatabaseRestartsWhilePlacing_OrderPlacedNotGivenUp(t *testing.T) {
	restarting := errors.New("FATAL: the database system is starting up (SQLSTATE 57P03)")
	reserved := func(ctx context.Context, in activities.ReserveInput) (inventory.Reservation, error) {
		return inventory.Reservation{OrderID: in.OrderID, ExpiresAt: time.Now().Add(in.Hold),
			Allocations: []inventory.Allocation{{ReservationID: 1, SKUID: 77, WarehouseID: 1, Quantity: 1, Status: "ACTIVE"}}}, nil
	}
	for _, step := range []struct {
		name string
		zero any
		ok   []any // the answer once the database is back
	}{
		{"CheckPrices", pricing.Quote{}, []any{quote, nil}},
		{"CreateOrder", activities.CreatedOrder{}, []any{activities.CreatedOrder{OrderID: orderID}, nil}},
		{"Reserve", inventory.Reservation{}, []any{reserved}},
	} {
		t.Run(step.name, func(t *testing.T) {
			s := newSaga(t)
			s.on(step.name).Return(step.zero, restarting).Times(8)
			s.on(step.name).Return(step.ok...)
			s.authorizeReturns("AUTHORIZED")
			st := s.run(input("tok_ok"))

			require.NotNil(t, s.placed)
			assert.Equal(t, workflows.OutcomeCreated, s.placed.Outcome)
			assert.Equal(t, order.StatusConfirmed, st.Status)
			assert.Equal(t, 9, s.calls[step.name], "eight failed attempts, then the one that wrote")
			assert.Zero(t, s.calls["Release"]+s.calls["Reverse"], "nothing given back")
		})
	}
}

// TestOrder_DatabaseDownForThePlacingWindow_OrderGivenUpWithItsStockBack: a database down for
// longer than the shopper's wait fails the order the reservation was for: its stock is released
// and the answer names the order.
func TestOrder_DatabaseDownForThePlacingWindow_OrderGivenUpWithItsStockBack(t *testing.T) {
	s := newSaga(t)
	s.on("Reserve").Return(inventory.Reservation{}, errors.New("connection refused"))
	st := s.run(input("tok_ok"))

	require.NotNil(t, s.placed)
	assert.Equal(t, workflows.OutcomeUnavailable, s.placed.Outcome)
	assert.Equal(t, orderID, s.placed.OrderID)
	assert.Equal(t, order.StatusFailed, st.Status)
	assert.Equal(t, 1, s.calls["Release"], "a reservation whose answer was lost is released")
	assert.Zero(t, s.calls["AuthorizeForCapture"], "nothing charged")
}

// TestOrder_PaymentEventWhileBeingFailed_Reversed: the provider's event comes while the order is
// giving up (here: out of stock, so no payment was ever asked for, yet the provider authorized the
// order's key late). The order reverses what the provider holds before it closes.
func TestOrder_PaymentEventWhileBeingFailed_Reversed(t *testing.T) {
	s := newSaga(t)
	s.on("Reserve").Return(inventory.Reservation{},
		activities.RefusalError(problem.New(problem.OutOfStock, "out of stock").WithDetails(activities.OutOfStockDetails{Items: []inventory.ShortLine{}})))
	s.on("Release").After(time.Minute).Return(0, nil)
	s.signal(10*time.Second, workflows.SignalPaymentResult, workflows.PaymentSignal{EventID: "evt_late", IntentID: "pi_1", Status: "AUTHORIZED"})
	st := s.run(input("tok_3ds"))

	assert.Equal(t, order.StatusFailed, st.Status)
	assert.Zero(t, s.calls["AuthorizeForCapture"])
	assert.Equal(t, 1, s.calls["Reverse"], "the late authorization is reversed by the order itself")
	assert.Zero(t, s.calls["CaptureFinish"])
}

func TestOrder_SameKeyDifferentBody_Rejected(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("AUTHORIZED")
	var rejected error
	s.at(0, func() {
		s.env.UpdateWorkflow(workflows.UpdatePlaceOrder, "other", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(err error) { rejected = err }, OnComplete: func(any, error) {}}, "another-hash")
	})
	s.run(input("tok_ok"))
	requireAppError(t, rejected, string(problem.IdempotencyKeyReused))
}

// captureDownFor makes the capture fail as "provider unavailable" until d of workflow time has
// passed.
func (s *saga) captureDownFor(d time.Duration) {
	until := s.env.Now().Add(d)
	s.on("CaptureFinish").Return(func(ctx context.Context, in activities.CaptureFinishInput) (activities.CaptureFinished, error) {
		if s.env.Now().Before(until) {
			return activities.CaptureFinished{}, down
		}
		return s.captured(ctx, in)
	})
}

func (s *saga) query() workflows.OrderState {
	v, err := s.env.QueryWorkflow(workflows.QueryStatus)
	require.NoError(s.t, err)
	var st workflows.OrderState
	require.NoError(s.t, v.Get(&st))
	return st
}

func (s *saga) support(at time.Duration, action string, rejected *error) {
	s.at(at, func() {
		s.env.UpdateWorkflow(workflows.SupportAction, "s-"+action+at.String(), &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(err error) {
				if rejected != nil {
					*rejected = err
				}
			}, OnComplete: func(any, error) {}}, workflows.SupportRequest{Action: action, Reason: "from the test",
			Actor: &staffMember})
	})
}

// staffMember is the signed-in support person the codec endpoint names in what the UI sends.
var staffMember = staff.Actor{Sub: "900", Role: "support", Name: "Deniz Destek", Via: staff.ViaTemporalUI, IP: "10.0.0.5"}

func TestOrder_CaptureExhausted_ParkedThenSupportRetry_Confirmed(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("AUTHORIZED")
	s.captureDownFor(30 * time.Minute)
	var parked workflows.OrderState
	s.at(10*time.Minute, func() { parked = s.query() })
	var rejected error
	s.support(20*time.Minute, "retry", &rejected)
	// Support's retry fails too (still down); after 30 minutes the parked step's own retries succeed.
	st := s.run(input("tok_ok"))

	require.NoError(t, rejected)
	assert.Equal(t, order.StatusNeedsAttention, parked.Status)
	assert.True(t, parked.NeedsAttention)
	require.NotNil(t, parked.Attention)
	assert.Equal(t, "capture", parked.Attention.Step)
	assert.Empty(t, parked.Attention.Code, "an outage: retried on its own")
	assert.Equal(t, order.StatusConfirmed, st.Status)
	assert.False(t, st.NeedsAttention)
	assert.Equal(t, 2, s.calls["Park"], "parked, retried by support, parked again")
}

func TestOrder_ParkedStep_RetriesByItselfWhenTheOutageEnds(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("AUTHORIZED")
	s.captureDownFor(3 * 24 * time.Hour)
	st := s.run(input("tok_ok"))

	assert.Equal(t, order.StatusConfirmed, st.Status, "no support action: the parked step tried again by itself")
	assert.Equal(t, 1, s.calls["Park"])
	assert.Equal(t, 1, s.calls["Resume"])
}

func TestOrder_CaptureRefused_ParkedOnceWithItsCodeAndNotRetried(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("AUTHORIZED")
	s.on("CaptureFinish").Return(activities.CaptureFinished{},
		temporal.NewNonRetryableApplicationError("intent cannot be captured", string(problem.PaymentRefused), nil))
	var parked workflows.OrderState
	s.at(6*time.Hour, func() { parked = s.query() })
	s.support(6*time.Hour+time.Minute, "refund", nil)
	st := s.run(input("tok_ok"))

	require.NotNil(t, parked.Attention)
	assert.Equal(t, string(problem.PaymentRefused), parked.Attention.Code)
	assert.Equal(t, 1, s.calls["CaptureFinish"], "no retry can change a refusal: tried once, then support decides")
	assert.Equal(t, 1, s.calls["Park"])
	assert.Equal(t, order.StatusCancelled, st.Status)
	assert.Equal(t, problem.RefundedBySupport, st.FailureCode)
	assert.Equal(t, 1, s.calls["Restock"], "the confirmed units go back")
	assert.Equal(t, 1, s.calls["Reverse"])
}

// TestOrder_CaptureOfALapsedAuthorization_FailsTheOrderWithoutSupport: a capture the provider
// refuses because the authorization lapsed (or was about to) can never go through: the order
// fails AUTHORIZATION_EXPIRED at once, gives its confirmed units back and voids the payment,
// instead of waiting for support.
func TestOrder_CaptureOfALapsedAuthorization_FailsTheOrderWithoutSupport(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("AUTHORIZED")
	s.on("CaptureFinish").Return(activities.CaptureFinished{},
		temporal.NewNonRetryableApplicationError("authorization lapsed", string(problem.PaymentAuthorizationExpired), nil))
	st := s.run(input("tok_ok"))

	assert.Equal(t, order.StatusFailed, st.Status)
	assert.Equal(t, problem.AuthorizationExpired, st.FailureCode)
	assert.Zero(t, s.calls["Park"], "no retry and no support can capture a lapsed authorization")
	assert.Equal(t, 1, s.calls["CaptureFinish"])
	assert.Equal(t, 1, s.calls["Restock"], "the confirmed units go back")
	assert.Equal(t, 1, s.calls["Reverse"])
}

func TestOrder_ConfirmCommittedButAnsweredAnError_SupportCancel_Restocks(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("AUTHORIZED")
	// The confirm commits, then its answer is lost, every time: the step parks.
	s.on("Confirm").Return(inventory.ConfirmResult{}, errors.New("connection reset after commit"))
	s.support(10*time.Minute, "cancel", nil)
	st := s.run(input("tok_ok"))

	assert.Equal(t, order.StatusCancelled, st.Status)
	assert.Equal(t, 1, s.calls["Restock"], "confirmed units never stay sold on a cancelled order")
	assert.GreaterOrEqual(t, s.calls["Release"], 1)
	assert.Equal(t, 1, s.calls["Reverse"])
}

func TestOrder_SupportActionWhileConfirming_RefusedWithTheReason(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("AUTHORIZED")
	// The capture takes its retries (not parked): the order is confirming.
	s.captureFails(down, 4)
	var rejected error
	s.support(time.Second, "cancel", &rejected)
	st := s.run(input("tok_ok"))

	requireAppError(t, rejected, string(problem.InvalidSupportAction))
	assert.Contains(t, rejected.Error(), "being confirmed")
	assert.Equal(t, order.StatusConfirmed, st.Status, "a refused action changed nothing")
}

func TestOrder_SupportRetryWhileNotParked_Refused(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("REQUIRES_ACTION")
	var rejected error
	s.support(time.Minute, "retry", &rejected)
	s.signal(2*time.Minute, workflows.SignalPaymentResult, workflows.PaymentSignal{Status: "AUTHORIZED"})
	st := s.run(input("tok_3ds"))

	requireAppError(t, rejected, string(problem.InvalidSupportAction))
	assert.Equal(t, order.StatusConfirmed, st.Status)
}

// endedMeanwhile: another actor ended the order FAILED (ORPHANED) before the capture's
// transaction would have confirmed it; the capture went through at the provider.
func (s *saga) endedMeanwhile() {
	ended := activities.Finished{Status: order.StatusFailed, FailureCode: problem.Orphaned}
	s.on("CaptureFinish").Return(activities.CaptureFinished{Payment: activities.PaymentResult{Status: "CAPTURED",
		IntentID: "pi_1"}, Finished: ended}, nil)
	s.on("FinishAnswered").Return(ended, nil)
}

func TestOrder_CaptureFindsTheOrderEndedMeanwhile_NeverReportedConfirmed(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("AUTHORIZED")
	s.endedMeanwhile()
	st := s.run(input("tok_ok"))

	assert.Equal(t, order.StatusFailed, st.Status, "the row's status, not CONFIRMED")
	assert.Equal(t, problem.Orphaned, st.FailureCode)
	assert.Equal(t, 1, s.calls["Restock"], "what this run confirmed goes back")
	assert.Equal(t, 1, s.calls["Reverse"], "and what it captured")
}

// TestOrder_RecordingTheAnswerFailsAWhile_AnsweredAndRecordedLater: an order that waits for 3-D
// Secure records its answer before it waits, in a write of its own, retried while the database is
// down; the shopper has the answer meanwhile.
func TestOrder_RecordingTheAnswerFailsAWhile_AnsweredAndRecordedLater(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("REQUIRES_ACTION")
	s.on("RecordOutcome").Return(errors.New("database restarting")).Times(4)
	s.on("RecordOutcome").Return(nil)
	s.signal(2*time.Minute, workflows.SignalPaymentResult, workflows.PaymentSignal{EventID: "evt_1", IntentID: "pi_1", Status: "AUTHORIZED"})
	st := s.run(input("tok_3ds"))

	require.NotNil(t, s.placed, "the shopper had the answer")
	assert.Equal(t, workflows.OutcomeCreated, s.placed.Outcome)
	assert.Equal(t, 5, s.calls["RecordOutcome"], "recorded once the database was back")
	assert.Equal(t, order.StatusConfirmed, st.Status)
}

// TestOrder_ConfirmingTheOrderFailsAWhile_AnsweredAndRecordedWithIt: an order paid at once records
// its answer in the capture's transaction; while that transaction fails, the order waits on the
// server's retries, and records the answer on its own before it waits. The shopper has the answer
// meanwhile, and the capture, retried, still carries it (the first record stays).
func TestOrder_ConfirmingTheOrderFailsAWhile_AnsweredAndRecordedWithIt(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("AUTHORIZED")
	s.captureFails(errors.New("database restarting"), 4)
	var carried []bool
	s.env.SetOnLocalActivityStartedListener(func(info *activity.Info, _ context.Context, args []any) {
		if in, ok := args[0].(activities.CaptureFinishInput); ok {
			carried = append(carried, in.Answer != nil)
		}
	})
	st := s.run(input("tok_ok"))

	require.NotNil(t, s.placed, "the shopper had the answer")
	assert.Equal(t, workflows.OutcomeCreated, s.placed.Outcome)
	assert.Equal(t, order.StatusConfirmed, st.Status)
	require.NotEmpty(t, carried)
	assert.NotContains(t, carried, false, "the capture's quick tries carry the answer")
	assert.Equal(t, 5, s.calls["CaptureFinish"])
	assert.Equal(t, []string{"RecordOutcome CREATED", "CaptureFinish CREATED"}, s.recorded,
		"recorded before the order waited, and again (changing nothing) by the capture")
}

func TestOrder_CompensationReleaseRetries_NoHoldChildStarted(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("DECLINED")
	s.on("Release").Return(0, errors.New("database restarting")).Times(4)
	s.on("Release").Return(1, nil)
	st := s.run(input("tok_decline"))

	assert.Equal(t, order.StatusFailed, st.Status)
	assert.Equal(t, 5, s.calls["Release"], "released directly, once the database was back")
	assert.Zero(t, s.holds, "compensating: no hold child started to do it")
}

func TestOrder_CompensationParked_SupportCancelIsRefused_RetryGivesItBack(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("DECLINED")
	until := s.env.Now().Add(2 * time.Hour)
	s.on("Release").Return(func(context.Context, int64) (int, error) {
		if s.env.Now().Before(until) {
			return 0, errors.New("database down")
		}
		return 1, nil
	})
	var rejected error
	s.support(30*time.Minute, "cancel", &rejected)
	st := s.run(input("tok_decline"))

	requireAppError(t, rejected, string(problem.InvalidSupportAction))
	assert.Equal(t, order.StatusFailed, st.Status)
	assert.Equal(t, 1, s.calls["Park"])
}

func TestOrder_CancelWhileTheOrderIsBeingFailed_Refused(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("DECLINED")
	// The order's end, which records the decline, retries while the database is down.
	s.on("FinishAnswered").Return(activities.Finished{}, errors.New("database restarting")).Times(7)
	s.on("FinishAnswered").Return(activities.Finished{Changed: true, Status: order.StatusFailed,
		FailureCode: problem.PaymentDeclined}, nil)
	var rejected error
	s.at(2*time.Second, func() {
		s.env.UpdateWorkflow(workflows.UpdateCancel, "c1", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(err error) { rejected = err }, OnComplete: func(any, error) {}})
	})
	st := s.run(input("tok_decline"))

	assert.Equal(t, workflows.OutcomePaymentDeclined, s.placed.Outcome)
	assert.Equal(t, order.StatusFailed, st.Status)
	requireAppError(t, rejected, string(problem.OrderNotCancellable))
}

func requireAppError(t *testing.T, err error, typ string) {
	t.Helper()
	require.Error(t, err)
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "%v", err)
	assert.Equal(t, typ, appErr.Type())
}

// TestOrder_AuthorizationArrivesWhileTheOrderIsFailed_ReversedToo: the reversal found nothing at
// the provider yet; the authorization's word arrives meanwhile, and it is reversed before the order
// closes.
func TestOrder_AuthorizationArrivesWhileTheOrderIsFailed_ReversedToo(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("REQUIRES_ACTION")
	s.on("Reverse").Return(activities.PaymentResult{}, down).Times(4)
	s.on("Reverse").Return(activities.PaymentResult{Status: payment.StatusNotFound}, nil).Once()
	s.on("Reverse").Return(activities.PaymentResult{Status: "VOIDED"}, nil)
	s.signal(hold+500*time.Millisecond, workflows.SignalPaymentResult, workflows.PaymentSignal{EventID: "evt_late", Status: "AUTHORIZED"})
	st := s.run(input("tok_3ds"))

	assert.Equal(t, order.StatusFailed, st.Status)
	assert.Equal(t, problem.HoldExpired, st.FailureCode)
	assert.Equal(t, 6, s.calls["Reverse"], "reversed again once the authorization was known")
	assert.Equal(t, payment.StatusVoided, st.PaymentStatus)
}

// TestOrder_OverTheOpenOrderCap_RefusedNothingReservedKeyNotRecorded: the order row's step refuses
// the order (the shopper has as many orders waiting for payment as the cap allows). The shopper
// hears 429's outcome with the cap and when the first open order ends; nothing is reserved or
// authorized, and the refusal is not recorded under the key, so the same request may be sent again.
func TestOrder_OverTheOpenOrderCap_RefusedNothingReservedKeyNotRecorded(t *testing.T) {
	s := newSaga(t)
	ends := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	s.on("CreateOrder").Return(activities.CreatedOrder{}, activities.RefusalError(activities.TooManyOpenOrdersDetails{
		Limit: 3, Pending: 3, NextHoldEnd: &ends}.Problem("3 orders are waiting")))
	s.run(input("tok_3ds"))

	require.NotNil(t, s.placed)
	assert.Equal(t, workflows.OutcomeRejected, s.placed.Outcome)
	assert.Equal(t, problem.TooManyOpenOrders, s.placed.RejectCode)
	assert.Equal(t, 3, s.placed.OpenOrderLimit)
	require.NotNil(t, s.placed.NextHoldEnd)
	assert.True(t, ends.Equal(*s.placed.NextHoldEnd))
	assert.Zero(t, s.calls["RecordOutcome"], "the key stays free for this request")
	assert.Zero(t, s.calls["Reserve"])
	assert.Zero(t, s.calls["AuthorizeForCapture"])
	assert.Zero(t, s.holds)
}

// steps records, in order, the saga's steps that move stock, money or the order's answer and
// status, as the worker starts them (local or not); a step's retries count once.
func (s *saga) steps() *[]string {
	names := map[string]string{"RecordOutcome": "answer", "Confirm": "confirm", "CaptureFinish": "capture",
		"Restock": "restock", "Release": "release", "Reverse": "reverse", "FinishAnswered": "finish"}
	var seq []string
	add := func(name string) {
		if n, ok := names[name]; ok && (len(seq) == 0 || seq[len(seq)-1] != n) {
			seq = append(seq, n)
		}
	}
	s.env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		add(info.ActivityType.Name)
	})
	s.env.SetOnLocalActivityStartedListener(func(info *activity.Info, _ context.Context, _ []any) {
		add(info.ActivityType.Name)
	})
	return &seq
}

// TestOrder_CompensatedAfterConfirm_RestockThenMoney: an order that fails after its stock was
// confirmed is ended by its row's transition first, then puts the confirmed units back (and
// releases anything still held) before the money goes back; the shopper's answer, given before the
// confirm, is not given again.
func TestOrder_CompensatedAfterConfirm_RestockThenMoney(t *testing.T) {
	cases := []struct {
		name  string
		setup func(s *saga)
		want  []string
	}{
		{"capture refused, support refunds", func(s *saga) {
			s.on("CaptureFinish").Return(activities.CaptureFinished{},
				temporal.NewNonRetryableApplicationError("intent cannot be captured", string(problem.PaymentRefused), nil))
			s.support(time.Hour, "refund", nil)
			// The answer is recorded as the order first waits: parked.
		}, []string{"confirm", "capture", "answer", "finish", "restock", "release", "reverse"}},
		{"the order ended meanwhile", (*saga).endedMeanwhile,
			// The answer rode in the capture's transaction.
			[]string{"confirm", "capture", "finish", "restock", "release", "reverse"}},
		{"confirm committed but answered an error, support cancels", func(s *saga) {
			s.on("Confirm").Return(inventory.ConfirmResult{}, errors.New("connection reset after commit"))
			s.support(10*time.Minute, "cancel", nil)
			// The answer is recorded as the order first waits: the confirm's retries on the server.
		}, []string{"confirm", "answer", "confirm", "finish", "restock", "release", "reverse"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newSaga(t)
			s.authorizeReturns("AUTHORIZED")
			tc.setup(s)
			seq := s.steps()
			st := s.run(input("tok_ok"))

			assert.Equal(t, tc.want, *seq, "the row decides, then stock back, then the money; the answer recorded once, "+
				"with the order's end or as it first waits")
			assert.NotEqual(t, order.StatusConfirmed, st.Status)
		})
	}
}

// TestOrder_ResetRunOfAConfirmedOrderTakesAFailingPath_NothingGivenBack: support reset a confirmed
// order's workflow to before its confirm, and the new run's confirm finds the reservations no
// longer ACTIVE (they were confirmed by the first run). The run takes the failing path, but the
// order's row, whose conditional transition decides first, says CONFIRMED: the sold units stay
// sold and the captured money stays captured.
func TestOrder_ResetRunOfAConfirmedOrderTakesAFailingPath_NothingGivenBack(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("AUTHORIZED")
	s.on("Confirm").Return(inventory.ConfirmResult{},
		temporal.NewNonRetryableApplicationError("not active", string(problem.ReservationNotActive), nil))
	s.on("FinishAnswered").Return(func(ctx context.Context, in activities.FinishInput) (activities.Finished, error) {
		return activities.Finished{Changed: false, Status: order.StatusConfirmed}, nil
	})
	st := s.run(input("tok_ok"))

	assert.Equal(t, order.StatusConfirmed, st.Status, "the row's status, not the failing path's")
	assert.Empty(t, st.FailureCode)
	assert.Zero(t, s.calls["Restock"], "a sold order's units stay sold")
	assert.Zero(t, s.calls["Release"])
	assert.Zero(t, s.calls["Reverse"], "a sold order's money stays captured")
}

// TestOrder_ParkedPastItsDeadlines_EscalatedThenGivenUpBeforeTheAuthorizationExpires: nobody acts
// on a parked order (the provider refuses its capture for good). A day after it was parked it is
// escalated (support sees it, the alert fires); six days after, before the provider lets its
// authorization expire, the saga gives it up: FAILED with a code of its own, the confirmed units
// back on the shelf, the authorization voided.
func TestOrder_ParkedPastItsDeadlines_EscalatedThenGivenUpBeforeTheAuthorizationExpires(t *testing.T) {
	s := newSaga(t)
	start := s.env.Now()
	s.authorizeReturns("AUTHORIZED")
	s.on("CaptureFinish").Return(activities.CaptureFinished{},
		temporal.NewNonRetryableApplicationError("intent cannot be captured", string(problem.PaymentRefused), nil))
	var escalated []activities.EscalateInput
	var escalatedAt time.Duration
	s.on("Escalate").Return(func(ctx context.Context, in activities.EscalateInput) error {
		escalated = append(escalated, in)
		escalatedAt = s.env.Now().Sub(start)
		return nil
	})
	var ended time.Duration
	s.on("FinishAnswered").Return(func(ctx context.Context, in activities.FinishInput) (activities.Finished, error) {
		ended = s.env.Now().Sub(start)
		return activities.Finished{Changed: true, Status: order.Status(in.To), FailureCode: problem.Code(in.Code)}, nil
	})
	var before, after workflows.OrderState
	s.at(23*time.Hour, func() { before = s.query() })
	s.at(25*time.Hour, func() { after = s.query() })
	s.support(8*24*time.Hour, workflows.ActionRefund, nil) // support, far too late
	st := s.run(input("tok_ok"))

	require.NotNil(t, before.Attention)
	assert.Nil(t, before.Attention.EscalatedAt, "not before its day")
	require.NotNil(t, after.Attention)
	require.NotNil(t, after.Attention.EscalatedAt, "escalated after a day")
	require.NotNil(t, after.Attention.GivesUpAt)
	require.Len(t, escalated, 1)
	assert.InDelta(t, (24 * time.Hour).Seconds(), escalatedAt.Seconds(), 60)
	assert.WithinDuration(t, after.Attention.Since.Add(6*24*time.Hour), *escalated[0].GivesUpAt, time.Minute)

	assert.Equal(t, order.StatusFailed, st.Status)
	assert.Equal(t, problem.AttentionExpired, st.FailureCode)
	assert.InDelta(t, (6 * 24 * time.Hour).Seconds(), ended.Seconds(), 60, "given up at its deadline")
	assert.Less(t, ended, 7*24*time.Hour, "before the provider lets the authorization expire")
	assert.Equal(t, 1, s.calls["Restock"], "the confirmed units go back")
	assert.GreaterOrEqual(t, s.calls["Reverse"], 1, "the authorization is voided")
	assert.Equal(t, payment.StatusVoided, st.PaymentStatus)
}

// TestOrder_ParkedDeadlinesAreTheWorkersSettings: the deadlines come with the order's settings
// from the worker that placed it (CreateOrder's result), as its hold does.
func TestOrder_ParkedDeadlinesAreTheWorkersSettings(t *testing.T) {
	s := newSaga(t)
	start := s.env.Now()
	s.on("CreateOrder").Return(activities.CreatedOrder{OrderID: orderID, Saga: &activities.SagaOptions{HoldTTL: hold,
		StepRetryWindow: time.Minute, Provider: "paysim", ParkedEscalateAfter: time.Hour, ParkedGiveUpAfter: 3 * time.Hour}}, nil)
	s.authorizeReturns("AUTHORIZED")
	s.captureDownFor(10 * 24 * time.Hour)
	var ended time.Duration
	s.on("FinishAnswered").Return(func(ctx context.Context, in activities.FinishInput) (activities.Finished, error) {
		ended = s.env.Now().Sub(start)
		return activities.Finished{Changed: true, Status: order.Status(in.To), FailureCode: problem.Code(in.Code)}, nil
	})
	st := s.run(input("tok_ok"))

	assert.Equal(t, problem.AttentionExpired, st.FailureCode)
	assert.Equal(t, 1, s.calls["Escalate"])
	assert.InDelta(t, (3*time.Hour + time.Minute).Seconds(), ended.Seconds(), 120, "parked after its minute of retries, given up three hours later")
}

// TestOrder_SupportCancelWhileWaiting_CancelledBySupport_ThePersonRecorded: support cancels an
// order waiting for 3-D Secure: the order ends CANCELLED with CANCELLED_BY_SUPPORT (never as its
// shopper's cancel), and the action is recorded once with the person who sent it, on the order's
// timeline and in staff_actions.
func TestOrder_SupportCancelWhileWaiting_CancelledBySupport_ThePersonRecorded(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("REQUIRES_ACTION")
	var acted []activities.StaffActionInput
	s.on("StaffAction").Return(func(ctx context.Context, in activities.StaffActionInput) error {
		acted = append(acted, in)
		return nil
	})
	var rejected error
	s.support(time.Minute, workflows.ActionCancel, &rejected)
	st := s.run(input("tok_3ds"))

	require.NoError(t, rejected)
	assert.Equal(t, order.StatusCancelled, st.Status)
	assert.Equal(t, problem.CancelledBySupport, st.FailureCode)
	require.Len(t, acted, 1)
	assert.Equal(t, staffMember, acted[0].Actor)
	assert.Equal(t, workflows.ActionCancel, acted[0].Action)
	assert.Equal(t, "from the test", acted[0].Reason)
	assert.Equal(t, orderID, acted[0].OrderID)
	var entry *workflows.TimelineEntry
	for i, e := range st.Timeline {
		if e.Event == "support cancel" {
			entry = &st.Timeline[i]
		}
	}
	require.NotNil(t, entry, "the timeline names the action")
	require.NotNil(t, entry.Actor)
	assert.Equal(t, staffMember, *entry.Actor, "who, through what and from where")
	assert.Equal(t, "from the test", entry.Detail, "why")
	assert.False(t, entry.At.IsZero(), "when")
}

// TestOrder_SupportActionWithoutActor_RefusedOrIgnored_NothingChanges: a support action that names
// nobody (not sent through a trusted client) is refused as an update and noted and ignored as a
// signal; the order goes on as if it had not come.
func TestOrder_SupportActionWithoutActor_RefusedOrIgnored_NothingChanges(t *testing.T) {
	s := newSaga(t)
	s.authorizeReturns("REQUIRES_ACTION")
	var rejected error
	s.at(time.Minute, func() {
		s.env.UpdateWorkflow(workflows.SupportAction, "anonymous", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(err error) { rejected = err }, OnComplete: func(any, error) {}},
			workflows.SupportRequest{Action: workflows.ActionCancel, Reason: "who am I"})
	})
	s.signal(2*time.Minute, workflows.SupportAction, workflows.SupportRequest{Action: workflows.ActionCancel, Reason: "nobody"})
	s.signal(2*time.Minute, workflows.SupportAction, workflows.SupportRequest{Action: workflows.ActionCancel, Reason: "a shopper",
		Actor: &staff.Actor{Sub: "7", Role: "shopper", Via: staff.ViaTemporalUI}})
	s.signal(3*time.Minute, workflows.SignalPaymentResult, workflows.PaymentSignal{EventID: "evt_1", IntentID: "pi_1", Status: "AUTHORIZED"})
	st := s.run(input("tok_3ds"))

	requireAppError(t, rejected, string(problem.InvalidSupportAction))
	assert.Contains(t, rejected.Error(), "no actor")
	assert.Equal(t, order.StatusConfirmed, st.Status, "no cancel was obeyed")
	assert.Zero(t, s.calls["StaffAction"], "nothing recorded as a staff action")
	ignored := 0
	for _, e := range st.Timeline {
		if e.Event == "support action ignored" {
			ignored++
		}
	}
	assert.Equal(t, 2, ignored, "each signal noted")
}
