-- Tracing (#32): a scheduled task's turn links to the turn that scheduled it. The W3C
-- traceparent of the span that made the schedule (NULL when tracing was off then).

ALTER TABLE botkit_schedules ADD COLUMN IF NOT EXISTS traceparent text;
