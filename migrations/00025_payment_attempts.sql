-- +goose Up
-- When the order first asked the provider to authorize: a provider keeps idempotency keys for a
-- window only (Stripe: 24 hours), and its search by metadata lags its writes, so whether "not
-- found" can be trusted, and whether authorizing again under the same keys is still safe, depend
-- on how long ago the first attempt was. And until when the provider lets the authorization be
-- captured, as it said: a capture is not sent past it.
ALTER TABLE payments ADD COLUMN authorize_attempted_at TIMESTAMPTZ,
                     ADD COLUMN capture_before TIMESTAMPTZ;

-- +goose Down
ALTER TABLE payments DROP COLUMN authorize_attempted_at, DROP COLUMN capture_before;
