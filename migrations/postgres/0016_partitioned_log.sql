-- The log in time partitions, so that archiving moves whole partitions instead of
-- rows (see ARCHITECTURE.md, "Partitions of the log").
--
-- `events` and `events_archive` become tables partitioned by RANGE on a new column,
-- `part`, fixed for a stream by its first event:
--
--   * a run stream's part is the start (epoch seconds) of the period its first event
--     was appended in (`event_partitioning.run_period`, 30 days unless set), so a
--     run's events all sit in one partition, `events_runs_<period start>`;
--   * every other stream (workflows, agents, tasks, schedules, proposals, ...) has
--     part 0, in `events_streams`: those streams live on, or leave the hot log one
--     by one with their runs.
--
-- A run partition whose period ended before the archive cutoff, and whose every run
-- finished before it, is detached from `events` and attached to `events_archive`
-- as it is: no row is copied or deleted. A partition that still holds an unfinished
-- run is drained run by run (the row move of 0011) once its runs finish.
--
-- A partitioned table's unique constraints must include the partition key: the
-- stream's version is unique with its part (the same for every event of a stream,
-- set here by awl_append from the stream's existing events) and the position with
-- its part; positions stay dense and unique because they are still assigned under
-- the log's advisory lock.
--
-- Existing rows are copied into the partitioned tables (a run's part from its first
-- event's time), which rewrites the log once.

CREATE TABLE event_partitioning (
    singleton  BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (singleton),
    -- Seconds per run partition.
    run_period BIGINT  NOT NULL CHECK (run_period > 0)
);
INSERT INTO event_partitioning (singleton, run_period) VALUES (TRUE, 2592000);

-- The part of a run stream whose first event is appended at `t`.
CREATE FUNCTION awl_run_part(t TIMESTAMPTZ) RETURNS BIGINT
LANGUAGE sql STABLE AS $$
    SELECT (floor(extract(epoch FROM t) / p.run_period) * p.run_period)::BIGINT
      FROM event_partitioning p
$$;

-- The name of the partition of `parent` ('events' or 'events_archive') for `part`.
CREATE FUNCTION awl_partition_name(parent TEXT, part BIGINT) RETURNS TEXT
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN part = 0 THEN parent || '_streams'
                ELSE parent || '_runs_' ||
                     to_char(to_timestamp(part) AT TIME ZONE 'UTC', 'YYYYMMDD"t"HH24MISS')
           END
$$;

-- Create the partition of `parent` for the run period starting at `part` unless it
-- exists; returns its name. It is made as a table of its own and then attached:
-- attaching takes a SHARE UPDATE EXCLUSIVE lock on the parent, which appends and
-- reads do not wait for (CREATE TABLE ... PARTITION OF would take ACCESS
-- EXCLUSIVE, in the middle of an append). Its CHECK constraint repeats the bounds,
-- so that neither this attach nor the one into the archive later scans it; its
-- TRUNCATE trigger keeps it append-only on its own (a parent's statement triggers
-- do not reach a partition). Two sessions making the same partition at once: the
-- second finds the first's.
CREATE FUNCTION awl_ensure_run_partition(parent TEXT, part BIGINT) RETURNS TEXT
LANGUAGE plpgsql AS $$
DECLARE
    name  TEXT := awl_partition_name(parent, part);
    width BIGINT := (SELECT run_period FROM event_partitioning);
BEGIN
    IF to_regclass(quote_ident(name)) IS NOT NULL THEN
        RETURN name;
    END IF;
    BEGIN
        EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
                       name, parent);
        EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (part >= %s AND part < %s)',
                       name, name || '_bounds', part, part + width);
        EXECUTE format('CREATE TRIGGER append_only_truncate BEFORE TRUNCATE ON %I '
                       'FOR EACH STATEMENT EXECUTE FUNCTION awl_events_are_append_only()', name);
        EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)',
                       parent, name, part, part + width);
    EXCEPTION WHEN duplicate_table OR unique_violation THEN
        NULL;
    END;
    RETURN name;
END;
$$;

-- The run period may change only while no run partition exists (a new width would
-- give periods overlapping the old partitions).
CREATE FUNCTION awl_run_period_is_fixed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.run_period <> OLD.run_period AND EXISTS (
        SELECT 1 FROM pg_inherits i
         WHERE i.inhparent IN ('events'::regclass, 'events_archive'::regclass)
           AND i.inhrelid NOT IN (to_regclass('events_streams'), to_regclass('events_archive_streams')))
    THEN
        RAISE EXCEPTION 'event_partitioning.run_period can only change before the first run partition exists'
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END;
$$;

-- The part a stream's first event gives it. Called under the append lock for every
-- new run, so it keeps what it learnt in two settings of the session: the period
-- (fixed once a run partition exists, which is when it is kept) and the part whose
-- partition it last found or made (a period's partition is never archived while
-- runs can still start in it). Reading the table and the catalog every time cost
-- a third of a new run's append (benches/pgbench/partitions.sh). Settings roll
-- back with the transaction that set them, as the partition made in it does.
CREATE FUNCTION awl_new_stream_part(stream_type TEXT) RETURNS BIGINT
LANGUAGE plpgsql AS $$
DECLARE
    period BIGINT;
    p      BIGINT;
BEGIN
    IF stream_type <> 'run' THEN
        RETURN 0;
    END IF;
    period := nullif(current_setting('awl.run_period', TRUE), '')::BIGINT;
    IF period IS NULL THEN
        period := (SELECT run_period FROM event_partitioning);
    END IF;
    p := (floor(extract(epoch FROM now()) / period) * period)::BIGINT;
    IF current_setting('awl.run_part', TRUE) IS DISTINCT FROM p::TEXT THEN
        PERFORM awl_ensure_run_partition('events', p);
        PERFORM set_config('awl.run_period', period::TEXT, FALSE);
        PERFORM set_config('awl.run_part', p::TEXT, FALSE);
    END IF;
    RETURN p;
END;
$$;

-- The run partitions of `parent`, with the periods they hold.
CREATE FUNCTION awl_run_partitions(parent TEXT)
RETURNS TABLE (name TEXT, period_start BIGINT, period_end BIGINT)
LANGUAGE sql STABLE AS $$
    SELECT c.relname::TEXT, b[1]::BIGINT, b[2]::BIGINT
      FROM pg_inherits i
      JOIN pg_class c ON c.oid = i.inhrelid
     CROSS JOIN LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid),
                                     'FROM \(''?(-?\d+)''?\) TO \(''?(-?\d+)''?\)') AS b
     WHERE i.inhparent = to_regclass(quote_ident(parent)) AND b[1]::BIGINT <> 0
     ORDER BY 2
$$;

-- What the hot run partition for `part` holds: its runs that are finished (a
-- `finished_types` event recorded before `cutoff`), how many streams are not, how
-- many events it has and its last position. Read without the lock: the move checks
-- the last position again under it.
CREATE FUNCTION awl_run_partition_summary(part BIGINT, finished_types TEXT[], cutoff TIMESTAMPTZ,
                                          OUT finished TEXT[], OUT unfinished BIGINT,
                                          OUT events BIGINT, OUT last BIGINT)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    EXECUTE format(
        'SELECT coalesce(array_agg(s.stream_id) FILTER (WHERE s.done), ''{}''), '
        '       count(*) FILTER (WHERE NOT s.done), coalesce(sum(s.n), 0)::BIGINT, max(s.last) '
        '  FROM (SELECT stream_id, '
        '               bool_and(stream_type = ''run'') '
        '                 AND bool_or(event_type = ANY($1) AND recorded_at < $2) AS done, '
        '               count(*) AS n, max(position) AS last '
        '          FROM %I GROUP BY stream_type, stream_id) AS s',
        awl_partition_name('events', part))
    INTO finished, unfinished, events, last
    USING finished_types, cutoff;
END;
$$;

-- Move the hot run partition for `part` into the archive as it is, if the caller's
-- look at it still holds: its last position is `expected_last` (no event arrived in
-- it since) and the log's head is not in it (the hot log's highest position must
-- never go back). Returns whether it moved. Takes the hot log's ACCESS EXCLUSIVE
-- lock until the caller's transaction ends: every step below changes only the
-- catalog (the new column has a constant default, the CHECK constraint made at
-- creation spares the attach its scan), so the lock is held for milliseconds.
CREATE FUNCTION awl_archive_run_partition(part BIGINT, expected_last BIGINT, archived TIMESTAMPTZ)
RETURNS BOOLEAN
LANGUAGE plpgsql AS $$
DECLARE
    hot     TEXT := awl_partition_name('events', part);
    cold    TEXT := awl_partition_name('events_archive', part);
    width   BIGINT := (SELECT run_period FROM event_partitioning);
    last    BIGINT;
    head    BIGINT;
BEGIN
    -- Only a period that is over: runs may still start in the current one.
    IF part = 0 OR part + width > extract(epoch FROM now()) THEN
        RETURN FALSE;
    END IF;
    LOCK TABLE events IN ACCESS EXCLUSIVE MODE;
    -- Another process may have moved it while this one waited for the lock.
    IF to_regclass(quote_ident(hot)) IS NULL THEN
        RETURN FALSE;
    END IF;
    EXECUTE format('SELECT max(position) FROM %I', hot) INTO last;
    head := (SELECT e.position FROM events e ORDER BY e.position DESC LIMIT 1);
    IF last IS DISTINCT FROM expected_last OR last = head THEN
        RETURN FALSE;
    END IF;
    IF to_regclass(quote_ident(cold)) IS NOT NULL THEN
        -- The period's runs were moved row by row (the partition held an unfinished
        -- run when its time came, or `awl archive` moved them early): once it is
        -- empty, it goes.
        IF last IS NOT NULL THEN
            RETURN FALSE;
        END IF;
        EXECUTE format('ALTER TABLE events DETACH PARTITION %I', hot);
        EXECUTE format('DROP TABLE %I', hot);
        RETURN TRUE;
    END IF;
    UPDATE events_archive_reach SET last_position = greatest(last_position, last);
    EXECUTE format('ALTER TABLE events DETACH PARTITION %I', hot);
    EXECUTE format('ALTER TABLE %I ADD COLUMN archived_at TIMESTAMPTZ NOT NULL DEFAULT %L',
                   hot, archived);
    EXECUTE format('ALTER TABLE %I RENAME TO %I', hot, cold);
    EXECUTE format('ALTER TABLE %I RENAME CONSTRAINT %I TO %I', cold, hot || '_bounds', cold || '_bounds');
    EXECUTE format('ALTER TABLE events_archive ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)',
                   cold, part, part + width);
    RETURN TRUE;
END;
$$;

-- The parts a stream of `stream_type` can have, [floor, ceiling): a run's are the
-- run periods', every other stream's 0. Lookups of one stream carry them so that
-- Postgres prunes the partitions that cannot hold it.
CREATE FUNCTION awl_part_floor(stream_type TEXT) RETURNS BIGINT
LANGUAGE sql IMMUTABLE AS $$ SELECT CASE WHEN stream_type = 'run' THEN 1 ELSE 0 END::BIGINT $$;
CREATE FUNCTION awl_part_ceiling(stream_type TEXT) RETURNS BIGINT
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN stream_type = 'run' THEN 9223372036854775807 ELSE 1 END::BIGINT
$$;

-- The hot log, partitioned.
ALTER TABLE events RENAME TO events_unpartitioned;
CREATE TABLE events (
    position      BIGINT      NOT NULL,
    stream_type   TEXT        NOT NULL,
    stream_id     TEXT        NOT NULL,
    version       BIGINT      NOT NULL,
    event_type    TEXT        NOT NULL,
    event_version INTEGER     NOT NULL,
    payload       JSONB       NOT NULL,
    metadata      JSONB       NOT NULL DEFAULT '{}'::jsonb,
    recorded_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    part          BIGINT      NOT NULL DEFAULT 0,
    CONSTRAINT events_log_position PRIMARY KEY (position, part),
    CONSTRAINT events_log_stream_version UNIQUE (stream_type, stream_id, version, part),
    -- (CHECK constraints are matched by name when a partition is attached.)
    CONSTRAINT log_position_positive CHECK (position > 0),
    CONSTRAINT log_version_positive CHECK (version > 0),
    CONSTRAINT log_event_version_positive CHECK (event_version > 0)
) PARTITION BY RANGE (part);
CREATE TABLE events_streams PARTITION OF events FOR VALUES FROM (0) TO (1);
CREATE TRIGGER append_only_truncate BEFORE TRUNCATE ON events_streams
    FOR EACH STATEMENT EXECUTE FUNCTION awl_events_are_append_only();

-- The archive, partitioned the same way (a detached run partition joins it as is).
ALTER TABLE events_archive RENAME TO events_archive_unpartitioned;
CREATE TABLE events_archive (
    position      BIGINT      NOT NULL,
    stream_type   TEXT        NOT NULL,
    stream_id     TEXT        NOT NULL,
    version       BIGINT      NOT NULL,
    event_type    TEXT        NOT NULL,
    event_version INTEGER     NOT NULL,
    payload       JSONB       NOT NULL,
    metadata      JSONB       NOT NULL DEFAULT '{}'::jsonb,
    recorded_at   TIMESTAMPTZ NOT NULL,
    part          BIGINT      NOT NULL DEFAULT 0,
    archived_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT events_archive_log_position PRIMARY KEY (position, part),
    CONSTRAINT events_archive_log_stream_version UNIQUE (stream_type, stream_id, version, part),
    CONSTRAINT log_position_positive CHECK (position > 0),
    CONSTRAINT log_version_positive CHECK (version > 0),
    CONSTRAINT log_event_version_positive CHECK (event_version > 0)
) PARTITION BY RANGE (part);
CREATE TABLE events_archive_streams PARTITION OF events_archive FOR VALUES FROM (0) TO (1);
CREATE TRIGGER append_only_truncate BEFORE TRUNCATE ON events_archive_streams
    FOR EACH STATEMENT EXECUTE FUNCTION awl_events_are_append_only();

-- Existing rows: each run's part from its first event.
CREATE TEMPORARY TABLE run_parts ON COMMIT DROP AS
    SELECT stream_id, 'events' AS parent, awl_run_part(min(recorded_at)) AS part
      FROM events_unpartitioned WHERE stream_type = 'run' GROUP BY stream_id
    UNION ALL
    SELECT stream_id, 'events_archive', awl_run_part(min(recorded_at))
      FROM events_archive_unpartitioned WHERE stream_type = 'run' GROUP BY stream_id;
SELECT awl_ensure_run_partition(parent, part) FROM (SELECT DISTINCT parent, part FROM run_parts) p;

INSERT INTO events (position, stream_type, stream_id, version, event_type, event_version,
                    payload, metadata, recorded_at, part)
SELECT e.position, e.stream_type, e.stream_id, e.version, e.event_type, e.event_version,
       e.payload, e.metadata, e.recorded_at, coalesce(r.part, 0)
  FROM events_unpartitioned e
  LEFT JOIN run_parts r
    ON r.parent = 'events' AND e.stream_type = 'run' AND r.stream_id = e.stream_id;

INSERT INTO events_archive (position, stream_type, stream_id, version, event_type,
                            event_version, payload, metadata, recorded_at, part, archived_at)
SELECT e.position, e.stream_type, e.stream_id, e.version, e.event_type, e.event_version,
       e.payload, e.metadata, e.recorded_at, coalesce(r.part, 0), e.archived_at
  FROM events_archive_unpartitioned e
  LEFT JOIN run_parts r
    ON r.parent = 'events_archive' AND e.stream_type = 'run' AND r.stream_id = e.stream_id;

DROP TABLE events_unpartitioned;
DROP TABLE events_archive_unpartitioned;

-- The highest position the archive holds. Every query over the archive locks and
-- opens each of its partitions, and the archive gains one every period for good:
-- readers of the log after a position (every tail and projection) read it only
-- when it reaches past that position, which a live tail's does not (the page of
-- the hot log is read with the reach, in one snapshot). Raised by every move in
-- the same transaction.
CREATE TABLE events_archive_reach (
    singleton     BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (singleton),
    last_position BIGINT  NOT NULL
);
INSERT INTO events_archive_reach (singleton, last_position)
SELECT TRUE, coalesce(max(position), 0) FROM events_archive;

CREATE TRIGGER event_partitioning_run_period_is_fixed
    BEFORE UPDATE ON event_partitioning
    FOR EACH ROW EXECUTE FUNCTION awl_run_period_is_fixed();

-- The rules of the unpartitioned tables: append-only, and an event leaves the hot
-- log only into the archive, unchanged (row triggers reach every partition).
CREATE TRIGGER events_append_only_rows
    BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION awl_events_move_only();
CREATE TRIGGER events_append_only_truncate
    BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION awl_events_are_append_only();
CREATE TRIGGER events_archive_append_only_rows
    BEFORE UPDATE OR DELETE ON events_archive
    FOR EACH ROW EXECUTE FUNCTION awl_events_are_append_only();
CREATE TRIGGER events_archive_append_only_truncate
    BEFORE TRUNCATE ON events_archive
    FOR EACH STATEMENT EXECUTE FUNCTION awl_events_are_append_only();

-- 0010's index of continuations.
CREATE INDEX events_continued ON events (stream_type, stream_id, version)
    WHERE event_type = 'run.continued';

-- awl_append (0002) with parts: a stream's part comes with its version from its
-- latest event; a new stream's from awl_new_stream_part.
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
LANGUAGE plpgsql VOLATILE AS $$
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
        SELECT e.version, e.part INTO cur, cur_part FROM events e
         WHERE e.stream_type = stream_types[1] AND e.stream_id = stream_ids[1]
           AND e.part >= awl_part_floor(stream_types[1]) AND e.part < awl_part_ceiling(stream_types[1])
         ORDER BY e.version DESC LIMIT 1;
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
    SELECT coalesce(array_agg(l.v ORDER BY s.n), '{}'), coalesce(array_agg(l.p ORDER BY s.n), '{}')
      INTO versions, parts
      FROM unnest(stream_types, stream_ids) WITH ORDINALITY AS s(t, i, n)
      LEFT JOIN LATERAL (SELECT e.version AS v, e.part AS p FROM events e
                          WHERE e.stream_type = s.t AND e.stream_id = s.i
                            AND e.part >= awl_part_floor(s.t) AND e.part < awl_part_ceiling(s.t)
                          ORDER BY e.version DESC LIMIT 1) l ON TRUE;
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

