-- name: InsertStaffAction :execrows
-- One staff action, once: a repeat of the step that writes it (the same workflow run and action
-- number) writes nothing.
INSERT INTO staff_actions (order_id, line_cancellation_id, action, reason, step, actor_sub, actor_role, actor_name,
                           actor_via, actor_ip, detail, workflow_id, run_id, seq)
VALUES (@order_id, sqlc.narg(line_cancellation_id), @action, @reason, sqlc.narg(step), @actor_sub, @actor_role,
        @actor_name, @actor_via, @actor_ip, @detail, @workflow_id, @run_id, @seq)
ON CONFLICT ON CONSTRAINT staff_actions_once DO NOTHING;

-- name: StaffActionsOfOrder :many
SELECT id, created_at, order_id, line_cancellation_id, action, reason, step, actor_sub, actor_role, actor_name,
       actor_via, actor_ip, detail, workflow_id
FROM staff_actions
WHERE order_id = @order_id
ORDER BY id;
