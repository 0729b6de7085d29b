-- Rate limits (see the Postgres migration of the same name). Times are microseconds
-- since the Unix epoch.
CREATE TABLE rate_buckets (
    bucket TEXT PRIMARY KEY,
    tat    INTEGER NOT NULL
) STRICT;
