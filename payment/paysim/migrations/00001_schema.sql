-- +goose Up

-- The payment simulator's own state, in a schema of its own: the PROVIDER side of a payment (the
-- merchant's side is the product's payments and payment_webhook_events). The product never reads
-- it, as it could never read a real provider's tables; the auditor asks the simulator
-- (paysim.Records). It is in PostgreSQL so that the API process (3-D Secure page, webhook
-- delivery) and the worker (authorize, capture, void, refund) share it, and so that it survives
-- restarts.
CREATE SCHEMA IF NOT EXISTS paysim;

-- Releases before this one kept these tables in the product's schema as public.paysim_*: a
-- database that has them keeps them, with their rows, moved here under their new names, their
-- constraints and indexes renamed alike (paysim_intents_key_uq becomes intents_key_uq).
-- +goose StatementBegin
DO $$
DECLARE
    t text;
    c record;
BEGIN
    FOREACH t IN ARRAY ARRAY['intents', 'webhook_events', 'faults', 'refunds'] LOOP
        IF to_regclass('public.paysim_' || t) IS NOT NULL AND to_regclass('paysim.' || t) IS NULL THEN
            EXECUTE format('ALTER TABLE public.%I SET SCHEMA paysim', 'paysim_' || t);
            EXECUTE format('ALTER TABLE paysim.%I RENAME TO %I', 'paysim_' || t, t);
        END IF;
    END LOOP;
    FOR c IN SELECT conrelid::regclass AS tbl, conname FROM pg_constraint
             WHERE connamespace = 'paysim'::regnamespace AND conname LIKE 'paysim\_%' LOOP
        EXECUTE format('ALTER TABLE %s RENAME CONSTRAINT %I TO %I', c.tbl, c.conname, substr(c.conname, 8));
    END LOOP;
    FOR c IN SELECT indexname FROM pg_indexes WHERE schemaname = 'paysim' AND indexname LIKE 'paysim\_%' LOOP
        EXECUTE format('ALTER INDEX paysim.%I RENAME TO %I', c.indexname, substr(c.indexname, 8));
    END LOOP;
END $$;
-- +goose StatementEnd

-- Stripe-like intents, one per idempotency key. Every status change is a conditional UPDATE.
CREATE TABLE IF NOT EXISTS paysim.intents (
    id              TEXT        PRIMARY KEY,
    idempotency_key TEXT        NOT NULL,
    order_id        BIGINT      NOT NULL,
    amount_minor    BIGINT      NOT NULL CHECK (amount_minor > 0),
    currency        TEXT        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    token           TEXT        NOT NULL,
    status          VARCHAR(24) NOT NULL,
    captured_minor  BIGINT      NOT NULL DEFAULT 0,
    refunded_minor  BIGINT      NOT NULL DEFAULT 0,
    redirect_url    TEXT        NOT NULL DEFAULT '',
    decline_code    TEXT        NOT NULL DEFAULT '',
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT intents_key_uq UNIQUE (idempotency_key),
    CONSTRAINT intents_status_valid CHECK (status IN
        ('REQUIRES_ACTION', 'AUTHORIZED', 'CAPTURED', 'VOIDED', 'REFUNDED', 'DECLINED')),
    CONSTRAINT intents_amounts_valid CHECK (captured_minor BETWEEN 0 AND amount_minor
        AND refunded_minor BETWEEN 0 AND captured_minor)
);

-- Signed webhooks to the merchant, delivered at least once. next_attempt_at is both the retry
-- time and the lease of whoever is delivering the event right now.
CREATE TABLE IF NOT EXISTS paysim.webhook_events (
    id              TEXT        PRIMARY KEY,
    intent_id       TEXT        NOT NULL REFERENCES paysim.intents (id),
    type            TEXT        NOT NULL,
    payload         JSONB       NOT NULL,
    attempts        INT         NOT NULL DEFAULT 0,
    next_attempt_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_error      TEXT,
    delivered_at    TIMESTAMPTZ,
    gave_up_at      TIMESTAMPTZ,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS webhook_events_due_idx ON paysim.webhook_events (next_attempt_at)
    WHERE delivered_at IS NULL AND gave_up_at IS NULL;
CREATE INDEX IF NOT EXISTS webhook_events_intent_idx ON paysim.webhook_events (intent_id);

-- The fault switch, one row, shared by every process: provider down until a time, added
-- latency, a failure rate. NULL leaves the process's own default in force.
CREATE TABLE IF NOT EXISTS paysim.faults (
    id           BOOLEAN          PRIMARY KEY DEFAULT true CHECK (id),
    down_until   TIMESTAMPTZ,
    latency_ms   INT              CHECK (latency_ms >= 0),
    failure_rate DOUBLE PRECISION CHECK (failure_rate BETWEEN 0 AND 1),
    updated_at   TIMESTAMPTZ      NOT NULL DEFAULT now()
);
INSERT INTO paysim.faults (id) VALUES (true) ON CONFLICT (id) DO NOTHING;

-- Partial refunds, one per refund idempotency key: a repeat answers the same refund and moves no
-- more money.
CREATE TABLE IF NOT EXISTS paysim.refunds (
    refund_key   TEXT        PRIMARY KEY,
    intent_id    TEXT        NOT NULL REFERENCES paysim.intents (id),
    amount_minor BIGINT      NOT NULL CHECK (amount_minor > 0),
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- +goose Down
DROP SCHEMA paysim CASCADE;
