-- +goose Up

-- Support's and ops' sessions for the codec endpoint (decoding orders in the Temporal UI). The
-- browser's cookie holds a random id; the table holds only its SHA-256, so a reader of the table
-- cannot use a session. Every API replica reads the same table, so a session opened through one
-- replica works through all, and ends for all when it is signed out.
CREATE TABLE codec_sessions (
    id_hash    BYTEA PRIMARY KEY,
    user_id    BIGINT NOT NULL,
    role       TEXT NOT NULL,
    name       TEXT NOT NULL DEFAULT '',
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX codec_sessions_expires_at ON codec_sessions (expires_at);

-- +goose Down
DROP TABLE codec_sessions;
