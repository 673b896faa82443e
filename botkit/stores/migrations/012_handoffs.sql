-- Conversations handed to people (BOTKIT_OPERATORS_CHAT, #29): one row per user, kept when the
-- handoff ends, so that user's topic in the operators' forum is reopened rather than made anew.
CREATE TABLE IF NOT EXISTS botkit_handoffs (
    user_id        bigint      PRIMARY KEY,
    chat_id        bigint      NOT NULL,
    topic_id       bigint      NOT NULL,
    name           text        NOT NULL,
    opened_at      timestamptz NOT NULL,
    is_open        boolean     NOT NULL DEFAULT true,
    first_reply_at timestamptz
);
CREATE INDEX IF NOT EXISTS botkit_handoffs_topic_idx ON botkit_handoffs (topic_id);
CREATE INDEX IF NOT EXISTS botkit_handoffs_open_idx ON botkit_handoffs (opened_at) WHERE is_open;
