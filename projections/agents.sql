CREATE TABLE {agents} (
    agent_id        TEXT PRIMARY KEY,
    status          TEXT NOT NULL,
    capabilities    TEXT NOT NULL,
    repository      TEXT,
    branch          TEXT,
    registered_at   BIGINT,
    updated_at      BIGINT,
    state           TEXT NOT NULL,
    version         BIGINT NOT NULL
)
