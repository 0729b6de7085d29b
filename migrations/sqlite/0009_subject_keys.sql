-- Keys of sealed values (see the Postgres migration of the same name). Times are
-- microseconds. SQLite overwrites a deleted row's bytes only with secure_delete,
-- which the store turns on.
CREATE TABLE subject_keys (
    key_id      TEXT PRIMARY KEY,
    key         BLOB NOT NULL CHECK (length(key) = 32),
    created_at  INTEGER NOT NULL
);

CREATE TABLE forgotten_subjects (
    key_id        TEXT NOT NULL,
    forgotten_by  TEXT NOT NULL,
    forgotten_at  INTEGER NOT NULL
);
CREATE INDEX forgotten_subjects_key ON forgotten_subjects (key_id);
