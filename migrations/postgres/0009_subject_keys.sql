-- Keys of sealed values (src/vault): one per data subject, and one per run with secret
-- inputs. They live beside the log, never in it: deleting a subject's key (`awl forget`)
-- erases every value sealed under it without touching an event (crypto-shredding).
-- Only a hash of the subject names a key. Postgres frees a deleted row's bytes at the
-- next VACUUM; backups taken before keep the key until they expire.
CREATE TABLE subject_keys (
    key_id      TEXT PRIMARY KEY,
    key         BYTEA NOT NULL CHECK (length(key) = 32),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Who forgot which key, and when (the audit of erasures; no subject, no key).
CREATE TABLE forgotten_subjects (
    key_id        TEXT NOT NULL,
    forgotten_by  TEXT NOT NULL,
    forgotten_at  TIMESTAMPTZ NOT NULL
);
CREATE INDEX forgotten_subjects_key ON forgotten_subjects (key_id);
