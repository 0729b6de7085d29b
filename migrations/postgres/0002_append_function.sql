-- Appends in one round trip, serialised by an advisory lock instead of a head row.
--
-- Appends are serialised by a transaction-level advisory lock (key 7023201090551113505,
-- "awl.log!"), taken before positions are assigned and held until commit; the next
-- position is max(position) + 1 read after the lock. So positions are dense (a
-- rolled-back append leaves no hole) and commit in order: a reader tailing
-- `position > checkpoint` never skips an event that commits late. See
-- ARCHITECTURE.md, "Gap-free tailing". Every append goes through awl_append() below,
-- in one round trip. The head row of 0001 is no longer needed: the head is
-- max(position), one index probe.

DROP TABLE event_log_head;

-- Append a batch of requests, each to one stream with an expected version, in the
-- calling transaction, in one round trip.
--
-- stream_types/stream_ids list the distinct streams of the batch. Request r (in
-- array order) appends req_counts[r] events to stream req_streams[r] (an index into
-- the stream arrays, from 1) if the stream's version is req_expected[r] (NULL: any;
-- 0: the stream must not exist). Events are flattened into the ev_* arrays;
-- ev_requests[j] says which request event j belongs to. Returns one row per request:
-- ok, the stream's version before it, and where its events landed.
--
-- With all_or_nothing, the first conflict raises SQLSTATE AWL01 (DETAIL holds
-- {"request": index from 0, "actual": version}) and nothing is written; otherwise a
-- conflicting request is skipped and the others are written.
--
-- One request (the common case) takes a short path of plain statements; a batch of
-- several is set-based: one query reads every stream's version, the loop only does
-- arithmetic, and one INSERT writes all rows.
CREATE FUNCTION awl_append(
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
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    head          BIGINT;
    pos           BIGINT;
    cur           BIGINT;
    versions      BIGINT[];
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
    -- ORDER BY ... LIMIT 1 rather than max(): one index probe whatever the planner's
    -- statistics say (a stale estimate turns max() into a scan of every row).
    head := coalesce((SELECT e.position FROM events e ORDER BY e.position DESC LIMIT 1), 0);
    pos := head;
    IF coalesce(array_length(req_counts, 1), 0) = 1 THEN
        cur := coalesce((SELECT e.version FROM events e
                          WHERE e.stream_type = stream_types[1] AND e.stream_id = stream_ids[1]
                          ORDER BY e.version DESC LIMIT 1), 0);
        actual := cur;
        IF req_expected[1] IS NULL OR req_expected[1] = cur THEN
            INSERT INTO events (position, stream_type, stream_id, version, event_type,
                                event_version, payload, metadata)
            SELECT pos + ev.k, stream_types[1], stream_ids[1], cur + ev.k,
                   ev.t, ev.ver, ev.pl, ev.md
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
    SELECT coalesce(array_agg(x.v ORDER BY x.n), '{}') INTO versions
      FROM (SELECT s.n,
                   coalesce((SELECT e.version FROM events e
                              WHERE e.stream_type = s.t AND e.stream_id = s.i
                              ORDER BY e.version DESC LIMIT 1), 0) AS v
              FROM unnest(stream_types, stream_ids) WITH ORDINALITY AS s(t, i, n)) x;
    FOR req IN
        SELECT r.s, r.x, r.c, r.n::INTEGER AS n
          FROM unnest(req_streams, req_expected, req_counts) WITH ORDINALITY AS r(s, x, c, n)
         ORDER BY r.n
    LOOP
        cur := versions[req.s];
        IF req.x IS NULL OR req.x = cur THEN
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
                            event_version, payload, metadata)
        SELECT a.p + ev.k, st.t, st.i, a.v + ev.k, ev.t, ev.ver, ev.pl, ev.md
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
