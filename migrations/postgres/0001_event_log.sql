-- The event log: the only authoritative data in awl.
--
-- Appends are serialised by the row lock on event_log_head (taken by
-- `SELECT ... FOR UPDATE` before positions are assigned and held until commit), so
-- positions are dense and commit in order: a reader tailing `position > checkpoint`
-- never skips an event that commits late. See ARCHITECTURE.md, "Gap-free tailing".

CREATE TABLE events (
    position      BIGINT      PRIMARY KEY,
    stream_type   TEXT        NOT NULL,
    stream_id     TEXT        NOT NULL,
    version       BIGINT      NOT NULL CHECK (version > 0),
    event_type    TEXT        NOT NULL,
    event_version INTEGER     NOT NULL CHECK (event_version > 0),
    payload       JSONB       NOT NULL,
    metadata      JSONB       NOT NULL DEFAULT '{}'::jsonb,
    recorded_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT events_stream_version UNIQUE (stream_type, stream_id, version),
    CONSTRAINT events_position_positive CHECK (position > 0)
);

-- One row: the position of the last committed event.
CREATE TABLE event_log_head (
    singleton BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (singleton),
    position  BIGINT  NOT NULL
);
INSERT INTO event_log_head (singleton, position) VALUES (TRUE, 0);

-- Events are never updated or deleted.
CREATE FUNCTION awl_events_are_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the awl event log is append-only: % on events is not allowed', TG_OP
        USING ERRCODE = 'restrict_violation';
END;
$$;

CREATE TRIGGER events_append_only_rows
    BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION awl_events_are_append_only();

CREATE TRIGGER events_append_only_truncate
    BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION awl_events_are_append_only();
