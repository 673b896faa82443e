-- Approval before a tool acts (#29): a call of a tool marked approval=True waits here for a
-- person's Allow, its turn ended. A decision is recorded once (UPDATE ... WHERE state =
-- 'pending'); resuming is claimed once (state 'decided' -> 'resuming'), so a decided call runs
-- in one worker only. Messages of a waiting conversation are held in order, then run.
CREATE TABLE IF NOT EXISTS botkit_approvals (
    id           text             PRIMARY KEY,
    conversation text             NOT NULL,
    user_id      bigint           NOT NULL,
    approvers    jsonb            NOT NULL,
    chat_id      bigint           NOT NULL,
    turn         jsonb            NOT NULL,
    calls        jsonb            NOT NULL,
    deadline     double precision NOT NULL,
    message_id   bigint,
    state        text             NOT NULL DEFAULT 'pending',
    decision     text
);
CREATE INDEX IF NOT EXISTS botkit_approvals_open_idx
    ON botkit_approvals (conversation) WHERE state <> 'done';
CREATE TABLE IF NOT EXISTS botkit_held_messages (
    seq          bigserial PRIMARY KEY,
    conversation text      NOT NULL,
    update_json  jsonb     NOT NULL
);
CREATE INDEX IF NOT EXISTS botkit_held_conv_idx ON botkit_held_messages (conversation, seq);
