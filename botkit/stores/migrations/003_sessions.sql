-- Sessions in PostgreSQL (botkit.sessions.PostgresSessionStore): the entries a JSONL session
-- file holds, one row each, numbered per conversation from 1 in the order they were appended.
-- `entry` is the JSONL line without its newline, as text (jsonb would reorder keys and respell
-- numbers, and an export must give back the very bytes that were written).
-- `botkit_session_heads` holds each conversation's last number: an append takes the next one
-- under that row's lock, so numbers commit in order and "everything after N" misses nothing.

CREATE TABLE IF NOT EXISTS botkit_session_heads (
    conversation text   PRIMARY KEY,
    last_seq     bigint NOT NULL CHECK (last_seq >= 0)
);

CREATE TABLE IF NOT EXISTS botkit_sessions (
    conversation text        NOT NULL,
    seq          bigint      NOT NULL CHECK (seq > 0),
    entry        text        NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (conversation, seq)
);
