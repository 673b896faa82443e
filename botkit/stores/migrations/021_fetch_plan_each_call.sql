-- Migration 020 kept procrastinate's fetch off sequential scans, but a plan made while the
-- queue was empty still read an index whole for every candidate: with a conversation's
-- messages waiting behind its running turn, each fetch passes over them, and that plan made
-- the pass quadratic (`bench/scaleout.py`: PostgreSQL's CPU a message 2 ms became 15 in one
-- pair of seven). Planned at every call, the fetch follows the queue's size; the index lets
-- it find, for each candidate, whether its conversation has a turn running or an earlier
-- message waiting, without reading other conversations' jobs (#34). 600 jobs of 100
-- conversations, 40 fetches after polls of the empty queue: 1.0 ms a fetch instead of 2.2
-- (24.8 with neither 020 nor this), 8,081 rows read instead of 348,497.
CREATE INDEX IF NOT EXISTS botkit_jobs_by_lock
    ON procrastinate_jobs (lock, priority DESC, id) WHERE status IN ('todo', 'doing');

ALTER FUNCTION procrastinate_fetch_job_v2(character varying[], bigint)
    SET plan_cache_mode = force_custom_plan;
