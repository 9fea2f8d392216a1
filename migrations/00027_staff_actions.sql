-- +goose Up

-- Every staff action on an order — a support action (retry, cancel, refund) the order's workflow
-- acted on, a line cancellation requested — with the verified person who sent it: who (the
-- identity provider's subject, role and name), when, why, and through what and from where.
-- Written by the workflow's step in the same transaction as the order's timeline entry, once per
-- action (the workflow run and the action's number in it). Append-only: a row is never changed
-- or removed.
CREATE TABLE staff_actions (
    id                   BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    created_at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    order_id             BIGINT      NOT NULL REFERENCES orders (id),
    line_cancellation_id BIGINT      REFERENCES line_cancellations (id),
    action               TEXT        NOT NULL CHECK (action IN ('retry', 'cancel', 'refund', 'line_cancel')),
    reason               TEXT        NOT NULL CHECK (length(reason) <= 2000),
    -- The parked step the action was taken on, if any.
    step                 TEXT,
    actor_sub            TEXT        NOT NULL CHECK (length(actor_sub) BETWEEN 1 AND 200),
    actor_role           TEXT        NOT NULL CHECK (actor_role IN ('support', 'ops')),
    actor_name           TEXT        NOT NULL CHECK (length(actor_name) <= 200),
    actor_via            TEXT        NOT NULL CHECK (length(actor_via) BETWEEN 1 AND 50),
    actor_ip             TEXT        NOT NULL CHECK (length(actor_ip) <= 100),
    -- What else the action said (a line cancellation's SKU, units and reason).
    detail               JSONB       NOT NULL DEFAULT '{}',
    workflow_id          TEXT        NOT NULL,
    run_id               TEXT        NOT NULL,
    seq                  INT         NOT NULL CHECK (seq >= 0),
    CONSTRAINT staff_actions_once UNIQUE (workflow_id, run_id, seq)
);
CREATE INDEX staff_actions_order_idx ON staff_actions (order_id, id);
CREATE INDEX staff_actions_actor_idx ON staff_actions (actor_sub, created_at);

-- +goose StatementBegin
CREATE FUNCTION staff_actions_immutable() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'staff_actions is append-only' USING ERRCODE = 'insufficient_privilege';
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER staff_actions_no_update BEFORE UPDATE OR DELETE ON staff_actions
    FOR EACH ROW EXECUTE FUNCTION staff_actions_immutable();
CREATE TRIGGER staff_actions_no_truncate BEFORE TRUNCATE ON staff_actions
    FOR EACH STATEMENT EXECUTE FUNCTION staff_actions_immutable();

-- +goose Down
DROP TABLE staff_actions;
DROP FUNCTION staff_actions_immutable();
