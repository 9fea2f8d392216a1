-- +goose Up
-- The auditor asks for the intents of a thousand orders at a time (IntentsOfOrders): an index on
-- the order id, so that it reads those orders' intents instead of scanning every intent each time.
CREATE INDEX IF NOT EXISTS intents_order_idx ON paysim.intents (order_id, created_at);

-- +goose Down
DROP INDEX paysim.intents_order_idx;
