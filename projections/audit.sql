CREATE TABLE {audit} (
    position        BIGINT PRIMARY KEY,
    at              BIGINT NOT NULL,
    actor           TEXT,
    stream_type     TEXT NOT NULL,
    stream_id       TEXT NOT NULL,
    event_type      TEXT NOT NULL
);
CREATE INDEX {audit}_actor ON {audit} (actor, at);
CREATE INDEX {audit}_at ON {audit} (at)
