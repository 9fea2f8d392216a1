-- name: CreateCodecSession :exec
INSERT INTO codec_sessions (id_hash, user_id, role, name, expires_at)
VALUES (@id_hash, @user_id, @role, @name, @expires_at);

-- name: CodecSession :one
-- A session counts until its expiry, which is its token's.
SELECT user_id, role, name, expires_at FROM codec_sessions
WHERE id_hash = @id_hash AND expires_at > now();

-- name: DeleteCodecSession :exec
DELETE FROM codec_sessions WHERE id_hash = @id_hash;

-- name: DeleteExpiredCodecSessions :exec
-- Sessions that ended are forgotten as new ones begin, a few at a time.
DELETE FROM codec_sessions WHERE id_hash IN (
    SELECT id_hash FROM codec_sessions WHERE expires_at < now() LIMIT 100);
