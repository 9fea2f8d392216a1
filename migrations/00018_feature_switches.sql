-- +goose Up

-- Feature switches: what shoppers can live without under load (stock hints on the cart, stock
-- warnings in the checkout preview, abandoned-cart events), turned off and on by ops at run time
-- without a restart. Every API and worker process reads this table through a cache of a second
-- (FEATURES_CACHE_TTL), so a change reaches them all within that. A switch without a row is on:
-- a switch exists in the code, and a row records only what ops set, by whom and when.
CREATE TABLE feature_switches (
    name       TEXT        PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_]{0,62}$'),
    enabled    BOOLEAN     NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_by TEXT        NOT NULL CHECK (length(updated_by) BETWEEN 1 AND 200)
);

-- +goose Down
DROP TABLE feature_switches;
