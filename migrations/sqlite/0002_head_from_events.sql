-- The head is max(position), read inside the `BEGIN IMMEDIATE` append transaction
-- (one index probe), so the head row of 0001 is no longer kept.

DROP TABLE event_log_head;
