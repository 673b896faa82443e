-- Dead workers found at once (#34): each worker process holds an advisory lock per
-- procrastinate worker id on a connection of its own, and records the id here once the lock
-- is held. A recorded id whose lock is gone is a dead process: any worker puts its jobs back
-- and forgets the row. server_started (pg_postmaster_start_time() when the lock was taken)
-- keeps a server restart, which drops every lock, from looking like every worker's death.
-- A crash-restart drops every lock but keeps pg_postmaster_start_time(): a sweep judges
-- locks only once its own lock connection is some seconds old (runtime.liveness.SETTLE).
CREATE TABLE IF NOT EXISTS botkit_worker_locks (
    worker_id      bigint      PRIMARY KEY,
    server_started timestamptz NOT NULL,
    taken_at       timestamptz NOT NULL DEFAULT now()
);
