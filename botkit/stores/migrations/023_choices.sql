-- Each conversation's choices (botkit.choices): the model and persona it talks with and its
-- user's standing instructions. `conversation` is a private conversation's user id or a
-- group's key; `user_id` is whoever chose last (so `users export` and `users forget` find it).
CREATE TABLE IF NOT EXISTS botkit_choices (
    conversation text        PRIMARY KEY,
    user_id      bigint      NOT NULL,
    model        text,
    persona      text,
    instructions text,
    updated_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS botkit_choices_user_idx ON botkit_choices (user_id);
