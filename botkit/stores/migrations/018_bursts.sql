-- Bursts (#34): as with `python -m botkit run`, a user's plain messages that came while a turn
-- of their conversation ran are answered together in one turn. A message's job inserted while
-- a job of its lock is running (a turn, or a scheduled task's turn; not a button press, which
-- `run` answers beside the turns) gets `"during_turn": true` in its arguments, in the insert
-- itself: one probe of procrastinate's index of running locks, no statement more for the
-- receiver, and a worker looks for the jobs to gather only when its own job is so marked.
-- Workers of an earlier botkit do not take that argument: start this version's with it.
CREATE OR REPLACE FUNCTION botkit_mark_during_turn() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (
        SELECT FROM procrastinate_jobs
        WHERE lock = NEW.lock AND status = 'doing'
          -- a scheduled task's job has no update: it is a turn too
          AND NOT coalesce(args->'update' ? 'callback_query', false)
    ) THEN
        NEW.args := NEW.args || '{"during_turn": true}'::jsonb;
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER botkit_mark_during_turn
    BEFORE INSERT ON procrastinate_jobs
    FOR EACH ROW WHEN (
        NEW.task_name = 'botkit.turn' AND NEW.lock IS NOT NULL AND NEW.args->'update' ? 'message'
    )
    EXECUTE FUNCTION botkit_mark_during_turn();
