-- Flow control: priorities and concurrency limits (see the Postgres migration of the
-- same name). Times are microseconds since the Unix epoch.
ALTER TABLE run_wakeups ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE run_wakeups ADD COLUMN waiting_for TEXT;
ALTER TABLE run_wakeups ADD COLUMN waiting_since INTEGER;
ALTER TABLE run_wakeups ADD COLUMN fair_key TEXT;

CREATE INDEX run_wakeups_claim ON run_wakeups (priority DESC, due_at) WHERE due_at IS NOT NULL;
CREATE INDEX run_wakeups_waiting ON run_wakeups (waiting_for) WHERE waiting_for IS NOT NULL;

CREATE TABLE flow_scopes (
    scope TEXT PRIMARY KEY,
    held  INTEGER NOT NULL DEFAULT 0 CHECK (held >= 0)
) STRICT;

CREATE TABLE flow_holders (
    run_id TEXT NOT NULL,
    scope  TEXT NOT NULL,
    PRIMARY KEY (run_id, scope)
) STRICT;
