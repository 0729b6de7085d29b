CREATE TABLE {chat_messages} (
    stream_id       TEXT PRIMARY KEY,
    platform        TEXT NOT NULL,
    channel_id      TEXT NOT NULL,
    message_id      TEXT,
    notice          TEXT NOT NULL,
    channel         TEXT NOT NULL,
    open            BIGINT NOT NULL,
    posted_at       BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL
);
CREATE INDEX {chat_messages}_message ON {chat_messages} (platform, channel_id, message_id);
CREATE INDEX {chat_messages}_open ON {chat_messages} (open, platform)
