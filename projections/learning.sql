CREATE TABLE {tool_calls} (
    position     BIGINT PRIMARY KEY,
    scope        TEXT NOT NULL,
    session      TEXT NOT NULL,
    actor        TEXT NOT NULL,
    tool         TEXT NOT NULL,
    shape        TEXT NOT NULL,
    args         TEXT NOT NULL,
    has_output   BIGINT NOT NULL,
    success      BIGINT NOT NULL,
    duration_ms  BIGINT NOT NULL,
    at           BIGINT NOT NULL
);
CREATE INDEX {tool_calls}_session ON {tool_calls} (session, position);
CREATE INDEX {tool_calls}_scope ON {tool_calls} (scope, at);

-- The recent calls of each session in progress (deleted when its task or run ends).
CREATE TABLE {tool_tails} (
    session      TEXT PRIMARY KEY,
    calls        TEXT NOT NULL
);

CREATE TABLE {tool_patterns} (
    pattern_key  TEXT PRIMARY KEY,
    scope        TEXT NOT NULL,
    signature    TEXT NOT NULL,
    length       BIGINT NOT NULL,
    executions   BIGINT NOT NULL,
    successes    BIGINT NOT NULL,
    sessions     BIGINT NOT NULL,
    last_session TEXT NOT NULL,
    confidence   DOUBLE PRECISION NOT NULL,
    first_at     BIGINT NOT NULL,
    last_at      BIGINT NOT NULL,
    span_ms      BIGINT NOT NULL,
    -- tools, args, flows, evidence (JSON): written only when they change
    detail       TEXT NOT NULL DEFAULT '',
    -- the log position of the call that last changed `detail`: equal positions mean
    -- equal details (the learner drafts a file again only when it moved)
    detailed     BIGINT NOT NULL DEFAULT 0,
    -- the log position of the batch that last wrote the row
    changed      BIGINT NOT NULL DEFAULT 0
);
-- Only columns that never change are indexed: an update that changes no indexed
-- column can stay on its page (Postgres' HOT update, with the room the projection
-- leaves in each page), so the rows rewritten on every occurrence do not grow the
-- table by a version each. The learner's rounds read `changed` and `successes` by
-- scanning this table, which holds one row per pattern.
CREATE INDEX {tool_patterns}_scope ON {tool_patterns} (scope);

CREATE TABLE {tool_runs} (
    run_id       TEXT PRIMARY KEY,
    state        TEXT NOT NULL
);
