-- One event per transaction.
INSERT INTO raw_events (stream_type, stream_id, version, event_type, event_version, payload, metadata)
VALUES ('run', gen_random_uuid()::text, 1, 'bench.appended', 1,
        '{"step": "build", "attempt": 1, "output": {"ok": true}}', '{"actor": "bench"}');
