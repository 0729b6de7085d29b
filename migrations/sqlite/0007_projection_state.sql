-- The state of each projection (see the Postgres migration of the same name).
CREATE TABLE projection_state (
    name        TEXT PRIMARY KEY,
    version     INTEGER NOT NULL,
    generation  INTEGER NOT NULL,
    position    INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL DEFAULT 0
);
