-- Long-term memory (botkit.memory): each conversation's memory files, written by the model
-- through the memory tool. `conversation` is a private conversation's user id or a group's key.
CREATE TABLE IF NOT EXISTS botkit_memory (
    conversation text        NOT NULL,
    path         text        NOT NULL,
    content      text        NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (conversation, path)
);

