-- The state of each projection (read model): the version of its code, the generation
-- of its tables (`name_gN`, behind a view `name`) and its checkpoint, the last global
-- position applied, moved in the same transaction as the projection's writes.
CREATE TABLE projection_state (
    name        TEXT PRIMARY KEY,
    version     INTEGER NOT NULL,
    generation  INTEGER NOT NULL,
    position    BIGINT NOT NULL,
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
