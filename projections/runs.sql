CREATE TABLE {runs} (
    run_id          TEXT PRIMARY KEY,
    workflow        TEXT NOT NULL,
    workflow_version TEXT NOT NULL,
    status          TEXT NOT NULL,
    current_step    TEXT,
    parent_run_id   TEXT,
    started_at      BIGINT,
    finished_at     BIGINT,
    duration_ms     BIGINT,
    cost_usd        DOUBLE PRECISION NOT NULL,
    tokens          BIGINT NOT NULL,
    error           TEXT,
    error_class     TEXT,
    updated_at      BIGINT,
    waiting         TEXT,
    state           TEXT NOT NULL,
    version         BIGINT NOT NULL
);
CREATE INDEX {runs}_started ON {runs} (started_at, run_id);
CREATE INDEX {runs}_workflow ON {runs} (workflow, started_at, run_id);
CREATE INDEX {runs}_status ON {runs} (status, workflow, started_at, run_id);
CREATE TABLE {run_steps} (
    run_id          TEXT NOT NULL,
    step_id         TEXT NOT NULL,
    attempt         BIGINT NOT NULL,
    workflow        TEXT NOT NULL,
    scheduled_at    BIGINT,
    started_at      BIGINT,
    ended_at        BIGINT,
    duration_ms     BIGINT,
    outcome         TEXT,
    error_class     TEXT,
    error           TEXT,
    recovery        TEXT,
    backoff_ms      BIGINT,
    cost_usd        DOUBLE PRECISION,
    output_summary  TEXT,
    PRIMARY KEY (run_id, step_id, attempt)
);
CREATE INDEX {run_steps}_workflow ON {run_steps} (workflow, step_id);
CREATE TABLE {run_gates} (
    gate_id         TEXT PRIMARY KEY,
    run_id          TEXT NOT NULL,
    step_id         TEXT NOT NULL,
    workflow        TEXT NOT NULL,
    message         TEXT NOT NULL,
    approvers       TEXT NOT NULL,
    opened_at       BIGINT NOT NULL,
    expires_at      BIGINT,
    decision        TEXT,
    decided_by      TEXT,
    decided_at      BIGINT,
    comment         TEXT
);
CREATE INDEX {run_gates}_open ON {run_gates} (decision, opened_at);
CREATE INDEX {run_gates}_run ON {run_gates} (run_id);

CREATE TABLE {workflow_days} (
    workflow        TEXT NOT NULL,
    day             TEXT NOT NULL,
    runs            BIGINT NOT NULL,
    succeeded       BIGINT NOT NULL,
    failed          BIGINT NOT NULL,
    cancelled       BIGINT NOT NULL,
    cost_usd        DOUBLE PRECISION NOT NULL,
    max_ms          BIGINT NOT NULL,
    PRIMARY KEY (workflow, day)
);
CREATE TABLE {workflow_durations} (
    workflow        TEXT NOT NULL,
    day             TEXT NOT NULL,
    bucket          BIGINT NOT NULL,
    n               BIGINT NOT NULL,
    PRIMARY KEY (workflow, day, bucket)
);
CREATE TABLE {step_stats} (
    workflow        TEXT NOT NULL,
    step_id         TEXT NOT NULL,
    attempts        BIGINT NOT NULL,
    failures        BIGINT NOT NULL,
    retries         BIGINT NOT NULL,
    total_ms        BIGINT NOT NULL,
    timed           BIGINT NOT NULL,
    PRIMARY KEY (workflow, step_id)
);
CREATE TABLE {step_failures} (
    workflow        TEXT NOT NULL,
    step_id         TEXT NOT NULL,
    error_class     TEXT NOT NULL,
    n               BIGINT NOT NULL,
    PRIMARY KEY (workflow, step_id, error_class)
)
