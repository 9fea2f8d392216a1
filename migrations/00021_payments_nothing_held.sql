-- +goose Up

-- When the payment reconciler found that the provider holds nothing under the key of a failed or
-- cancelled order (the order's authorization never reached it), long enough after the order ended
-- that no call of the order can still reach it: the payment is settled and leaves the
-- reconciler's list. NULL for every other payment.
ALTER TABLE payments ADD COLUMN nothing_held_at TIMESTAMPTZ;

-- +goose Down
ALTER TABLE payments DROP COLUMN nothing_held_at;
