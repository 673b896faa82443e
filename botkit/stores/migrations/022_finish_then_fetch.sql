-- A busy worker ends a job and takes its next one on one round trip (#34): it fetches as soon
-- as a job's slot frees, so the two statements always came one after the other. Here they run
-- in that order in one call: procrastinate's own finish (its checks, events and deletion
-- unchanged), then botkit's fetch (migration 021), which sees the ended job gone from its
-- conversation, so that conversation's next job can be the one taken.
CREATE FUNCTION botkit_finish_then_fetch_job(
    p_job_id bigint,
    p_status procrastinate_job_status,
    p_delete_job boolean,
    target_queue_names character varying[],
    p_worker_id bigint
)
    RETURNS procrastinate_jobs
    LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM procrastinate_finish_job_v1(p_job_id, p_status, p_delete_job);
    RETURN botkit_fetch_job(target_queue_names, p_worker_id);
END;
$$;
