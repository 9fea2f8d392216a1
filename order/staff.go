package order

import (
	"context"
	"encoding/json"

	"github.com/jackc/pgx/v5"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/internal/staff"
	"github.com/marketplace/checkout/order/internal/orderstore"
)

// Staff actions on an order (staff_actions.action).
const (
	StaffRetry      = "retry"
	StaffCancel     = "cancel"
	StaffRefund     = "refund"
	StaffLineCancel = "line_cancel"
)

// StaffAction is one staff action on an order and the verified person who sent it. It is written
// once per (WorkflowID, RunID, Seq): the workflow run that acted on it and the action's number in
// that run, so a repeat of the step that writes it writes nothing.
type StaffAction struct {
	OrderID int64
	// LineCancellationID is the line cancellation the action is about (0: none).
	LineCancellationID int64
	Action, Reason     string
	// Step is the parked step the action was taken on ("" when none).
	Step              string
	Actor             staff.Actor
	Detail            map[string]any
	WorkflowID, RunID string
	Seq               int
}

// RecordStaffAction writes the action's staff_actions row in the caller's transaction, and says
// whether it was new (false: a repeat, written before).
func RecordStaffAction(ctx context.Context, conn db.DBTX, a StaffAction) (bool, error) {
	return recordStaffAction(ctx, orderstore.New(conn), a)
}

func recordStaffAction(ctx context.Context, q *orderstore.Queries, a StaffAction) (bool, error) {
	detail := a.Detail
	if detail == nil {
		detail = map[string]any{}
	}
	raw, err := json.Marshal(detail)
	if err != nil {
		return false, err
	}
	p := orderstore.InsertStaffActionParams{OrderID: a.OrderID, Action: a.Action, Reason: a.Reason, ActorSub: a.Actor.Sub,
		ActorRole: a.Actor.Role, ActorName: a.Actor.Name, ActorVia: a.Actor.Via, ActorIp: a.Actor.IP, Detail: raw,
		WorkflowID: a.WorkflowID, RunID: a.RunID, Seq: int32(a.Seq)}
	if a.LineCancellationID != 0 {
		p.LineCancellationID = &a.LineCancellationID
	}
	if a.Step != "" {
		p.Step = &a.Step
	}
	n, err := q.InsertStaffAction(ctx, p)
	return n > 0, err
}

// StaffActed records a staff action a workflow acted on: its row in staff_actions and the order's
// timeline entry (support_action: the action, its reason, the step, the person), in one
// transaction, once.
func (s Store) StaffActed(ctx context.Context, a StaffAction) error {
	return db.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		q := orderstore.New(tx)
		added, err := recordStaffAction(ctx, q, a)
		if err != nil || !added {
			return err
		}
		detail := map[string]any{"action": a.Action, "reason": a.Reason, "actor": a.Actor}
		if a.Step != "" {
			detail["step"] = a.Step
		}
		if a.LineCancellationID != 0 {
			detail["lineCancellationId"] = a.LineCancellationID
		}
		return note(ctx, q, a.OrderID, "support_action", detail)
	})
}
