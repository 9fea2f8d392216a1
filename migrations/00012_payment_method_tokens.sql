-- +goose Up

-- The shopper's payment method token, kept by the API for the order request that carries it, so
-- that it never travels through the order workflow's input or history. The Authorize step reads it
-- by the order's (user, Idempotency-Key, request hash) and forgets it once the provider has given a
-- definite answer; the reservation sweeper forgets any left behind after a day.
CREATE TABLE payment_method_tokens (
    user_id         BIGINT      NOT NULL,
    idempotency_key TEXT        NOT NULL,
    request_hash    TEXT        NOT NULL,
    token           TEXT        NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, idempotency_key, request_hash)
);
CREATE INDEX payment_method_tokens_created_idx ON payment_method_tokens (created_at);

-- +goose Down
DROP TABLE payment_method_tokens;
