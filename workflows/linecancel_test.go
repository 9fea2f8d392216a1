package workflows_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/internal/staff"
	"github.com/marketplace/checkout/inventory"
	"github.com/marketplace/checkout/workflows"
)

// lineCancelRun is one LineCancelWorkflow under the SDK's test suite, its activities mocked and
// the order of their calls kept.
type lineCancelRun struct {
	t      *testing.T
	env    *testsuite.TestWorkflowEnvironment
	steps  []string
	mocked map[string]bool
}

func newLineCancelRun(t *testing.T) *lineCancelRun {
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(workflows.LineCancelWorkflow, workflow.RegisterOptions{Name: workflows.LineCancelWorkflowName})
	env.RegisterActivity(&activities.Orders{})
	env.RegisterActivity(&activities.Payments{})
	env.RegisterActivity(&activities.Inventory{})
	return &lineCancelRun{t: t, env: env, mocked: map[string]bool{}}
}

// on mocks a step and records each call in order.
func (r *lineCancelRun) on(name string) *testsuite.MockCallWrapper {
	r.mocked[name] = true
	return r.env.OnActivity(name, mock.Anything, mock.Anything).Run(func(mock.Arguments) { r.steps = append(r.steps, name) })
}

func recorded(reason string) activities.LineCancel {
	return activities.LineCancel{ID: 9, AmountMinor: 19990, Currency: "TRY", Restock: inventory.ReturnsToShelf(reason),
		Allocations: []inventory.UnitsAt{{WarehouseID: 1, Units: 1}}, LineQuantity: 2, LineCancelled: 1}
}

func (r *lineCancelRun) defaults(reason string) {
	def := func(name string, ret ...any) {
		if !r.mocked[name] {
			r.on(name).Return(ret...).Maybe()
		}
	}
	def("RecordLineCancel", recorded(reason), nil)
	def("RefundLineCancel", activities.PaymentResult{Status: "CAPTURED"}, nil)
	def("RestockLineCancel", int32(1), nil)
	def("AnnounceLineCancel", activities.LineCancel{ID: 9, Refunded: true, Announced: true, LineQuantity: 2, LineCancelled: 1}, nil)
	def("LineCancelAttention", nil)
	def("StaffAction", nil)
}

func (r *lineCancelRun) run(in any) (workflows.LineCancelState, error) {
	r.env.ExecuteWorkflow(workflows.LineCancelWorkflowName, in)
	require.True(r.t, r.env.IsWorkflowCompleted())
	var st workflows.LineCancelState
	err := r.env.GetWorkflowError()
	if err == nil {
		require.NoError(r.t, r.env.GetWorkflowResult(&st))
	}
	return st, err
}

func (r *lineCancelRun) query() workflows.LineCancelState {
	v, err := r.env.QueryWorkflow(workflows.QueryStatus)
	require.NoError(r.t, err)
	var st workflows.LineCancelState
	require.NoError(r.t, v.Get(&st))
	return st
}

func lineCancelInput(reason string) workflows.LineCancelInput {
	return workflows.LineCancelInput{OrderID: 501, SKUID: 77, Units: 1, Reason: reason, RequestID: "req-1", Actor: &staffMember}
}

func TestLineCancel_Damaged_RecordedRefundedAnnounced_NotRestocked(t *testing.T) {
	r := newLineCancelRun(t)
	r.defaults(inventory.CancelDamaged)
	st, err := r.run(lineCancelInput(inventory.CancelDamaged))
	require.NoError(t, err)

	assert.Equal(t, []string{"RecordLineCancel", "RefundLineCancel", "AnnounceLineCancel"}, r.steps,
		"record first (the units leave the order), then the money, then the word; a damaged unit stays off the shelf")
	assert.Equal(t, workflows.LineCancelDone, st.Status)
	assert.Equal(t, int64(19990), st.RefundMinor)
	assert.False(t, st.Restock)
	assert.False(t, st.NeedsAttention)
}

func TestLineCancel_SellerCannotShip_RestockedAfterTheRefund(t *testing.T) {
	r := newLineCancelRun(t)
	r.defaults(inventory.CancelSellerCannotShip)
	st, err := r.run(lineCancelInput(inventory.CancelSellerCannotShip))
	require.NoError(t, err)

	assert.Equal(t, []string{"RecordLineCancel", "RefundLineCancel", "RestockLineCancel", "AnnounceLineCancel"}, r.steps)
	assert.True(t, st.Restock)
	assert.Equal(t, workflows.LineCancelDone, st.Status)
}

func TestLineCancel_ProviderDown_RefundRetriedUntilDone_NoAttention(t *testing.T) {
	r := newLineCancelRun(t)
	calls := 0
	r.on("RefundLineCancel").Return(func(ctx context.Context, id int64) (activities.PaymentResult, error) {
		if calls++; calls < 4 {
			return activities.PaymentResult{}, temporal.NewApplicationError("provider unavailable", string(problem.PaymentProviderUnavailable))
		}
		return activities.PaymentResult{Status: "CAPTURED"}, nil
	})
	r.defaults(inventory.CancelLost)
	st, err := r.run(lineCancelInput(inventory.CancelLost))
	require.NoError(t, err)

	assert.Equal(t, 4, calls)
	assert.Equal(t, workflows.LineCancelDone, st.Status)
	assert.NotContains(t, r.steps, "LineCancelAttention", "an outage is waited out, not handed to support")
}

func TestLineCancel_RefundRefused_NeedsAttentionUntilSupportRetries(t *testing.T) {
	r := newLineCancelRun(t)
	refused := true
	r.on("RefundLineCancel").Return(func(ctx context.Context, id int64) (activities.PaymentResult, error) {
		if refused {
			return activities.PaymentResult{}, temporal.NewNonRetryableApplicationError("intent is VOIDED",
				string(problem.PaymentRefused), nil)
		}
		return activities.PaymentResult{Status: "CAPTURED"}, nil
	})
	var attention []activities.LineCancelAttentionInput
	r.on("LineCancelAttention").Return(func(ctx context.Context, in activities.LineCancelAttentionInput) error {
		attention = append(attention, in)
		return nil
	})
	r.defaults(inventory.CancelDamaged)
	var parked workflows.LineCancelState
	var early, retried error
	support := func(id string, into *error) {
		r.env.UpdateWorkflow(workflows.SupportAction, id, &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(err error) { *into = err }, OnComplete: func(any, error) {}},
			workflows.SupportRequest{Action: workflows.ActionRetry, Reason: "refund fixed at the provider", Actor: &staffMember})
	}
	r.env.RegisterDelayedCallback(func() {
		parked = r.query()
		refused = false
		support("retry-1", &retried)
	}, 48*time.Hour)
	r.env.RegisterDelayedCallback(func() { support("cancel-early", &early) }, 0)
	st, err := r.run(lineCancelInput(inventory.CancelDamaged))
	require.NoError(t, err)

	assert.True(t, parked.NeedsAttention, "a refusal waits for support, visible in the UI")
	require.NotNil(t, parked.Attention)
	assert.Equal(t, "refund", parked.Attention.Step)
	assert.Equal(t, string(problem.PaymentRefused), parked.Attention.Code)
	assert.Equal(t, workflows.LineCancelRecorded, parked.Status)
	require.NoError(t, retried)
	assert.Equal(t, []string{"RecordLineCancel", "RefundLineCancel", "LineCancelAttention", "StaffAction", "RefundLineCancel",
		"LineCancelAttention", "AnnounceLineCancel"}, r.steps, "refused once, not retried by itself, then support's retry, recorded with its person")
	require.Len(t, attention, 2)
	assert.Equal(t, "refund", attention[0].Step)
	assert.Empty(t, attention[1].Step, "cleared once the refund went through")
	assert.Equal(t, workflows.LineCancelDone, st.Status)
	assert.False(t, st.NeedsAttention)
}

func TestLineCancel_SupportActionWhileNothingWaits_Refused(t *testing.T) {
	r := newLineCancelRun(t)
	r.on("RefundLineCancel").After(time.Minute).Return(activities.PaymentResult{Status: "CAPTURED"}, nil)
	r.defaults(inventory.CancelDamaged)
	var rejected error
	for i, action := range []string{workflows.ActionRetry, workflows.ActionCancel} {
		r.env.RegisterDelayedCallback(func() {
			r.env.UpdateWorkflow(workflows.SupportAction, action, &testsuite.TestUpdateCallback{
				OnAccept: func() {}, OnReject: func(err error) {
					if i == 0 {
						rejected = err
					}
				}, OnComplete: func(any, error) {}},
				workflows.SupportRequest{Action: action, Reason: "test", Actor: &staffMember})
		}, time.Second)
	}
	st, err := r.run(lineCancelInput(inventory.CancelDamaged))
	require.NoError(t, err)
	requireAppError(t, rejected, string(problem.InvalidSupportAction))
	assert.Equal(t, workflows.LineCancelDone, st.Status)
}

func TestLineCancel_RecordRefused_FailsWithTheRefusal_NothingElseRuns(t *testing.T) {
	r := newLineCancelRun(t)
	r.on("RecordLineCancel").Return(activities.LineCancel{}, activities.RefusalError(problem.New(
		problem.UnitsExceedLine, "3 units asked, 1 left on the line").WithDetails(activities.UnitsExceedLineDetails{Remaining: 1})))
	r.defaults(inventory.CancelDamaged)
	_, err := r.run(lineCancelInput(inventory.CancelDamaged))

	requireAppError(t, err, string(problem.UnitsExceedLine))
	assert.Equal(t, []string{"RecordLineCancel"}, r.steps)
}

func TestLineCancel_Repeat_AlreadyRefundedAndRestocked_OnlyAnnounced(t *testing.T) {
	r := newLineCancelRun(t)
	done := recorded(inventory.CancelSellerCannotShip)
	done.Repeat, done.Refunded, done.Restocked, done.Announced = true, true, true, true
	r.on("RecordLineCancel").Return(done, nil)
	r.defaults(inventory.CancelSellerCannotShip)
	st, err := r.run(lineCancelInput(inventory.CancelSellerCannotShip))
	require.NoError(t, err)

	assert.Equal(t, []string{"RecordLineCancel", "AnnounceLineCancel"}, r.steps, "nothing refunded or restocked twice")
	assert.Equal(t, workflows.LineCancelDone, st.Status)
}

// TestLineCancel_BadInputFromTheUI_FailsClearly_NothingRuns: what support may paste wrong in the
// UI's start form ends the workflow with VALIDATION_FAILED before any step.
func TestLineCancel_BadInputFromTheUI_FailsClearly_NothingRuns(t *testing.T) {
	actor := `"actor": {"sub": "900", "role": "support", "name": "Deniz Destek", "via": "temporal-ui", "ip": "10.0.0.5"}`
	cases := map[string]string{
		"units zero":       `{"orderId": 501, "skuId": 77, "units": 0, "reason": "damaged", "requestId": "r1", ` + actor + `}`,
		"unknown reason":   `{"orderId": 501, "skuId": 77, "units": 1, "reason": "broken", "requestId": "r1", ` + actor + `}`,
		"misspelled field": `{"orderId": 501, "skuId": 77, "unit": 1, "reason": "damaged", "requestId": "r1", ` + actor + `}`,
		"no request id":    `{"orderId": 501, "skuId": 77, "units": 1, "reason": "damaged", ` + actor + `}`,
		"units as text":    `{"orderId": 501, "skuId": 77, "units": "1", "reason": "damaged", "requestId": "r1", ` + actor + `}`,
		"no order":         `{"skuId": 77, "units": 1, "reason": "lost", "requestId": "r1", ` + actor + `}`,
		"no actor":         `{"orderId": 501, "skuId": 77, "units": 1, "reason": "damaged", "requestId": "r1"}`,
		"a name typed in, no actor": `{"orderId": 501, "skuId": 77, "units": 1, "reason": "damaged", "requestId": "r1", ` +
			`"requestedBy": "ops user 1"}`,
		"an actor of no staff role": `{"orderId": 501, "skuId": 77, "units": 1, "reason": "damaged", "requestId": "r1", ` +
			`"actor": {"sub": "7", "role": "shopper", "via": "temporal-ui"}}`,
	}
	for name, input := range cases {
		t.Run(name, func(t *testing.T) {
			r := newLineCancelRun(t)
			r.defaults(inventory.CancelDamaged)
			_, err := r.run(json.RawMessage(input))
			requireAppError(t, err, string(problem.ValidationFailed))
			assert.Empty(t, r.steps)
		})
	}
}

// TestLineCancel_RecordsTheActorNeverATypedName: the person who asks is the input's actor (which
// only a trusted client fills in); a name typed into requestedBy is not who asked. The request and
// support's retry are recorded with the person, each once in its run.
func TestLineCancel_RecordsTheActorNeverATypedName(t *testing.T) {
	r := newLineCancelRun(t)
	var asked activities.LineCancelRequest
	r.on("RecordLineCancel").Return(func(ctx context.Context, in activities.LineCancelRequest) (activities.LineCancel, error) {
		asked = in
		return recorded(inventory.CancelDamaged), nil
	})
	refused := true
	r.on("RefundLineCancel").Return(func(ctx context.Context, id int64) (activities.PaymentResult, error) {
		if refused {
			return activities.PaymentResult{}, temporal.NewNonRetryableApplicationError("intent is VOIDED",
				string(problem.PaymentRefused), nil)
		}
		return activities.PaymentResult{Status: "CAPTURED"}, nil
	})
	var acted []activities.StaffActionInput
	r.on("StaffAction").Return(func(ctx context.Context, in activities.StaffActionInput) error {
		acted = append(acted, in)
		return nil
	})
	r.defaults(inventory.CancelDamaged)
	ops := staff.Actor{Sub: "950", Role: "ops", Name: "Ops Person", Via: staff.ViaTemporalUI, IP: "10.0.0.6"}
	r.env.RegisterDelayedCallback(func() {
		refused = false
		r.env.UpdateWorkflow(workflows.SupportAction, "retry-1", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(err error) { t.Errorf("retry refused: %v", err) }, OnComplete: func(any, error) {}},
			workflows.SupportRequest{Action: workflows.ActionRetry, Reason: "refund fixed", Actor: &ops})
	}, time.Hour)
	in := lineCancelInput(inventory.CancelDamaged)
	in.RequestedBy = "the CEO"
	st, err := r.run(in)
	require.NoError(t, err)

	require.NotNil(t, asked.Actor)
	assert.Equal(t, staffMember, *asked.Actor)
	assert.Equal(t, staffMember.String(), asked.RequestedBy, "who asked is the actor, not the typed name")
	require.Len(t, acted, 1)
	assert.Equal(t, ops, acted[0].Actor)
	assert.Equal(t, workflows.ActionRetry, acted[0].Action)
	assert.Equal(t, "refund", acted[0].Step)
	assert.Equal(t, int64(9), acted[0].LineCancellationID)
	assert.Equal(t, 1, acted[0].Seq, "the request is the run's first staff action, the retry its second")
	var byPerson []string
	for _, e := range st.Timeline {
		if e.Actor != nil {
			byPerson = append(byPerson, e.Event+" by "+e.Actor.Sub)
		}
	}
	assert.Equal(t, []string{"recorded by 900", "support retry by 950"}, byPerson)
}

// TestLineCancel_SupportActionWithoutActor_Refused: a retry that names nobody is refused as an
// update and noted, not obeyed, as a signal; the cancellation keeps waiting for a named one.
func TestLineCancel_SupportActionWithoutActor_Refused(t *testing.T) {
	r := newLineCancelRun(t)
	refused := true
	r.on("RefundLineCancel").Return(func(ctx context.Context, id int64) (activities.PaymentResult, error) {
		if refused {
			return activities.PaymentResult{}, temporal.NewNonRetryableApplicationError("intent is VOIDED",
				string(problem.PaymentRefused), nil)
		}
		return activities.PaymentResult{Status: "CAPTURED"}, nil
	})
	r.defaults(inventory.CancelDamaged)
	var rejected error
	r.env.RegisterDelayedCallback(func() {
		refused = false
		r.env.UpdateWorkflow(workflows.SupportAction, "anonymous", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(err error) { rejected = err }, OnComplete: func(any, error) {}},
			workflows.SupportRequest{Action: workflows.ActionRetry, Reason: "who am I"})
		r.env.SignalWorkflow(workflows.SupportAction, workflows.SupportRequest{Action: workflows.ActionRetry, Reason: "nobody"})
	}, time.Hour)
	var waiting workflows.LineCancelState
	r.env.RegisterDelayedCallback(func() { waiting = r.query() }, 2*time.Hour)
	r.env.RegisterDelayedCallback(func() {
		r.env.SignalWorkflow(workflows.SupportAction, workflows.SupportRequest{Action: workflows.ActionRetry, Reason: "named",
			Actor: &staffMember})
	}, 3*time.Hour)
	st, err := r.run(lineCancelInput(inventory.CancelDamaged))
	require.NoError(t, err)

	requireAppError(t, rejected, string(problem.InvalidSupportAction))
	assert.Contains(t, rejected.Error(), "no actor")
	assert.True(t, waiting.NeedsAttention, "still waiting: neither was obeyed")
	assert.Equal(t, workflows.LineCancelDone, st.Status, "the named retry was")
	ignored := 0
	for _, e := range st.Timeline {
		if e.Event == "support action ignored" {
			ignored++
		}
	}
	assert.Equal(t, 1, ignored, "the signal is noted")
}
