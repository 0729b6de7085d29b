-- When each agent last called any awl server. Heartbeats are not events (they would
-- flood the log); this row lets every server see calls made to the others before it
-- requeues an agent's task as lost. Losing the table loses nothing but recency.
CREATE TABLE agent_presence (
    agent_id   TEXT PRIMARY KEY,
    last_seen  TIMESTAMPTZ NOT NULL
);
