-- Invite codes are secrets: keep only their SHA-256 (hex) and their first 4 characters, so a
-- copy of the database (a dump, a backup, a replica) cannot register anyone. Existing codes
-- are hashed here; the links already handed out keep working.
-- A new table rather than ALTER TABLE ... DROP COLUMN, which would leave the plain codes in
-- the old rows on disk.

CREATE TABLE botkit_invites_hashed (
    code_hash   text        NOT NULL,
    code_prefix text        NOT NULL,
    role        text        NOT NULL,
    uses_left   integer     NOT NULL,
    expires_at  timestamptz,
    created_by  bigint,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT botkit_invites_hashed_pkey PRIMARY KEY (code_hash),
    CONSTRAINT botkit_invites_code_hash_check CHECK (code_hash ~ '^[0-9a-f]{64}$'),
    CONSTRAINT botkit_invites_code_prefix_check CHECK (length(code_prefix) <= 4),
    CONSTRAINT botkit_invites_uses_left_check CHECK (uses_left >= 0)
);

INSERT INTO botkit_invites_hashed
    (code_hash, code_prefix, role, uses_left, expires_at, created_by, created_at)
SELECT encode(sha256(convert_to(code, 'UTF8')), 'hex'), left(code, 4),
       role, uses_left, expires_at, created_by, created_at
FROM botkit_invites;

DROP TABLE botkit_invites;
ALTER TABLE botkit_invites_hashed RENAME TO botkit_invites;
ALTER TABLE botkit_invites RENAME CONSTRAINT botkit_invites_hashed_pkey TO botkit_invites_pkey;
