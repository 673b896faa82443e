-- Reminders and scheduled tasks (botkit.stores.schedules), and each user's time zone.
-- A due schedule is claimed (status 'firing', a claim token, a lease) with UPDATE … RETURNING
-- over rows locked FOR UPDATE SKIP LOCKED, so two processes never deliver the same one; its
-- delivery is recorded once Telegram confirmed it. A claim whose lease ran out (its process
-- died mid-delivery) may be taken again.

CREATE TABLE IF NOT EXISTS botkit_schedules (
    id            bigserial   PRIMARY KEY,
    user_id       bigint      NOT NULL,
    chat_id       bigint      NOT NULL,
    thread_id     bigint,
    chat_type     text        NOT NULL,
    kind          text        NOT NULL CHECK (kind IN ('reminder', 'task')),
    text          text        NOT NULL,
    due_at        timestamptz NOT NULL,
    repeat        text,
    timezone      text        NOT NULL,
    status        text        NOT NULL DEFAULT 'pending'
                  CHECK (status IN ('pending', 'firing', 'done', 'cancelled', 'failed')),
    created_at    timestamptz NOT NULL DEFAULT now(),
    fired         integer     NOT NULL DEFAULT 0,
    claim         text,
    claimed_until timestamptz,
    last_fired_at timestamptz
);

CREATE INDEX IF NOT EXISTS botkit_schedules_due_idx
    ON botkit_schedules (due_at) WHERE status IN ('pending', 'firing');
CREATE INDEX IF NOT EXISTS botkit_schedules_user_idx
    ON botkit_schedules (user_id) WHERE status IN ('pending', 'firing');

CREATE TABLE IF NOT EXISTS botkit_timezones (
    user_id    bigint      PRIMARY KEY,
    timezone   text        NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
