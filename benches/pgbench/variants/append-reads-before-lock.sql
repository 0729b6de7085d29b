-- AN EXPERIMENT, NOT A MIGRATION: awl does not apply this file. It is the variant of
-- awl_append() measured in BENCHMARKS.md, "The log's serial section", applied on a
-- scratch database by benches/pgbench/serial-section.sh (third argument). It took
-- two writers of large batches from 96-112 to 157-176 appends a second there, but the
-- executor benchmark ran no faster with it on a two-core machine and Postgres spent a
-- few µs more a step, so it was not made a migration. Kept for the machine where the
-- serial section is the bound (more cores, several worker processes). Its lookups
-- name the parts as constants, as migration 0018's awl_append() does; over 0018 it
-- took two writers from 128-131 to 184-202 appends a second (stop 59).
--
-- A batch's stream versions are read before the log's lock is taken, not under it.
--
-- Every append holds the lock from awl_append() to its transaction's commit, so the
-- work done under it is the log's serial section: no number of writers appends
-- faster than one writer does that work. For the executor's rounds (a request for
-- each of some hundreds of runs) reading every stream's latest version was the
-- larger half of it: 263 runs' versions took 3.2-4.2 ms of a 10 ms append, and two
-- writers appended no faster than one (BENCHMARKS.md, "The log's serial section").
--
-- So a batch of 64 requests or more, and a smaller one that finds the lock taken
-- (pg_try_advisory_xact_lock), reads its streams' versions before taking the lock,
-- while the holder works. A smaller batch that finds it free, or already its own
-- (group commit takes it before forming a batch), reads under it as before: it has
-- little to overlap, and the checks below would cost it more than they save (3-13 %
-- of a call alone, measured; under 5 % for a large batch).
--
-- Read before the lock, a version may be stale by the time the lock is granted: an
-- append to the same stream may have committed in between. Versions only grow, and
-- a stream's events all sit in the partition its first event chose, so such an
-- append holds the row (stream, version + 1, part) that this one would insert: the
-- unique constraint refuses it. Three cases are settled under the lock instead:
--
--   * a stream not found before the lock is looked up again under it (one created
--     meanwhile may sit in another period's partition, beyond the constraint's reach);
--   * a request whose expected version does not match the version read early is
--     judged again on versions read under the lock, so that conflicts and the
--     versions they report are exact;
--   * a refused insert (unique_violation, or check_violation: no partition for the
--     row, its partition having been archived meanwhile) is rolled back to the start
--     of the attempt and the batch placed again on versions read under the lock.
--
-- So the outcome is the one the lock-first function gave; only the time under the lock
-- is shorter. One request alone (the board's appends) keeps 0016's short path.
--
-- Archiving moves a finished run's rows without the log's lock, as before: an append
-- to a run while it is being archived was possible before and still is, in a window
-- now as long as the wait for the lock rather than the function's own time.

-- Judge and place a batch of requests on the streams' `versions` and `parts` (NULL:
-- the stream has no events), assigning positions after `head`, and insert the rows.
-- Returns one row per request as awl_append() does. With `optimistic`, a request
-- whose expected version does not match raises SQLSTATE AWL02 instead, for the
-- caller to judge the batch again on versions read under the lock.
CREATE FUNCTION awl_append_place(
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
    all_or_nothing BOOLEAN,
    versions       BIGINT[],
    parts          BIGINT[],
    head           BIGINT,
    optimistic     BOOLEAN
) RETURNS TABLE (
    ok             BOOLEAN,
    actual         BIGINT,
    first_position BIGINT,
    last_position  BIGINT,
    stream_version BIGINT
)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    pos           BIGINT := head;
    cur           BIGINT;
    k             INTEGER;
    req           RECORD;
    acc_requests  INTEGER[] := '{}';
    acc_streams   INTEGER[] := '{}';
    acc_positions BIGINT[]  := '{}';
    acc_versions  BIGINT[]  := '{}';
BEGIN
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
        ELSIF optimistic THEN
            RAISE EXCEPTION 'awl_append: version read before the lock differs on request %', req.n - 1
                USING ERRCODE = 'AWL02';
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

-- The latest version and part of each of the streams, in their order (NULL where a
-- stream has no events). The range of parts a stream of its type can have: a run's
-- lookup skips events_streams, another's the run partitions.
CREATE FUNCTION awl_stream_heads(stream_types TEXT[], stream_ids TEXT[],
                                 OUT versions BIGINT[], OUT parts BIGINT[])
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
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
END;
$$;

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
AS $$
DECLARE
    head       BIGINT;
    pos        BIGINT;
    cur        BIGINT;
    cur_part   BIGINT;
    versions   BIGINT[];
    parts      BIGINT[];
    k          INTEGER;
    r_ok       BOOLEAN[];
    r_actual   BIGINT[];
    r_first    BIGINT[];
    r_last     BIGINT[];
    r_version  BIGINT[];
BEGIN
    IF coalesce(array_length(req_counts, 1), 0) = 1 THEN
        -- The write lock, held until the calling transaction ends.
        PERFORM pg_advisory_xact_lock(7023201090551113505);
        -- Each statement from here takes a new snapshot (READ COMMITTED), so it sees
        -- every append committed before the lock was granted.
        head := coalesce((SELECT e.position FROM events e ORDER BY e.position DESC LIMIT 1), 0);
        pos := head;
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
    IF array_length(req_counts, 1) < 64 AND pg_try_advisory_xact_lock(7023201090551113505) THEN
        -- A small batch that found the lock free (or this transaction's already:
        -- group commit takes it before it forms a batch): read under it.
        SELECT h.versions, h.parts INTO versions, parts FROM awl_stream_heads(stream_types, stream_ids) h;
        head := coalesce((SELECT e.position FROM events e ORDER BY e.position DESC LIMIT 1), 0);
        RETURN QUERY
            SELECT * FROM awl_append_place(stream_types, stream_ids, req_streams, req_expected, req_counts,
                                           ev_requests, ev_types, ev_versions, ev_payloads, ev_metadata,
                                           all_or_nothing, versions, parts, head, FALSE);
        RETURN;
    END IF;
    -- A large batch, or another append holds the lock: read the versions before
    -- taking it (see the top of this file for why the result holds).
    SELECT h.versions, h.parts INTO versions, parts FROM awl_stream_heads(stream_types, stream_ids) h;
    PERFORM pg_advisory_xact_lock(7023201090551113505);
    head := coalesce((SELECT e.position FROM events e ORDER BY e.position DESC LIMIT 1), 0);
    -- A stream not found before the lock may have been created meanwhile, perhaps in
    -- another period's partition: looked up again.
    FOR k IN 1 .. coalesce(array_length(versions, 1), 0) LOOP
        IF versions[k] IS NULL THEN
            IF stream_types[k] = 'run' THEN
                SELECT e.version, e.part INTO cur, cur_part FROM events e
                 WHERE e.stream_type = 'run' AND e.stream_id = stream_ids[k] AND e.part >= 1
                 ORDER BY e.version DESC LIMIT 1;
            ELSE
                SELECT e.version, e.part INTO cur, cur_part FROM events e
                 WHERE e.stream_type = stream_types[k] AND e.stream_id = stream_ids[k] AND e.part = 0
                 ORDER BY e.version DESC LIMIT 1;
            END IF;
            versions[k] := cur;
            parts[k] := cur_part;
        END IF;
    END LOOP;
    -- Rows are gathered into arrays and returned only once an attempt stands.
    BEGIN
        SELECT array_agg(p.o ORDER BY p.n), array_agg(p.a ORDER BY p.n), array_agg(p.f ORDER BY p.n),
               array_agg(p.l ORDER BY p.n), array_agg(p.v ORDER BY p.n)
          INTO r_ok, r_actual, r_first, r_last, r_version
          FROM awl_append_place(stream_types, stream_ids, req_streams, req_expected, req_counts,
                                ev_requests, ev_types, ev_versions, ev_payloads, ev_metadata,
                                all_or_nothing, versions, parts, head, TRUE)
               WITH ORDINALITY AS p(o, a, f, l, v, n);
    EXCEPTION WHEN unique_violation OR check_violation OR SQLSTATE 'AWL02' THEN
        -- Nothing of the attempt is kept (its rows, its partition, its notification):
        -- placed again on versions read under the lock.
        SELECT h.versions, h.parts INTO versions, parts FROM awl_stream_heads(stream_types, stream_ids) h;
        SELECT array_agg(p.o ORDER BY p.n), array_agg(p.a ORDER BY p.n), array_agg(p.f ORDER BY p.n),
               array_agg(p.l ORDER BY p.n), array_agg(p.v ORDER BY p.n)
          INTO r_ok, r_actual, r_first, r_last, r_version
          FROM awl_append_place(stream_types, stream_ids, req_streams, req_expected, req_counts,
                                ev_requests, ev_types, ev_versions, ev_payloads, ev_metadata,
                                all_or_nothing, versions, parts, head, FALSE)
               WITH ORDINALITY AS p(o, a, f, l, v, n);
    END;
    RETURN QUERY
        SELECT r.o, r.a, r.f, r.l, r.v
          FROM unnest(r_ok, r_actual, r_first, r_last, r_version) AS r(o, a, f, l, v);
END;
$$;
