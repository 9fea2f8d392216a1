package workflows_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/order"
	"github.com/marketplace/checkout/payment"
	"github.com/marketplace/checkout/workflows"
)

// confirmFails: the order is paid at once, and its confirm fails with err.
func confirmFails(s *saga, err error) {
	s.authorizeReturns("AUTHORIZED")
	s.on("Confirm").Return(inventory.ConfirmResult{}, err)
}

// stockReleased: the order failed at once for its stock, never captured nor parked.
func stockReleased(t *testing.T, p pathTaken) {
	assert.Equal(t, string(order.StatusFailed), p.Status)
	assert.Equal(t, string(problem.StockReleased), p.FailureCode)
	assert.Zero(t, p.Calls["CaptureFinish"]+p.Calls["Park"], "the order fails at once, never captured")
}

// eventVerifyFails: a payment event comes while the order waits for 3-D Secure, and asking the
// provider about it fails with err.
func eventVerifyFails(s *saga, err error) {
	s.authorizeReturns("REQUIRES_ACTION")
	s.signal(time.Minute, workflows.SignalPaymentResult,
		workflows.PaymentSignal{EventID: "evt_1", IntentID: "pi_1", Status: "AUTHORIZED"})
	s.on("VerifyEvent").Return(activities.PaymentResult{}, err)
}

// eventNotActedOn: the saga asked the provider about the event so many times, and did not act on
// it (the hold expired).
func eventNotActedOn(asked int, why string) func(t *testing.T, p pathTaken) {
	return func(t *testing.T, p pathTaken) {
		assert.Equal(t, asked, p.Calls["VerifyEvent"], why)
		assert.Equal(t, string(problem.HoldExpired), p.FailureCode, "the event was not acted on")
	}
}

// pathTaken is what a run did: its answer, where the order ended, what support saw while it was
// parked, its timeline and the steps it called.
type pathTaken struct {
	Placed, Payment     string
	Status, FailureCode string
	PaymentStatus       string
	Parked              *workflows.Attention
	Events              []string
	Calls               map[string]int
	Final               map[order.Status]int
}

// TestSaga_StepFailingUnderItsCodeOrItsEarlierName_TakesTheSamePath: a step's failure raised
// under its code (as the steps raise it now) and under the name saga-5 and earlier builds raised it
// under (as their histories hold it, should a run of theirs move to this build) send the saga down
// the same path — each branch on a failure and each retry policy knows both names.
func TestSaga_StepFailingUnderItsCodeOrItsEarlierName_TakesTheSamePath(t *testing.T) {
	failing := func(retryable bool) func(typ string) error {
		return func(typ string) error {
			if retryable {
				return temporal.NewApplicationError("the step failed", typ)
			}
			return temporal.NewNonRetryableApplicationError("the step failed", typ, nil)
		}
	}
	cases := []struct {
		name string
		code problem.Code
		// fails sets the scenario up, failing one step with err.
		fails func(s *saga, err error)
		// want is the path, whichever name the failure came under.
		want  func(t *testing.T, p pathTaken)
		raise func(typ string) error
	}{
		{"the confirm finds the reservation released", problem.ReservationNotActive, confirmFails, stockReleased,
			failing(false)},
		{"the confirm finds no reservation", problem.NoReservation, confirmFails, stockReleased, failing(false)},
		{"the authorization times out", problem.PaymentOutcomeUnknown,
			func(s *saga, err error) {
				s.on("AuthorizeForCapture").Return(activities.PaymentResult{Status: payment.StatusUnknown}, err).Once()
				s.on("ResolvePayment").Return(activities.PaymentResult{Status: "AUTHORIZED", IntentID: "pi_1"}, nil)
			},
			func(t *testing.T, p pathTaken) {
				assert.Equal(t, "AUTHORIZED", p.Payment, "decided by asking the provider")
				assert.Equal(t, string(order.StatusConfirmed), p.Status)
				assert.Equal(t, 1, p.Calls["AuthorizeForCapture"])
				assert.Equal(t, 1, p.Calls["ResolvePayment"])
			}, failing(false)},
		{"the provider is down for two tries of the capture", problem.PaymentProviderUnavailable,
			func(s *saga, err error) {
				s.authorizeReturns("AUTHORIZED")
				s.captureFails(err, 2)
			},
			func(t *testing.T, p pathTaken) {
				assert.Equal(t, string(order.StatusConfirmed), p.Status)
				assert.Equal(t, 3, p.Calls["CaptureFinish"])
				assert.Zero(t, p.Calls["Park"])
			}, failing(true)},
		{"the provider refuses the capture", problem.PaymentRefused,
			func(s *saga, err error) {
				s.authorizeReturns("AUTHORIZED")
				s.captureFails(err, 0)
				s.at(6*time.Hour, func() {
					st := s.query()
					s.parked = st.Attention
				})
				s.support(6*time.Hour+time.Minute, workflows.ActionRefund, nil)
			},
			func(t *testing.T, p pathTaken) {
				require.NotNil(t, p.Parked, "parked for support")
				assert.Equal(t, "capture", p.Parked.Step)
				assert.Equal(t, string(problem.PaymentRefused), p.Parked.Code, "support reads the code")
				assert.Equal(t, 1, p.Calls["CaptureFinish"], "no retry changes a refusal")
				assert.Equal(t, 1, p.Calls["Park"])
				assert.Equal(t, string(order.StatusCancelled), p.Status)
			}, failing(false)},
		{"the provider does not back a payment event", problem.PaymentEventRefused, eventVerifyFails,
			eventNotActedOn(1, "refused at once, not asked again"), failing(false)},
		// The server decides retries by the policy's NonRetryableErrorTypes: a provider's refusal
		// raised retryable is still not asked again, under either name.
		{"the provider refuses to be asked about a payment event", problem.PaymentRefused, eventVerifyFails,
			eventNotActedOn(3+1, "its quick tries, then one on the server"), failing(true)},
	}
	for _, c := range cases {
		names := activities.TypesOf(c.code)
		require.Len(t, names, 2, "%s: its code and the name an earlier release raised it under", c.code)
		t.Run(c.name, func(t *testing.T) {
			var paths []pathTaken
			for _, typ := range names {
				s := newSaga(t)
				c.fails(s, c.raise(typ))
				st := s.run(input("tok_ok"))
				require.NotNil(t, s.placed, typ)
				p := pathTaken{Placed: string(s.placed.Outcome), Status: string(st.Status), FailureCode: string(st.FailureCode),
					PaymentStatus: string(st.PaymentStatus), Parked: s.parked, Calls: s.calls, Final: s.final}
				if s.placed.Payment != nil {
					p.Payment = string(s.placed.Payment.Status)
				}
				if p.Parked != nil {
					p.Parked.Since = time.Time{}
				}
				for _, e := range st.Timeline {
					p.Events = append(p.Events, e.Event)
				}
				c.want(t, p)
				paths = append(paths, p)
			}
			assert.Equal(t, paths[0], paths[1], "%s and %s take different paths", names[0], names[1])
		})
	}
}
