-- +goose Up

-- An order's saga ends the order's row first and gives its stock and money back after, so a step
-- of that giving back may wait for support (parked) on an order already FAILED or CANCELLED: its
-- attention is set on the ended row, which keeps its status. The order gauges count such orders as
-- waiting for support; this index finds them.
CREATE INDEX orders_attention_idx ON orders (updated_at) WHERE attention IS NOT NULL;

-- +goose Down
DROP INDEX orders_attention_idx;
