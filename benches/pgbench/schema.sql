-- The raw limit: the same row shape as awl's events table, with nothing awl adds
-- (no head lock, no version check, no NOTIFY). Positions come from a bigserial.
DROP TABLE IF EXISTS raw_events;
CREATE TABLE raw_events (
    position      BIGSERIAL   PRIMARY KEY,
    stream_type   TEXT        NOT NULL,
    stream_id     TEXT        NOT NULL,
    version       BIGINT      NOT NULL,
    event_type    TEXT        NOT NULL,
    event_version INTEGER     NOT NULL,
    payload       JSONB       NOT NULL,
    metadata      JSONB       NOT NULL DEFAULT '{}'::jsonb,
    recorded_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (stream_type, stream_id, version)
);
