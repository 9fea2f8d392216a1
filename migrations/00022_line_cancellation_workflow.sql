-- +goose Up

-- The workflow taking care of a line cancellation (the last one that recorded or repeated its
-- request): the payment reconciler finishes a cancellation whose workflow no longer runs. NULL for
-- cancellations recorded before this column (their workflow id is the one their request derives).
ALTER TABLE line_cancellations ADD COLUMN workflow_id TEXT;

-- +goose Down
ALTER TABLE line_cancellations DROP COLUMN workflow_id;
