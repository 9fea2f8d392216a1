-- +goose Up

-- A webhook delivery takes its event in hand (claimed_until) before it acts on it, with no
-- transaction open while it calls the provider and Temporal, and clears the claim once it has
-- acted: NULL is an event acted on (every event recorded before this column was). A delivery that
-- dies holding a claim leaves it to run out; one that fails gives the event back (its row goes).
ALTER TABLE payment_webhook_events ADD COLUMN claimed_until TIMESTAMPTZ;

-- +goose Down
DELETE FROM payment_webhook_events WHERE claimed_until IS NOT NULL;
ALTER TABLE payment_webhook_events DROP COLUMN claimed_until;
