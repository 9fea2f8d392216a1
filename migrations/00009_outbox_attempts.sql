-- +goose Up

-- An event whose handler keeps failing is set aside after a number of attempts (dead_at), so it
-- cannot hold back every event behind it; it stays in the table for ops to look at and replay.
ALTER TABLE outbox ADD COLUMN attempts INT NOT NULL DEFAULT 0;
ALTER TABLE outbox ADD COLUMN last_error TEXT;
ALTER TABLE outbox ADD COLUMN dead_at TIMESTAMPTZ;
DROP INDEX outbox_unpublished_idx;
CREATE INDEX outbox_unpublished_idx ON outbox (id) WHERE published_at IS NULL AND dead_at IS NULL;

-- +goose Down
DROP INDEX outbox_unpublished_idx;
CREATE INDEX outbox_unpublished_idx ON outbox (id) WHERE published_at IS NULL;
ALTER TABLE outbox DROP COLUMN dead_at, DROP COLUMN last_error, DROP COLUMN attempts;
