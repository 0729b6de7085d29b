-- See the Postgres migration of the same name: the continuations of runs, indexed
-- on their own so a stream's last one is found in one small probe.
CREATE INDEX events_continued ON events (stream_type, stream_id, version)
    WHERE event_type = 'run.continued';
