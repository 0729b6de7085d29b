CREATE TABLE {proposals} (
    proposal_id  TEXT PRIMARY KEY,
    workflow     TEXT NOT NULL,
    scope        TEXT NOT NULL,
    status       TEXT NOT NULL,
    confidence   DOUBLE PRECISION NOT NULL,
    successes    BIGINT NOT NULL,
    executions   BIGINT NOT NULL,
    tools        TEXT NOT NULL,
    evidence     TEXT NOT NULL,
    definition   TEXT NOT NULL,
    mean_ms      BIGINT,
    proposed_at  BIGINT NOT NULL,
    decided_by   TEXT,
    decided_at   BIGINT,
    reason       TEXT,
    version      TEXT,
    shared       BIGINT NOT NULL
);
CREATE INDEX {proposals}_scope ON {proposals} (scope, status, proposed_at);

CREATE TABLE {workflow_tools} (
    workflow     TEXT PRIMARY KEY,
    version      TEXT NOT NULL,
    learned      BIGINT NOT NULL,
    scope        TEXT,
    shared       BIGINT NOT NULL,
    confidence   DOUBLE PRECISION NOT NULL,
    tools        TEXT NOT NULL,
    description  TEXT NOT NULL,
    retired      BIGINT NOT NULL
);
