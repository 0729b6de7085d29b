-- Where each log follower with effects outside awl (the chat notifier) has got to:
-- it reads on from here after a restart. What it sent is in the log (`chat`
-- streams), so reading an event twice sends nothing twice. One process at a time
-- follows (the holder of the lease: owner until lease_until, microseconds), so two
-- servers do not both post the same message.
CREATE TABLE follower_checkpoints (
    name        TEXT PRIMARY KEY,
    position    BIGINT NOT NULL,
    owner       TEXT,
    lease_until BIGINT
);
-- Chat users mapped to awl principals (`awl chat users`): an unmapped user's clicks
-- and commands are refused; a mapped one acts with the role given here.
CREATE TABLE chat_users (
    platform   TEXT NOT NULL,
    user_id    TEXT NOT NULL,
    principal  TEXT NOT NULL,
    role       TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (platform, user_id)
);
