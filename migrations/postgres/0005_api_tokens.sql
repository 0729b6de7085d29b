-- Bearer tokens of the HTTP API and MCP endpoint. Only a SHA-256 hash of each token
-- is kept; the token itself is shown once, when it is created. A revoked token stays
-- (for the audit of who could do what) and a new one may take its name.
CREATE TABLE api_tokens (
    id          UUID PRIMARY KEY,
    name        TEXT NOT NULL,
    role        TEXT NOT NULL CHECK (role IN ('admin', 'operator', 'agent', 'viewer')),
    hash        TEXT NOT NULL UNIQUE,
    created_by  TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    revoked_at  TIMESTAMPTZ
);
CREATE UNIQUE INDEX api_tokens_active_name ON api_tokens (name) WHERE revoked_at IS NULL;
