-- Changes heard as they happen (#52): a process keeps what it read of conversations'
-- approvals and choices, and of who paid for a plan, in memory, and needs to hear when anyone
-- changes them (another worker, `python -m botkit users`, an erasure). Every write or delete of
-- a row notifies the `botkit_changes` channel with "<table> <key>", the key being the column
-- the trigger names (the conversation, or the user); botkit.stores.changes listens.

CREATE OR REPLACE FUNCTION botkit_note_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        PERFORM pg_notify('botkit_changes', TG_TABLE_NAME || ' ' || (to_jsonb(OLD) ->> TG_ARGV[0]));
    END IF;
    IF TG_OP <> 'DELETE' THEN
        PERFORM pg_notify('botkit_changes', TG_TABLE_NAME || ' ' || (to_jsonb(NEW) ->> TG_ARGV[0]));
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS botkit_approvals_changed ON botkit_approvals;
CREATE TRIGGER botkit_approvals_changed AFTER INSERT OR UPDATE OR DELETE ON botkit_approvals
    FOR EACH ROW EXECUTE FUNCTION botkit_note_change('conversation');
DROP TRIGGER IF EXISTS botkit_held_messages_changed ON botkit_held_messages;
CREATE TRIGGER botkit_held_messages_changed
    AFTER INSERT OR UPDATE OR DELETE ON botkit_held_messages
    FOR EACH ROW EXECUTE FUNCTION botkit_note_change('conversation');
DROP TRIGGER IF EXISTS botkit_choices_changed ON botkit_choices;
CREATE TRIGGER botkit_choices_changed AFTER INSERT OR UPDATE OR DELETE ON botkit_choices
    FOR EACH ROW EXECUTE FUNCTION botkit_note_change('conversation');
DROP TRIGGER IF EXISTS botkit_payments_changed ON botkit_payments;
CREATE TRIGGER botkit_payments_changed AFTER INSERT OR UPDATE OR DELETE ON botkit_payments
    FOR EACH ROW EXECUTE FUNCTION botkit_note_change('user_id');
DROP TRIGGER IF EXISTS botkit_handoffs_changed ON botkit_handoffs;
CREATE TRIGGER botkit_handoffs_changed AFTER INSERT OR UPDATE OR DELETE ON botkit_handoffs
    FOR EACH ROW EXECUTE FUNCTION botkit_note_change('user_id');
