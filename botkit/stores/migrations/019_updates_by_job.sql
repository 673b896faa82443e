-- Giving up an update (#34) marks every update its job claimed, found by job_id: without an
-- index that read the whole botkit_updates table (every update of the last two days).
CREATE INDEX IF NOT EXISTS botkit_updates_job_id ON botkit_updates (job_id);
