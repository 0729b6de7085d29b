-- When each unfinished run must be looked at next, and which worker holds it (see the
-- Postgres migration of the same name). Times are microseconds since the Unix epoch.
CREATE TABLE run_wakeups (
    run_id      TEXT PRIMARY KEY,
    due_at      INTEGER,
    lease_owner TEXT,
    lease_until INTEGER
) STRICT;

CREATE INDEX run_wakeups_due ON run_wakeups (due_at) WHERE due_at IS NOT NULL;
