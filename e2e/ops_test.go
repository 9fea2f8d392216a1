package e2e_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/marketplace/checkout/activities"
	"github.com/marketplace/checkout/cart"
	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/order"
	"github.com/marketplace/checkout/worker"
	"github.com/marketplace/checkout/workflows"
)

// Schedule ids are global in a namespace and the tests share one Temporal server, so each test
// keeps its schedules under a prefix of its own and deletes them when it ends.
func (s *stack) schedulePrefix() string {
	prefix := "e2e-" + randomHex(6) + "-"
	s.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, id := range s.listSchedules(ctx, prefix) {
			_ = s.temporal.ScheduleClient().GetHandle(ctx, id).Delete(ctx)
		}
	})
	return prefix
}

// ensureSchedules creates this test's schedules on its worker's task queue and pauses them, as ops
// would in the UI, so that only the test's triggers run them.
func (s *stack) ensureSchedules() config.Config {
	s.t.Helper()
	cfg := s.cfg
	cfg.ScheduleIDPrefix = s.schedulePrefix()
	require.NoError(s.t, worker.EnsureSchedules(s.ctx, s.temporal, cfg))
	for _, id := range worker.ScheduleIDs(cfg) {
		require.NoError(s.t, s.temporal.ScheduleClient().GetHandle(s.ctx, id).Pause(s.ctx,
			client.SchedulePauseOptions{Note: "paused by the test"}))
	}
	return cfg
}

// listSchedules lists the ids of the namespace's schedules under prefix, duplicates included.
func (s *stack) listSchedules(ctx context.Context, prefix string) []string {
	it, err := s.temporal.ScheduleClient().List(ctx, client.ScheduleListOptions{})
	require.NoError(s.t, err)
	var ids []string
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(s.t, err)
		if strings.HasPrefix(e.ID, prefix) {
			ids = append(ids, e.ID)
		}
	}
	slices.Sort(ids)
	return ids
}

// runSchedule presses "Trigger" on the schedule, as ops would in the UI, and waits for the run it
// started to end; result receives the run's result.
func (s *stack) runSchedule(id string, result any) {
	s.t.Helper()
	h := s.temporal.ScheduleClient().GetHandle(s.ctx, id)
	d, err := h.Describe(s.ctx)
	require.NoError(s.t, err)
	before := d.Info.NumActions
	require.NoError(s.t, h.Trigger(s.ctx, client.ScheduleTriggerOptions{}))
	deadline := time.Now().Add(30 * time.Second)
	for d.Info.NumActions == before || len(d.Info.RecentActions) == 0 {
		require.True(s.t, time.Now().Before(deadline), "schedule %s took no action after the trigger", id)
		time.Sleep(100 * time.Millisecond)
		d, err = h.Describe(s.ctx)
		require.NoError(s.t, err)
	}
	run := d.Info.RecentActions[len(d.Info.RecentActions)-1].StartWorkflowResult
	require.NotNil(s.t, run)
	require.True(s.t, strings.HasPrefix(run.WorkflowID, id), "the run's workflow id %s is readable", run.WorkflowID)
	ctx, cancel := context.WithTimeout(s.ctx, 2*time.Minute)
	defer cancel()
	require.NoError(s.t, s.temporal.GetWorkflow(ctx, run.WorkflowID, run.FirstExecutionRunID).Get(ctx, result))
}

// terminate terminates a workflow by hand, as from the UI. A child the order has just asked for
// may not have started yet: then it waits for it.
func (s *stack) terminate(workflowID, reason string) {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := s.temporal.TerminateWorkflow(s.ctx, workflowID, "", reason)
		var nf *serviceerror.NotFound
		if !errors.As(err, &nf) || time.Now().After(deadline) {
			require.NoError(s.t, err)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// metric reads a counter or gauge of the stack's worker, labels as name, value pairs.
func (s *stack) metric(name string, labels ...string) float64 {
	s.t.Helper()
	families, err := s.deps.Metrics.Registry.Gather()
	require.NoError(s.t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					found = found || (l.GetName() == labels[i] && l.GetValue() == labels[i+1])
				}
				if !found {
					continue next
				}
			}
			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return 0
}

func TestSchedules_WorkerStartUp_CreatesEachOnce_SecondStartUpUpdatesInPlace(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	s := startStack(t, stackOptions{noWorker: true})
	prefix := s.schedulePrefix()
	cfg := s.cfg
	cfg.ScheduleIDPrefix = prefix
	ids := worker.ScheduleIDs(cfg)
	slices.Sort(ids)
	env := []string{"SCHEDULES_ENABLED=true", "SCHEDULE_ID_PREFIX=" + prefix}

	// First start-up: the four schedules exist, with the default specs, on the worker's task queue.
	first := s.workerProcess(bin, env...)
	deadline := time.Now().Add(time.Minute)
	for !slices.Equal(s.listSchedules(s.ctx, prefix), ids) {
		require.True(t, time.Now().Before(deadline), "schedules after start-up: %v", s.listSchedules(s.ctx, prefix))
		time.Sleep(200 * time.Millisecond)
	}
	want := map[string]time.Duration{workflows.ScheduleSweeper: time.Minute, workflows.ScheduleReconciler: 15 * time.Minute,
		workflows.ScheduleCartJanitor: 24 * time.Hour, workflows.SchedulePaymentReconciler: 5 * time.Minute}
	types := map[string]string{workflows.ScheduleSweeper: workflows.SweeperWorkflowName,
		workflows.ScheduleReconciler: workflows.ReconcilerWorkflowName, workflows.ScheduleCartJanitor: workflows.CartJanitorWorkflowName,
		workflows.SchedulePaymentReconciler: workflows.PaymentReconcilerWorkflowName}
	for job, every := range want {
		d, err := s.temporal.ScheduleClient().GetHandle(s.ctx, prefix+job).Describe(s.ctx)
		require.NoError(t, err)
		require.Len(t, d.Schedule.Spec.Intervals, 1, job)
		assert.Equal(t, every, d.Schedule.Spec.Intervals[0].Every, job)
		assert.Equal(t, enumspb.SCHEDULE_OVERLAP_POLICY_SKIP, d.Schedule.Policy.Overlap, job)
		action, ok := d.Schedule.Action.(*client.ScheduleWorkflowAction)
		require.True(t, ok, job)
		assert.Equal(t, s.cfg.TaskQueue, action.TaskQueue, job)
		assert.Equal(t, types[job], action.Workflow, job)
	}

	// Ops pause the sweeper in the UI; then the worker restarts with another sweeper period.
	sweeper := s.temporal.ScheduleClient().GetHandle(s.ctx, prefix+workflows.ScheduleSweeper)
	require.NoError(t, sweeper.Pause(s.ctx, client.SchedulePauseOptions{Note: "paused by ops"}))
	require.NoError(t, first.Process.Kill())
	_, _ = first.Process.Wait()
	second := s.workerProcess(bin, append(env, "SWEEPER_EVERY=2m")...)
	defer func() { _ = second.Process.Kill(); _, _ = second.Process.Wait() }()

	var d *client.ScheduleDescription
	deadline = time.Now().Add(time.Minute)
	for {
		var err error
		d, err = sweeper.Describe(s.ctx)
		require.NoError(t, err)
		if len(d.Schedule.Spec.Intervals) == 1 && d.Schedule.Spec.Intervals[0].Every == 2*time.Minute {
			break
		}
		require.True(t, time.Now().Before(deadline), "the second start-up did not update the sweeper's spec")
		time.Sleep(200 * time.Millisecond)
	}
	assert.True(t, d.Schedule.State.Paused, "a restart leaves a paused schedule paused")
	assert.Equal(t, "paused by ops", d.Schedule.State.Note)
	assert.Equal(t, ids, s.listSchedules(s.ctx, prefix), "each schedule exactly once")
}

func TestSweeperSchedule_HoldChildTerminated_TriggeredRunReleasesTheReservation(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{hold: 5 * time.Second})
	cfg := s.ensureSchedules()
	sh := s.shopper(8101)
	sh.fill(map[int64]int32{75: 2})
	key := "k-" + randomHex(8)
	r := sh.order(key, sh.preview(), "tok_3ds")
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	id := r.int("orderId")

	// The hold child is lost (terminated by hand), and support terminates the order too: nothing
	// else will release the stock.
	s.terminate(workflows.HoldWorkflowID(id), "test: hold child lost")
	s.terminate(sh.workflowOf(key), "test: order terminated by support")
	require.Equal(t, int64(2), s.scalar(`SELECT COALESCE(sum(reserved), 0) FROM inventory WHERE sku_id = 75`))
	deadline := time.Now().Add(time.Minute)
	for s.scalar(`SELECT count(*) FROM stock_reservations WHERE order_id = $1 AND status = 'ACTIVE' AND expires_at < now()`, id) == 0 {
		require.True(t, time.Now().Before(deadline), "the hold never expired")
		time.Sleep(200 * time.Millisecond)
	}
	active := s.scalar(`SELECT count(*) FROM stock_reservations WHERE order_id = $1 AND status = 'ACTIVE'`, id)
	require.Positive(t, active, "still held after the expiry: the sweeper's case")

	var res workflows.SweeperResult
	s.runSchedule(cfg.ScheduleIDPrefix+workflows.ScheduleSweeper, &res)

	assert.Equal(t, int(active), res.Released)
	assert.Equal(t, 2, res.Units)
	assert.Contains(t, res.OrderIDs, id)
	assert.Positive(t, res.OldestAgeSeconds)
	assert.Zero(t, s.scalar(`SELECT count(*) FROM stock_reservations WHERE order_id = $1 AND status <> 'RELEASED'`, id))
	assert.Zero(t, s.scalar(`SELECT COALESCE(sum(reserved), 0) FROM inventory WHERE sku_id = 75`), "stock given back")
	assert.Equal(t, float64(active), s.metric("checkout_sweeper_released_total"))
	assert.Equal(t, float64(1), s.metric("checkout_job_runs_total", "job", workflows.ScheduleSweeper, "result", "ok"))

	// Run again: nothing left to release.
	var again workflows.SweeperResult
	s.runSchedule(cfg.ScheduleIDPrefix+workflows.ScheduleSweeper, &again)
	assert.Zero(t, again.Released)
}

func TestReconcilerSchedule_InjectedDrift_RepairedAndRecorded(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	cfg := s.ensureSchedules()
	var sku int64
	var wh int32
	require.NoError(t, s.pool.QueryRow(s.ctx, `SELECT sku_id, warehouse_id FROM inventory
		WHERE on_hand > reserved + 1 ORDER BY sku_id, warehouse_id LIMIT 1`).Scan(&sku, &wh))
	before := s.scalar(`SELECT reserved FROM inventory WHERE sku_id = $1 AND warehouse_id = $2`, sku, wh)
	_, err := s.pool.Exec(s.ctx, `UPDATE inventory SET reserved = reserved + 1 WHERE sku_id = $1 AND warehouse_id = $2`, sku, wh)
	require.NoError(t, err)

	var res workflows.ReconcilerResult
	s.runSchedule(cfg.ScheduleIDPrefix+workflows.ScheduleReconciler, &res)

	assert.Equal(t, 1, res.Repaired)
	assert.Equal(t, 1, res.Units)
	require.Len(t, res.Drifts, 1)
	assert.Equal(t, sku, res.Drifts[0].SKUID)
	assert.Equal(t, wh, res.Drifts[0].WarehouseID)
	assert.Equal(t, before, s.scalar(`SELECT reserved FROM inventory WHERE sku_id = $1 AND warehouse_id = $2`, sku, wh), "repaired")
	assert.Equal(t, int64(1), s.scalar(`SELECT count(*) FROM inventory_drift_events WHERE sku_id = $1 AND warehouse_id = $2
		AND reserved_before = $3 AND active_sum = $4`, sku, wh, before+1, before), "the drift is recorded")
	assert.Equal(t, float64(1), s.metric("checkout_reconciler_drift_total"))
}

func TestCartJanitorSchedule_IdleCart_DeletedWithAbandonedEvent(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	cfg := s.ensureSchedules()
	idle, fresh := s.shopper(8201), s.shopper(8202)
	idle.fill(map[int64]int32{71: 1})
	fresh.fill(map[int64]int32{72: 1})
	_, err := s.pool.Exec(s.ctx, `UPDATE carts SET updated_at = now() - make_interval(secs => $1::float8) WHERE user_id = $2`,
		(cfg.CartIdleTTL + time.Hour).Seconds(), idle.id)
	require.NoError(t, err)

	var res cart.JanitorResult
	s.runSchedule(cfg.ScheduleIDPrefix+workflows.ScheduleCartJanitor, &res)

	assert.Equal(t, cart.JanitorResult{Deleted: 1, Events: 1}, res)
	assert.Zero(t, s.scalar(`SELECT count(*) FROM carts WHERE user_id = $1`, idle.id), "the idle cart is gone")
	assert.Equal(t, int64(1), s.scalar(`SELECT count(*) FROM carts WHERE user_id = $1`, fresh.id), "a recent cart stays")
	assert.Equal(t, int64(1), s.scalar(`SELECT count(*) FROM outbox_events WHERE event_type = $1 AND (payload->>'userId')::bigint = $2`,
		cart.EventCartAbandoned, idle.id))
	assert.Equal(t, float64(1), s.metric("checkout_cart_janitor_deleted_total"))
}

func TestPaymentReconcilerSchedule_LostWebhookUnknownRow_OrderSignalledAndConfirmed(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	cfg := s.ensureSchedules()
	sh := s.shopper(8301)
	sh.fill(map[int64]int32{74: 1})
	r := sh.order("k-"+randomHex(8), sh.preview(), "tok_3ds")
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	id := r.int("orderId")

	// The provider authorized the payment but its webhook never came, and our row says UNKNOWN (a
	// call timed out): the order would wait for its hold to expire and void a good payment.
	_, err := s.pool.Exec(s.ctx, `UPDATE paysim.intents SET status = 'AUTHORIZED' WHERE idempotency_key = $1`,
		order.PaymentKey(id))
	require.NoError(t, err)
	_, err = s.pool.Exec(s.ctx, `UPDATE payments SET status = 'UNKNOWN' WHERE order_id = $1`, id)
	require.NoError(t, err)

	var res activities.ReconcilePaymentsResult
	s.runSchedule(cfg.ScheduleIDPrefix+workflows.SchedulePaymentReconciler, &res)

	assert.Equal(t, 1, res.Checked)
	assert.Equal(t, 1, res.Resolved)
	assert.Equal(t, 1, res.Signalled)
	assert.Equal(t, []activities.StatusCount{{Status: "AUTHORIZED", Count: 1}}, res.ByStatus)
	final := s.waitFinal(sh.token, id, 30*time.Second)
	assert.Equal(t, "CONFIRMED", final.str("status"), final.raw)
	assert.Equal(t, "CAPTURED", final.str("payment", "status"))
	assert.Equal(t, float64(1), s.metric("checkout_payment_reconciler_resolved_total", "status", "AUTHORIZED"))
}
