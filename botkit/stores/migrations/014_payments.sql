-- Plans bought with Telegram Stars (#33). One row per payment, keyed by Telegram's
-- telegram_payment_charge_id: a successful_payment delivered twice, retried after a crash, or
-- taken by two workers at once inserts one row, so the plan is granted exactly once. What the
-- plan granted is copied in (its budget and role), so a plan changed later keeps its buyers'
-- terms; a refund sets refunded_at and the grant stops counting.
CREATE TABLE IF NOT EXISTS botkit_payments (
    charge_id    text        PRIMARY KEY,
    user_id      bigint      NOT NULL,
    plan_id      text        NOT NULL,
    stars        integer     NOT NULL CHECK (stars >= 0),
    daily_tokens bigint      NOT NULL CHECK (daily_tokens > 0),
    role         text,
    subscription boolean     NOT NULL DEFAULT false,
    paid_at      timestamptz NOT NULL,
    ends_at      timestamptz NOT NULL,
    refunded_at  timestamptz
);
CREATE INDEX IF NOT EXISTS botkit_payments_user_idx ON botkit_payments (user_id, ends_at);
