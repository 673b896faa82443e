-- Users, invites and daily token usage for botkit.stores.PostgresUserStore.
-- Applied once, in a transaction, by `python -m botkit migrate`.

CREATE TABLE IF NOT EXISTS botkit_users (
    user_id      bigint      PRIMARY KEY,
    role         text        NOT NULL,
    display_name text,
    joined_at    timestamptz NOT NULL DEFAULT now(),
    blocked      boolean     NOT NULL DEFAULT false
);

CREATE INDEX IF NOT EXISTS botkit_users_role_idx ON botkit_users (role);

CREATE TABLE IF NOT EXISTS botkit_invites (
    code       text        PRIMARY KEY CHECK (code ~ '^[A-Za-z0-9_-]{1,64}$'),
    role       text        NOT NULL,
    uses_left  integer     NOT NULL CHECK (uses_left >= 0),
    expires_at timestamptz,
    created_by bigint,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS botkit_usage (
    user_id bigint NOT NULL,
    day     date   NOT NULL,
    tokens  bigint NOT NULL DEFAULT 0 CHECK (tokens >= 0),
    PRIMARY KEY (user_id, day)
);
