CREATE TABLE {board_tasks} (
    task_id         TEXT PRIMARY KEY,
    status          TEXT NOT NULL,
    prompt          TEXT NOT NULL,
    capabilities    TEXT NOT NULL,
    repository      TEXT,
    branch          TEXT,
    agent_hint      TEXT,
    priority        BIGINT NOT NULL,
    review_required BIGINT NOT NULL,
    assignee        TEXT,
    question        TEXT,
    run_id          TEXT,
    step_id         TEXT,
    attempts        BIGINT NOT NULL,
    review_rounds   BIGINT NOT NULL,
    ending          TEXT,
    queued_at       BIGINT,
    status_since    BIGINT,
    updated_at      BIGINT,
    state           TEXT NOT NULL,
    version         BIGINT NOT NULL
);
CREATE INDEX {board_tasks}_status ON {board_tasks} (status, queued_at);
CREATE INDEX {board_tasks}_assignee ON {board_tasks} (assignee);
CREATE INDEX {board_tasks}_run ON {board_tasks} (run_id);

CREATE TABLE {agent_stats} (
    agent_id        TEXT PRIMARY KEY,
    done            BIGINT NOT NULL,
    failed          BIGINT NOT NULL,
    round_trips     BIGINT NOT NULL,
    total_task_ms   BIGINT NOT NULL,
    timed           BIGINT NOT NULL
);
CREATE TABLE {agent_columns} (
    agent_id        TEXT NOT NULL,
    status          TEXT NOT NULL,
    ms              BIGINT NOT NULL,
    PRIMARY KEY (agent_id, status)
)
