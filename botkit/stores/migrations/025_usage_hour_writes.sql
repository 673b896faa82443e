-- Of the cache writes, those kept an hour (2x the input price, not 1.25x): botkit picks the
-- 1-hour lifetime for conversations that pause (BOTKIT_CACHE_TTL=auto), and `usage`, budgets
-- and reports must price them as the API bills them.

ALTER TABLE botkit_model_usage
    ADD COLUMN IF NOT EXISTS cache_write_1h_tokens bigint NOT NULL DEFAULT 0
        CHECK (cache_write_1h_tokens >= 0);
