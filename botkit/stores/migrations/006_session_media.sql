-- Pictures and documents of PostgreSQL sessions (botkit.sessions.media), stored once each by
-- content hash: an entry in botkit_sessions refers to `<sha256>.<ext>` instead of holding the
-- base64, so its rows stay small. Rows are never updated: the same name always has the same bytes.

CREATE TABLE IF NOT EXISTS botkit_session_media (
    name       text        PRIMARY KEY,
    data       bytea       NOT NULL,
    stored_at  timestamptz NOT NULL DEFAULT now()
);
