-- +goose Up

-- Sellers' webhook endpoints: where a seller wants the events of its own SKUs' orders, signed by
-- the Standard Webhooks convention with a secret of the endpoint's own.
CREATE TABLE webhook_endpoints (
    id              BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    seller_id       BIGINT      NOT NULL REFERENCES sellers (id),
    url             TEXT        NOT NULL CHECK (length(url) BETWEEN 1 AND 2048),
    event_types     TEXT[]      NOT NULL,
    description     TEXT        NOT NULL DEFAULT '' CHECK (length(description) <= 200),
    -- DISABLED: by the seller, or by the dispatcher after a delivery failed for WEBHOOK_RETRY_FOR
    -- (disabled_reason says which). Its deliveries wait, in order, until it is enabled again.
    status          TEXT        NOT NULL DEFAULT 'ENABLED' CHECK (status IN ('ENABLED', 'DISABLED')),
    disabled_reason TEXT,
    disabled_at     TIMESTAMPTZ,
    -- The dispatcher that delivers to the endpoint now (one at a time, so that its deliveries go
    -- out in order); a lease that runs out lets another take over.
    lease_until     TIMESTAMPTZ,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX webhook_endpoints_seller_idx ON webhook_endpoints (seller_id);

-- An endpoint's signing secrets: the newest is current; a rotated one keeps signing beside it
-- until expires_at, so that the seller's receiver can move to the new one without a gap.
CREATE TABLE webhook_secrets (
    id          BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint_id BIGINT      NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    secret      BYTEA       NOT NULL CHECK (length(secret) = 32),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at  TIMESTAMPTZ
);
CREATE INDEX webhook_secrets_endpoint_idx ON webhook_secrets (endpoint_id);

-- One delivery per (endpoint, event): what the seller is sent (the event with only its own order
-- lines), its state and its attempts. Replaying a delivery sends it again (a new attempt, the
-- same webhook-id).
CREATE TABLE webhook_deliveries (
    id               BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint_id      BIGINT      NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    event_id         BIGINT      NOT NULL,
    event_type       TEXT        NOT NULL,
    body             JSONB       NOT NULL,
    -- PENDING: to be sent (or sent again); DELIVERED: the endpoint answered 2xx; FAILED: given up
    -- when the endpoint was disabled for failing (enabling it again sends it again).
    status           TEXT        NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'DELIVERED', 'FAILED')),
    attempts         INT         NOT NULL DEFAULT 0,
    next_attempt_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    first_failed_at  TIMESTAMPTZ,
    last_attempt_at  TIMESTAMPTZ,
    last_status_code INT,
    last_error       TEXT,
    last_latency_ms  INT,
    delivered_at     TIMESTAMPTZ,
    -- Sent again on request (the seller's or ops'): its next attempt is logged as a replay.
    replay           BOOLEAN     NOT NULL DEFAULT false,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (endpoint_id, event_id)
);
CREATE INDEX webhook_deliveries_pending_idx ON webhook_deliveries (endpoint_id, event_id) WHERE status = 'PENDING';

-- Every attempt, for the delivery log the seller and ops read.
CREATE TABLE webhook_attempts (
    id          BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    delivery_id BIGINT      NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
    at          TIMESTAMPTZ NOT NULL DEFAULT now(),
    status_code INT,
    latency_ms  INT         NOT NULL,
    error       TEXT,
    replay      BOOLEAN     NOT NULL DEFAULT false
);
CREATE INDEX webhook_attempts_delivery_idx ON webhook_attempts (delivery_id);

-- +goose Down
DROP TABLE webhook_attempts, webhook_deliveries, webhook_secrets, webhook_endpoints;
