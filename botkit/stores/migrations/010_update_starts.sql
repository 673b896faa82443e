-- Updates that kill their worker (out of memory, a native crash): procrastinate hands a dead
-- worker's job to the next one, for ever. Each start of the job that claimed an update adds
-- one to `starts` before its turn runs; a start the worker saw end short of done (a shutdown,
-- an error) is taken back, so the rest count the starts whose process died. Past
-- BOTKIT_MAX_JOB_ATTEMPTS the update is given up: `given_up_at` is set by the one start that
-- then tells the user, so they are told once, whoever races for it.
ALTER TABLE botkit_updates ADD COLUMN IF NOT EXISTS starts integer NOT NULL DEFAULT 0;
ALTER TABLE botkit_updates ADD COLUMN IF NOT EXISTS given_up_at timestamptz;
