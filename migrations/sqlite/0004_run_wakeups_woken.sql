-- A run woken while a worker holds it (see the Postgres migration of the same name):
-- `wake_run` sets `woken`, a claim clears it, a release of a woken row makes it due at
-- once. 0 or 1.
ALTER TABLE run_wakeups ADD COLUMN woken INTEGER NOT NULL DEFAULT 0;
