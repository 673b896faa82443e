-- One-time sign-in links of the operators' console (#48): an admin's /console makes one, the
-- console takes it once. Only the SHA-256 of the token is kept; a taken link's row is deleted.
CREATE TABLE IF NOT EXISTS botkit_console_links (
    token_hash text        PRIMARY KEY CHECK (length(token_hash) = 64),
    user_id    bigint      NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS botkit_console_links_expiry_idx ON botkit_console_links (expires_at);
