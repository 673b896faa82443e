-- procrastinate's fetch (`procrastinate_fetch_job_v2`) is a PL/pgSQL function, so each
-- connection plans its query once and keeps the plan. A worker polls the queue while it is
-- empty, and for an empty table the best plan reads the table from end to end, twice over (the
-- candidates, and for each one the earlier jobs of its lock). That plan is kept when the queue
-- fills, until the next statistics reach the connection: each fetch then reads the queue's
-- length squared rows (`bench/scaleout.py`: 0.4 ms a fetch became 10-25 ms, and PostgreSQL's
-- CPU a message 2 ms became 15, with 600 messages queued). Planned without sequential scans,
-- the fetch uses the queue's indexes at every size (#34). A procrastinate migration that
-- replaces the function drops this setting.
ALTER FUNCTION procrastinate_fetch_job_v2(character varying[], bigint) SET enable_seqscan = off;
