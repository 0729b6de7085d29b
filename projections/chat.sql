CREATE TABLE {chat_messages} (
    platform        TEXT NOT NULL,
    channel_id      TEXT NOT NULL,
    message_id      TEXT NOT NULL,
    notice          TEXT NOT NULL,
    channel         TEXT NOT NULL,
    posted_at       BIGINT NOT NULL,
    PRIMARY KEY (platform, channel_id, message_id)
)
