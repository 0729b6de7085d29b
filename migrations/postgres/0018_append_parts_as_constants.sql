-- awl_append's version lookups name the partitions a stream can be in as constants.
--
-- 0016 gave each lookup the range of parts a stream's type allows as
-- `part >= awl_part_floor(type) AND part < awl_part_ceiling(type)`. In the generic
-- plan (0017) those bounds are known only as each stream's lookup runs, so Postgres
-- pruned the partitions again for every stream, and, the range on `part` standing
-- between the index's columns and the order wanted, it read each stream's every
-- event and sorted them for the latest (a top-N sort over an Append) instead of
-- reading one index entry backwards. For the executor's rounds (some hundreds of
-- runs of about twenty events each per call) that was most of the lookup, itself
-- the larger half of the log's serial section (BENCHMARKS.md, "The log's serial
-- section" and "Parts as constants").
--
-- The two ranges there are are now written out: a run's lookup reads the run
-- partitions (`part >= 1`), any other stream's events_streams (`part = 0`). Both are
-- pruned when the plan is made, and each is one backward probe of the stream's
-- index. In the many-stream lookup both laterals are in the plan and each row's type
-- gates one off (a one-time filter, not a scan). What is looked up and what is
-- returned are the same as before. awl's reads keep awl_part_floor($1) (see
-- read_streams in src/store/postgres.rs: it keeps their plans fitted to the table).
--
-- And the lookups probe the index whatever the table's statistics said when the plan
-- was made. The plan is made once per connection and kept (0017) until the tables it
-- reads are analyzed again. Made while a partition looked empty or one page small (a
-- new database, statistics from an autovacuum of a young table), it scanned the
-- partition for every stream, and went on doing so while the partition grew until
-- its next analyze: 22-30 ms for a one-task append after 100,000 task events arrived
-- at once, 0.3-1 ms on a connection that planned later. Every table this function
-- reads is read by key (the log's head, the streams' versions, the run period), so
-- sequential scans are turned off for its statements alone.
CREATE OR REPLACE FUNCTION awl_append(
    stream_types   TEXT[],
    stream_ids     TEXT[],
    req_streams    INTEGER[],
    req_expected   BIGINT[],
    req_counts     INTEGER[],
    ev_requests    INTEGER[],
    ev_types       TEXT[],
    ev_versions    INTEGER[],
    ev_payloads    JSONB[],
    ev_metadata    JSONB[],
    all_or_nothing BOOLEAN
) RETURNS TABLE (
    ok             BOOLEAN,
    actual         BIGINT,
    first_position BIGINT,
    last_position  BIGINT,
    stream_version BIGINT
)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    head          BIGINT;
    pos           BIGINT;
    cur           BIGINT;
    cur_part      BIGINT;
    versions      BIGINT[];
    parts         BIGINT[];
    k             INTEGER;
    req           RECORD;
    acc_requests  INTEGER[] := '{}';
    acc_streams   INTEGER[] := '{}';
    acc_positions BIGINT[]  := '{}';
    acc_versions  BIGINT[]  := '{}';
BEGIN
    -- The write lock, held until the calling transaction ends.
    PERFORM pg_advisory_xact_lock(7023201090551113505);
    -- Each statement from here takes a new snapshot (READ COMMITTED), so it sees
    -- every append committed before the lock was granted.
    head := coalesce((SELECT e.position FROM events e ORDER BY e.position DESC LIMIT 1), 0);
    pos := head;
    IF coalesce(array_length(req_counts, 1), 0) = 1 THEN
        -- The range of parts a stream of its type can have: a run's lookup skips
        -- events_streams, another's the run partitions (pruned when the plan runs).
        IF stream_types[1] = 'run' THEN
            SELECT e.version, e.part INTO cur, cur_part FROM events e
             WHERE e.stream_type = 'run' AND e.stream_id = stream_ids[1] AND e.part >= 1
             ORDER BY e.version DESC LIMIT 1;
        ELSE
            SELECT e.version, e.part INTO cur, cur_part FROM events e
             WHERE e.stream_type = stream_types[1] AND e.stream_id = stream_ids[1] AND e.part = 0
             ORDER BY e.version DESC LIMIT 1;
        END IF;
        cur := coalesce(cur, 0);
        actual := cur;
        IF req_expected[1] IS NULL OR req_expected[1] = cur THEN
            IF cur_part IS NULL THEN
                cur_part := awl_new_stream_part(stream_types[1]);
            END IF;
            INSERT INTO events (position, stream_type, stream_id, version, event_type,
                                event_version, payload, metadata, part)
            SELECT pos + ev.k, stream_types[1], stream_ids[1], cur + ev.k,
                   ev.t, ev.ver, ev.pl, ev.md, cur_part
              FROM unnest(ev_types, ev_versions, ev_payloads, ev_metadata)
                   WITH ORDINALITY AS ev(t, ver, pl, md, k);
            ok := TRUE;
            first_position := pos + 1;
            last_position := pos + req_counts[1];
            stream_version := cur + req_counts[1];
            PERFORM pg_notify('awl_events', last_position::text);
        ELSIF all_or_nothing THEN
            RAISE EXCEPTION 'awl_append: conflict on request 0'
                USING ERRCODE = 'AWL01',
                      DETAIL = json_build_object('request', 0, 'actual', cur)::text;
        ELSE
            ok := FALSE;
        END IF;
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT coalesce(array_agg(coalesce(r.v, o.v) ORDER BY s.n), '{}'),
           coalesce(array_agg(coalesce(r.p, o.p) ORDER BY s.n), '{}')
      INTO versions, parts
      FROM unnest(stream_types, stream_ids) WITH ORDINALITY AS s(t, i, n)
      LEFT JOIN LATERAL (SELECT e.version AS v, e.part AS p FROM events e
                          WHERE s.t = 'run' AND e.stream_type = 'run' AND e.stream_id = s.i
                            AND e.part >= 1
                          ORDER BY e.version DESC LIMIT 1) r ON TRUE
      LEFT JOIN LATERAL (SELECT e.version AS v, e.part AS p FROM events e
                          WHERE s.t <> 'run' AND e.stream_type = s.t AND e.stream_id = s.i
                            AND e.part = 0
                          ORDER BY e.version DESC LIMIT 1) o ON TRUE;
    FOR k IN 1 .. coalesce(array_length(versions, 1), 0) LOOP
        IF versions[k] IS NULL THEN
            versions[k] := 0;
        END IF;
    END LOOP;
    FOR req IN
        SELECT r.s, r.x, r.c, r.n::INTEGER AS n
          FROM unnest(req_streams, req_expected, req_counts) WITH ORDINALITY AS r(s, x, c, n)
         ORDER BY r.n
    LOOP
        cur := versions[req.s];
        IF req.x IS NULL OR req.x = cur THEN
            IF parts[req.s] IS NULL THEN
                parts[req.s] := awl_new_stream_part(stream_types[req.s]);
            END IF;
            acc_requests  := acc_requests || req.n;
            acc_streams   := acc_streams || req.s;
            acc_positions := acc_positions || pos;
            acc_versions  := acc_versions || cur;
            versions[req.s] := cur + req.c;
            ok := TRUE;
            actual := cur;
            first_position := pos + 1;
            last_position := pos + req.c;
            stream_version := cur + req.c;
            pos := pos + req.c;
        ELSIF all_or_nothing THEN
            RAISE EXCEPTION 'awl_append: conflict on request %', req.n - 1
                USING ERRCODE = 'AWL01',
                      DETAIL = json_build_object('request', req.n - 1, 'actual', cur)::text;
        ELSE
            ok := FALSE;
            actual := cur;
            first_position := NULL;
            last_position := NULL;
            stream_version := NULL;
        END IF;
        RETURN NEXT;
    END LOOP;
    IF pos > head THEN
        INSERT INTO events (position, stream_type, stream_id, version, event_type,
                            event_version, payload, metadata, part)
        SELECT a.p + ev.k, st.t, st.i, a.v + ev.k, ev.t, ev.ver, ev.pl, ev.md, parts[a.s]
          FROM unnest(acc_requests, acc_streams, acc_positions, acc_versions) AS a(r, s, p, v)
          JOIN unnest(stream_types, stream_ids) WITH ORDINALITY AS st(t, i, n) ON st.n = a.s
          JOIN (SELECT e.r, e.t, e.ver, e.pl, e.md,
                       row_number() OVER (PARTITION BY e.r ORDER BY e.idx) AS k
                  FROM unnest(ev_requests, ev_types, ev_versions, ev_payloads, ev_metadata)
                       WITH ORDINALITY AS e(r, t, ver, pl, md, idx)) ev
            ON ev.r = a.r;
        PERFORM pg_notify('awl_events', pos::text);
    END IF;
END;
$$;
