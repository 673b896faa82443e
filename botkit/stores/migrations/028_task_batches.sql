-- Scheduled tasks at half price (#49): a task marked not urgent may run its first LLM call
-- through the Message Batches API. The batch in flight is kept with the occurrence (its id,
-- when the occurrence's message was built, and the digest of the request it holds), so a
-- restart picks it up instead of submitting again.

ALTER TABLE botkit_schedules ADD COLUMN IF NOT EXISTS urgent boolean NOT NULL DEFAULT true;
ALTER TABLE botkit_schedules ADD COLUMN IF NOT EXISTS batch_id text;
ALTER TABLE botkit_schedules ADD COLUMN IF NOT EXISTS batch_at timestamptz;
ALTER TABLE botkit_schedules ADD COLUMN IF NOT EXISTS batch_digest text;
CREATE INDEX IF NOT EXISTS botkit_schedules_batch_idx ON botkit_schedules (batch_id)
    WHERE batch_id IS NOT NULL;
