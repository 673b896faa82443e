-- Leases for approvals (#29): a worker resuming a decided call holds it until
-- resuming_until, renewing it while the turn runs; a worker draining a conversation's held
-- messages holds the oldest until taken_until. Another worker takes over only once a lease
-- has run out (its worker died), never a live one. 0 (the default): no lease.
ALTER TABLE botkit_approvals
    ADD COLUMN IF NOT EXISTS resuming_until double precision NOT NULL DEFAULT 0;
ALTER TABLE botkit_held_messages
    ADD COLUMN IF NOT EXISTS taken_until double precision NOT NULL DEFAULT 0;
