-- Retention (see the Postgres migration of the same name): finished runs past a set
-- age move to `events_archive`, which every reader of the whole log reads too.

CREATE TABLE events_archive (
    position      INTEGER PRIMARY KEY CHECK (position > 0),
    stream_type   TEXT    NOT NULL,
    stream_id     TEXT    NOT NULL,
    version       INTEGER NOT NULL CHECK (version > 0),
    event_type    TEXT    NOT NULL,
    event_version INTEGER NOT NULL CHECK (event_version > 0),
    payload       TEXT    NOT NULL,
    metadata      TEXT    NOT NULL DEFAULT '{}',
    recorded_at   INTEGER NOT NULL,
    archived_at   INTEGER NOT NULL,
    UNIQUE (stream_type, stream_id, version)
) STRICT;

CREATE TRIGGER events_archive_no_update BEFORE UPDATE ON events_archive
BEGIN
    SELECT RAISE(ABORT, 'the awl event log is append-only: UPDATE on events_archive is not allowed');
END;

CREATE TRIGGER events_archive_no_delete BEFORE DELETE ON events_archive
BEGIN
    SELECT RAISE(ABORT, 'the awl event log is append-only: DELETE on events_archive is not allowed');
END;

-- An event may leave the hot table only once the archive holds it, unchanged.
DROP TRIGGER events_no_delete;
CREATE TRIGGER events_no_delete BEFORE DELETE ON events
WHEN NOT EXISTS (
    SELECT 1 FROM events_archive a
     WHERE a.position = OLD.position AND a.stream_type = OLD.stream_type
       AND a.stream_id = OLD.stream_id AND a.version = OLD.version
       AND a.payload = OLD.payload)
BEGIN
    SELECT RAISE(ABORT, 'the awl event log is append-only: DELETE on events is not allowed (an event leaves it only into events_archive)');
END;
