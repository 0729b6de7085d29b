CREATE TABLE {solves} (
    solve_id        TEXT PRIMARY KEY,
    agent           TEXT NOT NULL,
    model           TEXT NOT NULL,
    workflow        TEXT NOT NULL,
    run_id          TEXT,
    task_id         TEXT,
    started_by      TEXT NOT NULL,
    status          TEXT NOT NULL,
    started_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    ended_at        BIGINT,
    model_calls     BIGINT NOT NULL,
    tool_calls      BIGINT NOT NULL,
    tokens_in       BIGINT NOT NULL,
    tokens_out      BIGINT NOT NULL,
    cost_usd        DOUBLE PRECISION NOT NULL,
    total_ms        BIGINT,
    error_class     TEXT,
    version         BIGINT NOT NULL
);
CREATE INDEX {solves}_started ON {solves} (started_at, solve_id);
CREATE INDEX {solves}_status ON {solves} (status, updated_at);
CREATE TABLE {model_use} (
    day             TEXT NOT NULL,
    model           TEXT NOT NULL,
    agent           TEXT NOT NULL,
    workflow        TEXT NOT NULL,
    solves          BIGINT NOT NULL,
    finished        BIGINT NOT NULL,
    failed          BIGINT NOT NULL,
    calls           BIGINT NOT NULL,
    retries         BIGINT NOT NULL,
    tokens_in       BIGINT NOT NULL,
    tokens_out      BIGINT NOT NULL,
    cost_usd        DOUBLE PRECISION NOT NULL,
    latency_ms      BIGINT NOT NULL,
    max_latency_ms  BIGINT NOT NULL,
    PRIMARY KEY (day, model, agent, workflow)
);
CREATE TABLE {model_latency} (
    day             TEXT NOT NULL,
    model           TEXT NOT NULL,
    agent           TEXT NOT NULL,
    workflow        TEXT NOT NULL,
    bucket          BIGINT NOT NULL,
    n               BIGINT NOT NULL,
    PRIMARY KEY (day, model, agent, workflow, bucket)
)
