-- +goose Up

-- The idempotency record keeps the outcome of placing the order, from which the API renders the
-- same answer every time.
ALTER TABLE idempotency_records DROP COLUMN status_code;
ALTER TABLE idempotency_records RENAME COLUMN response TO outcome;

-- Support parks an order here when a step exhausted its retries.
ALTER TABLE orders ADD COLUMN attention JSONB;

-- The workflow run that created the order: a run re-executing its own step after a worker crash
-- finds its order; a later run of the same request finds another run's.
ALTER TABLE orders ADD COLUMN run_id TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE orders DROP COLUMN run_id;
ALTER TABLE orders DROP COLUMN attention;
ALTER TABLE idempotency_records RENAME COLUMN outcome TO response;
ALTER TABLE idempotency_records ADD COLUMN status_code INT NOT NULL DEFAULT 0;
