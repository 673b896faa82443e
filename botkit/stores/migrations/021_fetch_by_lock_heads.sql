-- botkit's own fetch of the next job, as procrastinate's `procrastinate_fetch_job_v2` takes it
-- (the first waiting job by priority, then id, whose conversation -- its lock -- has no job
-- running and no earlier job waiting; skipping jobs another worker is taking), with a plan
-- that stays right at every queue size (#34).
--
-- procrastinate's fetch is a PL/pgSQL function, so each connection plans it once and keeps
-- the plan. A worker polls the queue while it is empty, where the planner's costs all tie
-- and any plan will do; kept when the queue fills, that plan read an index or the table whole
-- for every job a fetch passes over (those of conversations whose turn runs): quadratic
-- (`bench/scaleout.py`: PostgreSQL's CPU a message 2 ms became 15 in one pair of seven).
-- Migration 020's `enable_seqscan = off` only moved the trap to another index. Planning at
-- every call fixes it but costs 0.66 ms a fetch.
--
-- Here a job's place in its conversation is one look at the index below: the conversation's
-- first job there (running ones first, then by priority and id) must be the job itself. With
-- sorts, bitmap scans and sequential scans off, the walk, the look and the update each have
-- one plan (the indexes whose order or key they ask for), whatever the statistics say when it
-- is made: 600 jobs of 100 conversations six in a row, 40 fetches after polls of the empty
-- queue, read 7,882 rows, as with fresh statistics (348,497 with 020's plan).
CREATE INDEX IF NOT EXISTS botkit_jobs_lock_heads
    ON procrastinate_jobs (lock, (status = 'doing') DESC, priority DESC, id)
    WHERE status IN ('todo', 'doing');

CREATE FUNCTION botkit_fetch_job(target_queue_names character varying[], p_worker_id bigint)
    RETURNS procrastinate_jobs
    LANGUAGE plpgsql
    SET enable_seqscan = off
    SET enable_bitmapscan = off
    SET enable_sort = off
AS $$
DECLARE
    found_job procrastinate_jobs;
BEGIN
    UPDATE procrastinate_jobs
    SET status = 'doing', worker_id = p_worker_id
    WHERE id = (
        SELECT jobs.id
        FROM procrastinate_jobs AS jobs
        WHERE jobs.status = 'todo'
          AND (target_queue_names IS NULL OR jobs.queue_name = ANY(target_queue_names))
          AND (jobs.scheduled_at IS NULL OR jobs.scheduled_at <= now())
          AND (jobs.lock IS NULL OR jobs.id = (
              SELECT head.id
              FROM procrastinate_jobs AS head
              WHERE head.lock = jobs.lock AND head.status IN ('todo', 'doing')
              ORDER BY head.lock, (head.status = 'doing') DESC, head.priority DESC, head.id
              LIMIT 1
          ))
        ORDER BY jobs.priority DESC, jobs.id
        LIMIT 1
        FOR UPDATE OF jobs SKIP LOCKED
    )
    RETURNING * INTO found_job;
    RETURN found_job;
END;
$$;
