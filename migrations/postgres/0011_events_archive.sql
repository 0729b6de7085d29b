-- Retention: finished runs past a set age leave the hot `events` table for
-- `events_archive`, a table of the same shape. The archive is still the log: every
-- reader of the whole log (projection rebuilds, `awl check`, `awl events`) reads both,
-- and a stream's history is read from the archive once it is not in the hot table.
-- Archived events keep their positions, streams and versions.

CREATE TABLE events_archive (
    position      BIGINT      PRIMARY KEY,
    stream_type   TEXT        NOT NULL,
    stream_id     TEXT        NOT NULL,
    version       BIGINT      NOT NULL CHECK (version > 0),
    event_type    TEXT        NOT NULL,
    event_version INTEGER     NOT NULL CHECK (event_version > 0),
    payload       JSONB       NOT NULL,
    metadata      JSONB       NOT NULL DEFAULT '{}'::jsonb,
    recorded_at   TIMESTAMPTZ NOT NULL,
    archived_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT events_archive_stream_version UNIQUE (stream_type, stream_id, version)
);

-- The archive is append-only too.
CREATE TRIGGER events_archive_append_only_rows
    BEFORE UPDATE OR DELETE ON events_archive
    FOR EACH ROW EXECUTE FUNCTION awl_events_are_append_only();
CREATE TRIGGER events_archive_append_only_truncate
    BEFORE TRUNCATE ON events_archive
    FOR EACH STATEMENT EXECUTE FUNCTION awl_events_are_append_only();

-- An event may leave the hot table only once the archive holds it, unchanged: the
-- one delete the log allows is a move.
CREATE FUNCTION awl_events_move_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND EXISTS (
        SELECT 1 FROM events_archive a
         WHERE a.position = OLD.position AND a.stream_type = OLD.stream_type
           AND a.stream_id = OLD.stream_id AND a.version = OLD.version
           AND a.payload = OLD.payload)
    THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'the awl event log is append-only: % on events is not allowed (an event leaves it only into events_archive)', TG_OP
        USING ERRCODE = 'restrict_violation';
END;
$$;

DROP TRIGGER events_append_only_rows ON events;
CREATE TRIGGER events_append_only_rows
    BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION awl_events_move_only();
