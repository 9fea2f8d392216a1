-- +goose Up

-- The trace an event belongs to: the W3C trace context of the change that wrote it, so that the
-- relay's publish and its consumers continue that trace. The product sets the two settings
-- (checkout.traceparent, checkout.tracestate) local to a transaction it traces and samples; one
-- trigger copies them into every event the transaction writes, whichever trigger or statement
-- writes it. NULL: the change was not traced (or not sampled), and its events start no trace.
ALTER TABLE outbox_events ADD COLUMN traceparent TEXT, ADD COLUMN tracestate TEXT;

-- +goose StatementBegin
CREATE FUNCTION outbox_trace_context() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- A setting once set in a session reads '' after its transaction: NULLIF makes that NULL.
    NEW.traceparent := COALESCE(NEW.traceparent, NULLIF(current_setting('checkout.traceparent', true), ''));
    NEW.tracestate := COALESCE(NEW.tracestate, NULLIF(current_setting('checkout.tracestate', true), ''));
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER outbox_trace_context BEFORE INSERT ON outbox_events
    FOR EACH ROW EXECUTE FUNCTION outbox_trace_context();

-- +goose Down
DROP TRIGGER outbox_trace_context ON outbox_events;
DROP FUNCTION outbox_trace_context();
ALTER TABLE outbox_events DROP COLUMN traceparent, DROP COLUMN tracestate;
