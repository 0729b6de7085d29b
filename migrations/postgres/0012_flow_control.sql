-- Flow control: priorities and concurrency limits, enforced in the database so they
-- hold across every worker and server.
--
-- `priority` orders claims among due runs (higher first). A run started with
-- concurrency slots (recorded in its `run.started`) is admitted by the worker that
-- claims it: in the transaction that appends `run.admitted`, it takes one slot of
-- each scope (`flow_scopes.held` < its limit, the row locked for the check) and
-- records it in `flow_holders`; a finished run's slots are given back in the
-- transaction that drops its wake-up row. A run that finds a scope full waits on it
-- (`waiting_for`, since `waiting_since`) and is woken when a slot frees, the waiters
-- of a scope chosen by priority, then by how few slots their key holds (a fair share
-- between keys), then by age. Derived from the log like the rest of `run_wakeups`.
ALTER TABLE run_wakeups ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE run_wakeups ADD COLUMN waiting_for TEXT;
ALTER TABLE run_wakeups ADD COLUMN waiting_since TIMESTAMPTZ;
ALTER TABLE run_wakeups ADD COLUMN fair_key TEXT;

CREATE INDEX run_wakeups_claim ON run_wakeups (priority DESC, due_at) WHERE due_at IS NOT NULL;
CREATE INDEX run_wakeups_waiting ON run_wakeups (waiting_for) WHERE waiting_for IS NOT NULL;

CREATE TABLE flow_scopes (
    scope TEXT PRIMARY KEY,
    held  INTEGER NOT NULL DEFAULT 0 CHECK (held >= 0)
);

CREATE TABLE flow_holders (
    run_id TEXT NOT NULL,
    scope  TEXT NOT NULL,
    PRIMARY KEY (run_id, scope)
);
