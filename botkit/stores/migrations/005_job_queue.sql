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

-- A finished job frees its lock, and the conversation's next job may run: procrastinate wakes
-- its workers only when a job is inserted, so without this they would find that next job at
-- their next poll (seconds later). Tell them as procrastinate's own insert trigger does.
CREATE OR REPLACE FUNCTION botkit_notify_lock_released() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(
        'procrastinate_queue_v1#' || OLD.queue_name,
        json_build_object('type', 'job_inserted', 'job_id', OLD.id)::text
    );
    RETURN NULL;
END;
$$;

CREATE TRIGGER botkit_lock_released_on_update
    AFTER UPDATE OF status ON procrastinate_jobs
    FOR EACH ROW WHEN (OLD.status = 'doing' AND NEW.status <> 'doing' AND OLD.lock IS NOT NULL)
    EXECUTE FUNCTION botkit_notify_lock_released();

CREATE TRIGGER botkit_lock_released_on_delete
    AFTER DELETE ON procrastinate_jobs
    FOR EACH ROW WHEN (OLD.status = 'doing' AND OLD.lock IS NOT NULL)
    EXECUTE FUNCTION botkit_notify_lock_released();
