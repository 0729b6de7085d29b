-- Rate limits: one row per bucket (`rate:NAME`, `rate:NAME:key:VALUE`) holding its
-- theoretical arrival time (GCRA, `domain/rate.rs`). A worker reserves a token before
-- an attempt by locking the rows of the attempt's buckets (in order of name), moving
-- each TAT past the time the call may go, and committing: so every worker and server
-- shares one budget per bucket. A bucket whose TAT has passed holds nothing, so rows
-- are state, not history: losing them only forgets recent calls.
CREATE TABLE rate_buckets (
    bucket TEXT PRIMARY KEY,
    tat    TIMESTAMPTZ NOT NULL
);
