-- Bearer tokens of the HTTP API and MCP endpoint (see the Postgres migration of the
-- same name): only a SHA-256 hash of each token is kept. Times are microseconds.
CREATE TABLE api_tokens (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    role        TEXT NOT NULL CHECK (role IN ('admin', 'operator', 'agent', 'viewer')),
    hash        TEXT NOT NULL UNIQUE,
    created_by  TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    revoked_at  INTEGER
);
CREATE UNIQUE INDEX api_tokens_active_name ON api_tokens (name) WHERE revoked_at IS NULL;
