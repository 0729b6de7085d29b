-- A run that continues as new records `run.continued`, carrying its whole state;
-- readers of a stream's state start at the last one. This partial index holds only
-- those events, so finding a stream's last continuation is one small probe (and
-- costs nothing for the streams that have none).
CREATE INDEX events_continued ON events (stream_type, stream_id, version)
    WHERE event_type = 'run.continued';
