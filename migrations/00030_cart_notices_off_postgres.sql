-- +goose Up

-- The cart caches' notices leave PostgreSQL: every API process announces its committed cart
-- writes on the event broker (cart.Notices) instead of a pg_notify in each write's transaction,
-- whose commit-time lock is one for the whole cluster and made concurrent cart writes commit one
-- at a time (docs/benchmarks.md, cart section). API processes of releases before this one,
-- which listen on cart_changed, hear nothing from now on: replace them all in one step.
DROP TRIGGER carts_truncated ON carts;
DROP TRIGGER carts_changed ON carts;
DROP FUNCTION cart_changed();

-- +goose Down
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
