-- The event log: the only authoritative data in awl (embedded store).
--
-- SQLite has one writer at a time, and awl writes through `BEGIN IMMEDIATE`
-- transactions, so positions are assigned and committed in order: tailing
-- `position > checkpoint` is gap-free. Payload and metadata are JSON text.

CREATE TABLE events (
    position      INTEGER PRIMARY KEY CHECK (position > 0),
    stream_type   TEXT    NOT NULL,
    stream_id     TEXT    NOT NULL,
    version       INTEGER NOT NULL CHECK (version > 0),
    event_type    TEXT    NOT NULL,
    event_version INTEGER NOT NULL CHECK (event_version > 0),
    payload       TEXT    NOT NULL,
    metadata      TEXT    NOT NULL DEFAULT '{}',
    recorded_at   INTEGER NOT NULL, -- microseconds since the Unix epoch, UTC
    UNIQUE (stream_type, stream_id, version)
) STRICT;

CREATE TABLE event_log_head (
    singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
    position  INTEGER NOT NULL
) STRICT;
INSERT INTO event_log_head (singleton, position) VALUES (1, 0);

-- Events are never updated or deleted.
CREATE TRIGGER events_no_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'the awl event log is append-only: UPDATE on events is not allowed');
END;

CREATE TRIGGER events_no_delete BEFORE DELETE ON events
BEGIN
    SELECT RAISE(ABORT, 'the awl event log is append-only: DELETE on events is not allowed');
END;
