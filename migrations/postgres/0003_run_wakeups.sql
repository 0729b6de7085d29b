-- When each unfinished run must be looked at next, and which worker holds it.
--
-- Not authoritative: it is derived from the run streams (every unfinished run has a
-- row; its due time is the engine's next wake-up) and can be rebuilt from the log.
-- Rows are written in the same transaction as the events that cause them, so a
-- wake-up is never lost; workers claim due rows with FOR UPDATE SKIP LOCKED and hold
-- them under a lease, so several workers share one database and a dead worker's runs
-- are picked up when its lease runs out.
CREATE TABLE run_wakeups (
    run_id      TEXT PRIMARY KEY,
    -- NULL: nothing is due; an outside event (a gate decision, a task or child run
    -- ending) sets it.
    due_at      TIMESTAMPTZ,
    lease_owner TEXT,
    lease_until TIMESTAMPTZ
);

CREATE INDEX run_wakeups_due ON run_wakeups (due_at) WHERE due_at IS NOT NULL;
