-- A fencing token on every claim of a run (see the Postgres migration of the same
-- name): a claim takes the next `lease_epoch`, and a worker's commit, release or
-- renewal only counts while the row still carries the epoch it claimed.
ALTER TABLE run_wakeups ADD COLUMN lease_epoch INTEGER NOT NULL DEFAULT 0;
