-- When each agent last called any awl process (see the Postgres migration of the same
-- name). Microseconds.
CREATE TABLE agent_presence (
    agent_id   TEXT PRIMARY KEY,
    last_seen  INTEGER NOT NULL
);
