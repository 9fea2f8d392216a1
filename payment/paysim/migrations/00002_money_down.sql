-- +goose Up
-- A fault that stops the provider moving money (authorize, capture, reverse, refund) while it
-- still answers lookups and its 3-D Secure page: a drill's "the acquirer is down, the provider is
-- not" (an approved payment is confirmed, its capture then fails and the order waits for support).
ALTER TABLE paysim.faults ADD COLUMN money_down_until TIMESTAMPTZ;

-- +goose Down
ALTER TABLE paysim.faults DROP COLUMN money_down_until;
