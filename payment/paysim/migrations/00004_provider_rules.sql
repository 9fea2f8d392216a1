-- +goose Up
-- The rules a real provider enforces, so that the simulator is no easier a world than Stripe:
--
-- * an idempotency key per operation, refused when reused with other parameters, and kept only
--   for a window (Stripe's 24 hours): paysim.idempotency_keys. The intent's idempotency_key is now
--   the payment's own key as its metadata carries it, no longer unique: a create whose key the
--   provider forgot makes a second intent, as Stripe's would;
-- * intents made first and confirmed after (CREATED), so that the caller learns the intent's id
--   before the money is held;
-- * authorizations that lapse (capture_before), after which a capture fails;
-- * the prices the intent was made for (order_version), in its metadata.
ALTER TABLE paysim.intents DROP CONSTRAINT IF EXISTS intents_key_uq;
CREATE INDEX IF NOT EXISTS intents_key_idx ON paysim.intents (idempotency_key, created_at);
ALTER TABLE paysim.intents DROP CONSTRAINT intents_status_valid;
ALTER TABLE paysim.intents ADD CONSTRAINT intents_status_valid CHECK (status IN
    ('CREATED', 'REQUIRES_ACTION', 'AUTHORIZED', 'CAPTURED', 'VOIDED', 'REFUNDED', 'DECLINED'));
ALTER TABLE paysim.intents ADD COLUMN capture_before TIMESTAMPTZ,
                           ADD COLUMN order_version TEXT NOT NULL DEFAULT '';

-- One row per idempotency key: the operation, a digest of its parameters and the intent it acted
-- on. A key older than the window is forgotten: the next request under it is a new one.
CREATE TABLE paysim.idempotency_keys (
    key          TEXT        PRIMARY KEY,
    operation    TEXT        NOT NULL,
    request_hash TEXT        NOT NULL,
    intent_id    TEXT        NOT NULL REFERENCES paysim.intents (id),
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);
-- The intents of the releases before were made under their payment key: it is their create's key.
INSERT INTO paysim.idempotency_keys (key, operation, request_hash, intent_id, created_at)
SELECT idempotency_key || '-authorize', 'authorize', '', id, created_at FROM paysim.intents
ON CONFLICT (key) DO NOTHING;

-- +goose Down
DROP TABLE paysim.idempotency_keys;
ALTER TABLE paysim.intents DROP COLUMN capture_before, DROP COLUMN order_version;
ALTER TABLE paysim.intents DROP CONSTRAINT intents_status_valid;
ALTER TABLE paysim.intents ADD CONSTRAINT intents_status_valid CHECK (status IN
    ('REQUIRES_ACTION', 'AUTHORIZED', 'CAPTURED', 'VOIDED', 'REFUNDED', 'DECLINED'));
DROP INDEX paysim.intents_key_idx;
ALTER TABLE paysim.intents ADD CONSTRAINT intents_key_uq UNIQUE (idempotency_key);
