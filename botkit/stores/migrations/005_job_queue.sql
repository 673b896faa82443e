-- Scale-out (python -m botkit receive / work): procrastinate's job queue, and botkit's tables
-- beside it. The marker line below is replaced by the schema of the installed procrastinate
-- (procrastinate.schema.SchemaManager.get_schema()), applied in this same transaction.

-- botkit:procrastinate-schema

-- One row per Telegram update taken into the queue, so an update delivered twice (Telegram
-- re-delivery, a webhook retry, a receiver restart) runs once: the first job that claims the
-- update runs it; a job retried after its worker died has the same id and runs it again.
CREATE TABLE IF NOT EXISTS botkit_updates (
    bot_id      bigint      NOT NULL,
    update_id   bigint      NOT NULL,
    job_id      bigint      NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (bot_id, update_id)
);
CREATE INDEX IF NOT EXISTS botkit_updates_received_at ON botkit_updates (received_at);

-- Updates aiogram could not read: kept (raw, with the reason) for an operator, never handled.
CREATE TABLE IF NOT EXISTS botkit_unparseable_updates (
    bot_id      bigint      NOT NULL,
    update_id   bigint      NOT NULL,
    payload     text        NOT NULL,
    error       text        NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (bot_id, update_id)
);

-- Telegram's global send rate, shared by every worker of one bot: each send reserves the next
-- free slot (next_at moves on by 1/rate) and waits for it.
CREATE TABLE IF NOT EXISTS botkit_send_pace (
    bot_id  bigint           PRIMARY KEY,
    next_at double precision NOT NULL
);

-- A 429 seen by one worker for a chat: every worker waits until `until` before sending there.
CREATE TABLE IF NOT EXISTS botkit_chat_holds (
    bot_id  bigint           NOT NULL,
    chat_id bigint           NOT NULL,
    until   double precision NOT NULL,
    PRIMARY KEY (bot_id, chat_id)
);
