-- Changes heard as they happen (#52): a process keeps what it read of a conversation's
-- approvals and choices in memory, and needs to hear when anyone changes them (another
-- worker, `python -m botkit users`, an erasure). Every write or delete of a row notifies the
-- `botkit_changes` channel with "<table> <conversation>"; botkit.stores.changes listens.

CREATE OR REPLACE FUNCTION botkit_note_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        PERFORM pg_notify('botkit_changes', TG_TABLE_NAME || ' ' || OLD.conversation);
    END IF;
    IF TG_OP <> 'DELETE' THEN
        PERFORM pg_notify('botkit_changes', TG_TABLE_NAME || ' ' || NEW.conversation);
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS botkit_approvals_changed ON botkit_approvals;
CREATE TRIGGER botkit_approvals_changed AFTER INSERT OR UPDATE OR DELETE ON botkit_approvals
    FOR EACH ROW EXECUTE FUNCTION botkit_note_change();
DROP TRIGGER IF EXISTS botkit_held_messages_changed ON botkit_held_messages;
CREATE TRIGGER botkit_held_messages_changed
    AFTER INSERT OR UPDATE OR DELETE ON botkit_held_messages
    FOR EACH ROW EXECUTE FUNCTION botkit_note_change();
DROP TRIGGER IF EXISTS botkit_choices_changed ON botkit_choices;
CREATE TRIGGER botkit_choices_changed AFTER INSERT OR UPDATE OR DELETE ON botkit_choices
    FOR EACH ROW EXECUTE FUNCTION botkit_note_change();
