-- A fencing token on every claim of a run.
--
-- A worker paused past its lease (SIGSTOP, a long pause, a partition) could come back
-- and append what it decided after another worker had claimed the run and started
-- its attempt again. Every claim now takes the next `lease_epoch`; a worker's commit
-- locks the rows of the runs it writes for and checks that each still carries the
-- epoch it claimed, and a release or renewal matches the epoch too, so a stale
-- holder's writes are refused.
ALTER TABLE run_wakeups ADD COLUMN lease_epoch BIGINT NOT NULL DEFAULT 0;
