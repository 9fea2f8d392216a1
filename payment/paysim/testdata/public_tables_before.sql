-- The payment simulator's tables as releases before kept them, in the product's schema (public):
-- what migrations/00002_paysim.sql and migrations/00019_line_cancellations.sql created then.
-- Stripe-like intents, one per idempotency key. Every status change is a conditional UPDATE.
CREATE TABLE paysim_intents (
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
    CONSTRAINT paysim_intents_key_uq UNIQUE (idempotency_key),
    CONSTRAINT paysim_intents_status_valid CHECK (status IN
        ('REQUIRES_ACTION', 'AUTHORIZED', 'CAPTURED', 'VOIDED', 'REFUNDED', 'DECLINED')),
    CONSTRAINT paysim_intents_amounts_valid CHECK (captured_minor BETWEEN 0 AND amount_minor
        AND refunded_minor BETWEEN 0 AND captured_minor)
);

-- Signed webhooks to the merchant, delivered at least once. next_attempt_at is both the retry
-- time and the lease of whoever is delivering the event right now.
CREATE TABLE paysim_webhook_events (
    id              TEXT        PRIMARY KEY,
    intent_id       TEXT        NOT NULL REFERENCES paysim_intents (id),
    type            TEXT        NOT NULL,
    payload         JSONB       NOT NULL,
    attempts        INT         NOT NULL DEFAULT 0,
    next_attempt_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_error      TEXT,
    delivered_at    TIMESTAMPTZ,
    gave_up_at      TIMESTAMPTZ,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX paysim_webhook_events_due_idx ON paysim_webhook_events (next_attempt_at)
    WHERE delivered_at IS NULL AND gave_up_at IS NULL;
CREATE INDEX paysim_webhook_events_intent_idx ON paysim_webhook_events (intent_id);

-- The fault switch, one row, shared by every process: provider down until a time, added
-- latency, a failure rate. NULL leaves the process's own default in force.
CREATE TABLE paysim_faults (
    id           BOOLEAN          PRIMARY KEY DEFAULT true CHECK (id),
    down_until   TIMESTAMPTZ,
    latency_ms   INT              CHECK (latency_ms >= 0),
    failure_rate DOUBLE PRECISION CHECK (failure_rate BETWEEN 0 AND 1),
    updated_at   TIMESTAMPTZ      NOT NULL DEFAULT now()
);
INSERT INTO paysim_faults (id) VALUES (true);

CREATE TABLE paysim_refunds (
    refund_key   TEXT        PRIMARY KEY,
    intent_id    TEXT        NOT NULL REFERENCES paysim_intents (id),
    amount_minor BIGINT      NOT NULL CHECK (amount_minor > 0),
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);
