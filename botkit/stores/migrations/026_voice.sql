-- Voice (#46): the seconds of audio transcribed and the characters spoken, per user, day and
-- model beside the tokens (so `python -m botkit usage` prices them), and each conversation's
-- `/voice` choice (off, mirror, always), under its owner (a private conversation's user, whose
-- erasure takes it too).

ALTER TABLE botkit_model_usage
    ADD COLUMN IF NOT EXISTS audio_seconds bigint NOT NULL DEFAULT 0 CHECK (audio_seconds >= 0),
    ADD COLUMN IF NOT EXISTS spoken_chars  bigint NOT NULL DEFAULT 0 CHECK (spoken_chars >= 0);

CREATE TABLE IF NOT EXISTS botkit_voice_modes (
    user_id      bigint      NOT NULL,
    conversation text        NOT NULL,
    mode         text        NOT NULL CHECK (mode IN ('off', 'mirror', 'always')),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, conversation)
);
