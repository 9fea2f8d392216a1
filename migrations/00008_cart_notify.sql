-- +goose Up

-- Every change of a carts row announces itself on the channel cart_changed, inside the transaction
-- of the change: PostgreSQL delivers a notification at commit, and only if the transaction
-- commits. The API processes keep an in-process cache of cart documents (cart.Cache) and drop what
-- these announcements make stale. A trigger rather than a pg_notify in each query, so that no write
-- path can forget it: the API's writes and merges, the janitor in the worker, a fix made by hand.
--
-- Payload:
--   '<cart id> <version>'  the row now holds that version (an insert, or an update that raised it):
--                          a cached copy of that version or newer is still right;
--   '<cart id>'            the row was deleted, or changed without a new version: drop the cart;
--   '*'                    the table was truncated: drop every cart.
-- +goose StatementBegin
CREATE FUNCTION cart_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        PERFORM pg_notify('cart_changed', '*');
    ELSIF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('cart_changed', OLD.id);
    ELSIF TG_OP = 'INSERT' THEN
        PERFORM pg_notify('cart_changed', NEW.id || ' ' || NEW.version);
    ELSE
        IF OLD.id IS DISTINCT FROM NEW.id THEN
            PERFORM pg_notify('cart_changed', OLD.id);
        END IF;
        IF NEW.version > OLD.version THEN
            PERFORM pg_notify('cart_changed', NEW.id || ' ' || NEW.version);
        ELSE
            PERFORM pg_notify('cart_changed', NEW.id);
        END IF;
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER carts_changed AFTER INSERT OR UPDATE OR DELETE ON carts
    FOR EACH ROW EXECUTE FUNCTION cart_changed();
CREATE TRIGGER carts_truncated AFTER TRUNCATE ON carts
    FOR EACH STATEMENT EXECUTE FUNCTION cart_changed();

-- +goose Down
DROP TRIGGER carts_truncated ON carts;
DROP TRIGGER carts_changed ON carts;
DROP FUNCTION cart_changed();
