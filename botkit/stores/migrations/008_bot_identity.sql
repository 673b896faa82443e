-- The bot whose data this database holds (one row): receivers and workers of another bot
-- refuse to start on it, any number of this bot's processes share it.

CREATE TABLE IF NOT EXISTS botkit_bot (
    only_row    boolean     PRIMARY KEY DEFAULT true CHECK (only_row),
    bot_id      bigint      NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);
