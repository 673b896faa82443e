-- Token usage per user, UTC day and model, by kind, recorded for every user (budgets or not),
-- so `python -m botkit usage` can price each kind at the model's own rates.

CREATE TABLE IF NOT EXISTS botkit_model_usage (
    user_id                bigint NOT NULL,
    day                    date   NOT NULL,
    model                  text   NOT NULL,
    input_tokens           bigint NOT NULL DEFAULT 0 CHECK (input_tokens >= 0),
    output_tokens          bigint NOT NULL DEFAULT 0 CHECK (output_tokens >= 0),
    cache_read_tokens      bigint NOT NULL DEFAULT 0 CHECK (cache_read_tokens >= 0),
    cache_creation_tokens  bigint NOT NULL DEFAULT 0 CHECK (cache_creation_tokens >= 0),
    PRIMARY KEY (user_id, day, model)
);

CREATE INDEX IF NOT EXISTS botkit_model_usage_day_idx ON botkit_model_usage (day);
