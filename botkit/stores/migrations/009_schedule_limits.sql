-- Limits on schedules (#27). A schedule whose owner no longer passes `authorize` when it falls
-- due waits (`paused_until`: not claimed again before then, and listed as paused) instead of
-- firing. Each scheduled task's run is counted per user and UTC day (one row per occurrence,
-- so a run repeated after a crash is counted once); past BOTKIT_MAX_TASK_RUNS a run is put off.

ALTER TABLE botkit_schedules ADD COLUMN IF NOT EXISTS paused_until timestamptz;

CREATE TABLE IF NOT EXISTS botkit_task_runs (
    schedule_id bigint      NOT NULL,
    due_at      timestamptz NOT NULL,
    user_id     bigint      NOT NULL,
    day         date        NOT NULL,
    PRIMARY KEY (schedule_id, due_at)
);

CREATE INDEX IF NOT EXISTS botkit_task_runs_user_day_idx ON botkit_task_runs (user_id, day);
