-- Ten events of one stream per transaction.
INSERT INTO raw_events (stream_type, stream_id, version, event_type, event_version, payload, metadata)
SELECT 'run', s.id, v, 'bench.appended', 1,
       '{"step": "build", "attempt": 1, "output": {"ok": true}}', '{"actor": "bench"}'
FROM (SELECT gen_random_uuid()::text AS id) s, generate_series(1, 10) AS v;
