//! The Postgres store: production backend.
//!
//! Every append is one call of the `awl_append()` function (see the migration): it
//! takes a transaction-level advisory lock, reads `max(position)` and the versions of
//! the streams involved, inserts the rows and `pg_notify`s the new head. The lock is
//! held until commit, so positions are dense and become visible in order. Group
//! commit runs the call as its own statement (one round trip, one fsync for many
//! callers); a [`super::StoreTx`] runs it inside the caller's transaction. Readers
//! wake on `LISTEN awl_events`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::postgres::{PgConnectOptions, PgDatabaseError, PgListener, PgPool, PgPoolOptions, PgRow};
use sqlx::{Connection, PgConnection, Row};

use crate::log::{AppendRequest, Appended, EventFilter, ExpectedVersion, Metadata, StreamRef};

use super::decode::{RawEvent, RawJson, RawMetadata};
use super::plan::{self, Atomicity, Recorded};
use super::{StoreError, migrations};

/// The notification channel that carries the new log head after each append.
pub(crate) const CHANNEL: &str = "awl_events";

const COLUMNS: &str = "position, stream_type, stream_id, version, event_type, event_version, payload, metadata, recorded_at";

/// [`COLUMNS`] of a subquery `e`.
const QUALIFIED: &str = "e.position, e.stream_type, e.stream_id, e.version, e.event_type, e.event_version, e.payload, e.metadata, e.recorded_at";

/// How long a caller waits for a connection before the store says it is unavailable
/// (a 503 to an API caller): long enough to ride out a burst, short enough that a
/// request made while the database is down gets an answer, not a hang.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// A pooled connection idle this long is pinged before it is handed out.
const PING_IDLE_AFTER: Duration = Duration::from_secs(1);

#[derive(Clone)]
pub(crate) struct PgBackend {
    pool: PgPool,
    /// Where LISTEN and the migrations connect, when the pool goes through a pooler
    /// in transaction mode (see `StoreOptions::session_url`).
    session: Option<std::sync::Arc<PgConnectOptions>>,
}

fn connect_options(url: &str) -> Result<PgConnectOptions, StoreError> {
    url.parse().map_err(|e: sqlx::Error| StoreError::Config {
        location: super::location::redact(url),
        reason: e.to_string(),
    })
}

impl PgBackend {
    pub(crate) async fn connect(
        url: &str,
        max_connections: u32,
        session_url: Option<&str>,
    ) -> Result<Self, StoreError> {
        let options = connect_options(url)?;
        let session = session_url
            .map(connect_options)
            .transpose()?
            .map(std::sync::Arc::new);
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            // A broken connection fails its query and is replaced; pinging every
            // connection on every acquire would add a round trip to each append. Only
            // one that sat idle for a while is pinged first: after a database restart
            // those are the ones left broken in the pool, and a request must not fail
            // on one when a fresh connection would do.
            .test_before_acquire(false)
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    if meta.idle_for < PING_IDLE_AFTER {
                        return Ok(true);
                    }
                    Ok(sqlx::Connection::ping(conn).await.is_ok())
                })
            })
            .connect_with(options)
            .await
            .map_err(StoreError::db(format!(
                "connecting to {}",
                super::location::redact(url)
            )))?;
        Ok(Self { pool, session })
    }

    pub(crate) fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub(crate) async fn migrate(&self) -> Result<(), StoreError> {
        self.migrate_with(migrations::postgres()).await
    }

    pub(crate) async fn migrate_with(
        &self,
        migrator: sqlx::migrate::Migrator,
    ) -> Result<(), StoreError> {
        let failed = |e: sqlx::migrate::MigrateError| StoreError::Migrate {
            backend: "postgres",
            source: e.into(),
        };
        // The migrator holds an advisory lock from its first statement to its last:
        // through a pooler in transaction mode they could reach different server
        // connections, and the lock would stay behind on one of them.
        match &self.session {
            Some(session) => {
                let mut conn = PgConnection::connect_with(session.as_ref())
                    .await
                    .map_err(StoreError::db("connecting to migrate"))?;
                let ran = migrator.run(&mut conn).await.map_err(failed);
                let _ = conn.close().await;
                ran
            }
            None => migrator.run(&self.pool).await.map_err(failed),
        }
    }

    /// Append independent requests in one statement, which is its own transaction
    /// (group commit).
    pub(crate) async fn append_batch(
        &self,
        requests: &[&AppendRequest],
    ) -> Result<Recorded, StoreError> {
        let mut conn = self
            .pool
            .acquire()
            .await
            .map_err(StoreError::db("acquiring a connection to append"))?;
        append_recorded(&mut conn, requests, Atomicity::PerRequest).await
    }

    /// The log's write lock, taken in a transaction of its own before the batch it
    /// will write is formed (see `appender`: with other processes appending, what
    /// queues here while the lock is waited for joins the batch).
    pub(crate) async fn lock_log(&self) -> Result<LockedLog, StoreError> {
        let tx = self
            .pool
            .begin_with(sqlx::AssertSqlSafe(LOCK_LOG))
            .await
            .map_err(StoreError::db("taking the log's lock"))?;
        Ok(LockedLog { tx })
    }

    pub(crate) async fn head(&self) -> Result<i64, StoreError> {
        sqlx::query_scalar(
            "SELECT COALESCE((SELECT position FROM events ORDER BY position DESC LIMIT 1), 0)",
        )
        .fetch_one(&self.pool)
        .await
        .map_err(StoreError::db("reading the log head"))
    }

    pub(crate) async fn read_stream(
        &self,
        stream: &StreamRef,
        after_version: i64,
        limit: i64,
    ) -> Result<Vec<RawEvent>, StoreError> {
        let sql = const_format(
            "SELECT {COLUMNS} FROM events WHERE stream_type = $1 AND stream_id = $2 AND version > $3 \
             UNION ALL \
             SELECT {COLUMNS} FROM events_archive WHERE stream_type = $1 AND stream_id = $2 AND version > $3 \
             ORDER BY version LIMIT $4",
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(stream.kind.as_str())
            .bind(&stream.id)
            .bind(after_version)
            .bind(limit)
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db(format!("reading stream {stream}")))?
            .iter()
            .map(raw_event)
            .collect()
    }

    pub(crate) async fn read_streams(
        &self,
        kind: crate::log::StreamType,
        ids: &[String],
    ) -> Result<Vec<RawEvent>, StoreError> {
        // One stream (every command's load): its own statement, a range scan of the
        // stream's index whatever the statistics say. In the many-ids form below
        // the planner may flatten the LATERAL subquery into a hash join over every
        // event of the kind, and a plan made while the table was small (a fresh
        // database; the plan is cached with the prepared statement) kept doing so
        // as the log grew: 10 ms per board command after a few thousand tasks
        // (auto_explain), and board lifecycles fell as servers were added. The parts
        // are given as `awl_part_floor($1)`, not as constants chosen by kind: so
        // given, Postgres prunes them when it plans with the call's values and makes
        // that plan on every call, fitted to the table as it is. A generic plan
        // (the parts as constants) saved 0.03-0.05 ms a one-stream read, measured,
        // but one made while the table was small is kept by the connection while
        // the table grows, until its next analyze (BENCHMARKS.md, "Parts as
        // constants").
        if let [id] = ids {
            let sql = const_format(
                "SELECT {COLUMNS} FROM events \
                  WHERE stream_type = $1 AND stream_id = $2 \
                    AND part >= awl_part_floor($1) AND part < awl_part_ceiling($1) \
                    AND version >= COALESCE((SELECT max(c.version) FROM events c \
                          WHERE c.stream_type = $1 AND c.stream_id = $2 \
                            AND c.part >= awl_part_floor($1) AND c.part < awl_part_ceiling($1) \
                            AND c.event_type = '{CONTINUED}'), 0) \
                  ORDER BY version",
            )
            // A constant of awl's, not a value from outside (and holds no quote).
            .replace("{CONTINUED}", crate::log::CONTINUED_EVENT_TYPE);
            return sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(kind.as_str())
                .bind(id)
                .fetch_all(&self.pool)
                .await
                .map_err(StoreError::db(format!("reading {kind} stream {id}")))?
                .iter()
                .map(raw_event)
                .collect();
        }
        // Many streams (a claim's runs): stream by stream, each from its last
        // continuation (one probe of the partial index, whose predicate is the
        // literal here, so a generic plan can use it) or its start. The loop form
        // keeps the planner from reading every stream of the kind for a few ids the
        // way `stream_id = ANY(ids)` did with stale statistics; `OFFSET 0` keeps
        // it from flattening the loop into a hash join over every event of the
        // kind, which it did for a new run partition without statistics
        // (auto_explain: 30,192 rows read for 57 runs, 64 ms a claim). No ORDER BY:
        // sorting the rows by stream took Postgres longer than reading them (97 to
        // 27 ms for 1,250 runs of 20 events); `EventStore::read_streams` orders
        // each stream's events.
        let sql = const_format(
            "SELECT {COLUMNS} FROM (SELECT DISTINCT unnest($2::text[]) AS id) AS s \
             CROSS JOIN LATERAL ( \
               SELECT {COLUMNS} FROM events e \
                WHERE e.stream_type = $1 AND e.stream_id = s.id \
                  AND e.part >= awl_part_floor($1) AND e.part < awl_part_ceiling($1) \
                  AND e.version >= COALESCE((SELECT max(c.version) FROM events c \
                        WHERE c.stream_type = $1 AND c.stream_id = s.id \
                          AND c.part >= awl_part_floor($1) AND c.part < awl_part_ceiling($1) \
                          AND c.event_type = '{CONTINUED}'), 0) \
                OFFSET 0) AS e",
        )
        // A constant of awl's, not a value from outside (and holds no quote).
        .replace("{CONTINUED}", crate::log::CONTINUED_EVENT_TYPE);
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(kind.as_str())
            .bind(ids)
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db(format!(
                "reading {} {kind} streams",
                ids.len()
            )))?
            .iter()
            .map(raw_event)
            .collect()
    }

    /// Every event of the `kind` streams `ids` that is in the archive.
    pub(crate) async fn read_archived_streams(
        &self,
        kind: crate::log::StreamType,
        ids: &[String],
    ) -> Result<Vec<RawEvent>, StoreError> {
        let sql = const_format(
            "SELECT {COLUMNS} FROM events_archive WHERE stream_type = $1 AND stream_id = ANY($2) \
             ORDER BY stream_id, version",
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(kind.as_str())
            .bind(ids)
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db(format!(
                "reading {} archived {kind} streams",
                ids.len()
            )))?
            .iter()
            .map(raw_event)
            .collect()
    }

    /// Which of the `kind` streams `ids` have events in the hot log (a stream moves
    /// into the archive whole, so its first event tells). One index probe each; the
    /// parts a stream of `kind` can have spare the other partitions.
    pub(crate) async fn hot_stream_ids(
        &self,
        kind: crate::log::StreamType,
        ids: &[String],
    ) -> Result<Vec<String>, StoreError> {
        sqlx::query_scalar::<_, String>(
            "SELECT stream_id FROM events WHERE stream_type = $1 AND stream_id = ANY($2) \
               AND version = 1 AND part >= awl_part_floor($1) AND part < awl_part_ceiling($1)",
        )
        .bind(kind.as_str())
        .bind(ids)
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db(format!(
            "looking for {} {kind} streams in the hot log",
            ids.len()
        )))
    }

    /// The size of a hot stream's payloads from `from_version` on, as JSON text.
    pub(crate) async fn stream_bytes(
        &self,
        stream: &StreamRef,
        from_version: i64,
    ) -> Result<u64, StoreError> {
        let bytes: i64 = sqlx::query_scalar(
            "SELECT COALESCE(sum(octet_length(payload::text)), 0)::bigint FROM events \
             WHERE stream_type = $1 AND stream_id = $2 AND version >= $3",
        )
        .bind(stream.kind.as_str())
        .bind(&stream.id)
        .bind(from_version)
        .fetch_one(&self.pool)
        .await
        .map_err(StoreError::db(format!("measuring stream {stream}")))?;
        Ok(bytes.max(0) as u64)
    }

    /// Move the `kind` streams `ids` into the archive in one transaction: how many
    /// events moved. Two processes moving the same streams at once both succeed: the
    /// second copies nothing twice (`ON CONFLICT DO NOTHING`) and finds nothing left
    /// to remove.
    pub(crate) async fn archive(
        &self,
        kind: crate::log::StreamType,
        ids: &[String],
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<u64, StoreError> {
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(StoreError::db("beginning a move into the archive"))?;
        // A run's events keep their part (its period): the archive's partition for
        // it is made first if this is the period's first row move.
        sqlx::query(
            "SELECT awl_ensure_run_partition('events_archive', p.part) \
               FROM (SELECT DISTINCT part FROM events \
                      WHERE stream_type = $1 AND stream_id = ANY($2) AND part <> 0) AS p",
        )
        .bind(kind.as_str())
        .bind(ids)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db("making the archive's partitions for a move"))?;
        let sql = const_format(
            "INSERT INTO events_archive ({COLUMNS}, part, archived_at) \
             SELECT {COLUMNS}, part, $3 FROM events WHERE stream_type = $1 AND stream_id = ANY($2) \
             ON CONFLICT DO NOTHING",
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(kind.as_str())
            .bind(ids)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db("copying events into the archive"))?;
        sqlx::query(
            "UPDATE events_archive_reach SET last_position = greatest(last_position, \
               (SELECT max(position) FROM events WHERE stream_type = $1 AND stream_id = ANY($2)))",
        )
        .bind(kind.as_str())
        .bind(ids)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db("raising the archive's reach"))?;
        let moved =
            sqlx::query("DELETE FROM events WHERE stream_type = $1 AND stream_id = ANY($2)")
                .bind(kind.as_str())
                .bind(ids)
                .execute(&mut *tx)
                .await
                .map_err(StoreError::db("removing archived events from the hot log"))?
                .rows_affected();
        tx.commit()
            .await
            .map_err(StoreError::db("committing a move into the archive"))?;
        Ok(moved)
    }

    /// Events after `after`, up to the committed head read in the same call, that
    /// pass `filter`. Returns them and the position scanned up to.
    pub(crate) async fn read_all(
        &self,
        after: i64,
        limit: i64,
        filter: &EventFilter,
    ) -> Result<(Vec<RawEvent>, i64), StoreError> {
        // The window's end before the head is known: the head is read in the page's
        // own statement (one round trip a page, not two), and bounds it there.
        let window_end = plan::scan_upper_bound(after, limit, i64::MAX, filter);
        // The hot log's page, with the archive's reach (the highest position it
        // holds, migration 0016) read in the same snapshot. Only when the archive
        // reaches past `after` (a rebuild, or a tail far behind) is the page read
        // again over both tables, merged by position (a Merge Append of two index
        // scans, no sort): a query over the archive opens and locks every one of
        // its partitions, and it gains one every period, for good.
        //
        // The window is read by position alone and filtered above an `OFFSET 0`
        // fence. Given the filter's values (a custom plan: a connection's first five
        // executions of a statement), the planner AND-ed the window with a bitmap of
        // the `stream_type` index, which scans that type's entries in the whole log:
        // 200-600 ms a page over 1.6 million events for the board's `task, agent`
        // follower, on every new connection, while the same page by position takes
        // 0.1 ms. The fence keeps each page the bounded range scan the window is for.
        const FILTER: &str = "($3::text[] IS NULL OR stream_type = ANY($3)) \
               AND ($4::text IS NULL OR stream_id = $4) \
               AND ($5::text[] IS NULL OR event_type = ANY($5)) \
               AND ($6::timestamptz IS NULL OR recorded_at >= $6) \
               AND ($7::timestamptz IS NULL OR recorded_at < $7)";
        let window = |table: &str, upper: &str| {
            format!(
                "SELECT {{COLUMNS}} FROM (SELECT {{COLUMNS}} FROM {table} \
                   WHERE position > $1 AND position <= {upper} OFFSET 0) AS w \
                  WHERE {FILTER} ORDER BY position LIMIT $8"
            )
        };
        // The page's one driving row carries the archive's reach and the head, read
        // in the page's snapshot: the window ends at the head or `$2`, whichever is
        // first. Both are scalar subqueries of a one-row `FROM`: joined to the reach's
        // table instead, the planner took that never-analysed singleton for 2,200
        // rows, costed every page at 2,200 windows, and Postgres compiled each page
        // read with JIT (44 ms of a 71 ms page of about 6,000 events on average, from
        // pg_stat_statements' jit columns, under the executor with live projections).
        let hot = const_format(&format!(
            "SELECT {QUALIFIED}, d.last_position, d.head \
               FROM (SELECT (SELECT r.last_position FROM events_archive_reach r) AS last_position, \
                            COALESCE((SELECT position FROM events \
                                      ORDER BY position DESC LIMIT 1), 0) AS head) AS d \
               LEFT JOIN LATERAL ({}) AS e ON TRUE \
              ORDER BY e.position",
            window("events", "LEAST($2, d.head)")
        ));
        let both = const_format(&format!(
            "({}) UNION ALL ({}) ORDER BY position LIMIT $8",
            window("events", "$2"),
            window("events_archive", "$2")
        ));
        let stream_types: Option<Vec<&str>> = (!filter.stream_types.is_empty())
            .then(|| filter.stream_types.iter().map(|t| t.as_str()).collect());
        let event_types: Option<&Vec<String>> =
            (!filter.event_types.is_empty()).then_some(&filter.event_types);
        let read = |sql: String, upper: i64| {
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(after)
                .bind(upper)
                .bind(stream_types.clone())
                .bind(filter.stream_id.as_deref())
                .bind(event_types)
                .bind(filter.since)
                .bind(filter.until)
                .bind(limit)
                .fetch_all(&self.pool)
        };
        let failed = || StoreError::db(format!("reading the log after position {after}"));
        let rows = read(hot, window_end).await.map_err(failed())?;
        let (reach, head): (Option<i64>, i64) = match rows.first() {
            Some(row) => (
                row.try_get(9).map_err(failed())?,
                row.try_get(10).map_err(failed())?,
            ),
            // No reach row (it is made by migration 0016): read the head alone.
            None => (None, self.head().await?),
        };
        if head <= after {
            return Ok((Vec::new(), after));
        }
        let upper = window_end.min(head);
        let events = if reach.is_none_or(|reach| reach > after) {
            let rows = read(both, upper).await.map_err(failed())?;
            rows.iter().map(raw_event).collect::<Result<Vec<_>, _>>()?
        } else {
            let mut events = Vec::with_capacity(rows.len());
            for row in &rows {
                // The one row of an empty page has no event.
                if row
                    .try_get::<Option<i64>, _>(0)
                    .map_err(failed())?
                    .is_some()
                {
                    events.push(raw_event(row)?);
                }
            }
            events
        };
        let scanned = if (events.len() as i64) < limit {
            upper
        } else {
            events.last().map_or(head, |e| e.position)
        };
        Ok((events, scanned))
    }

    /// Follow `awl_events` notifications and hand each to `signals` (which wakes the
    /// followers for other processes' commits), reconnecting when the connection
    /// drops. Runs until aborted.
    pub(crate) async fn listen(self, signals: std::sync::Arc<super::signals::Signals>) {
        const FIRST: Duration = Duration::from_millis(100);
        let mut backoff = FIRST;
        loop {
            let mut listening = false;
            match self.listen_once(&signals, &mut listening).await {
                Ok(()) => backoff = FIRST,
                Err(e) => {
                    // A connection that was listening and got cut is made again at
                    // once; only failing to connect backs off.
                    if listening {
                        backoff = FIRST;
                    }
                    tracing::warn!(error = %e, "event notification listener failed; reconnecting");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
            // Whatever happened, readers may have missed a notification: wake them.
            signals.wake_all();
        }
    }

    async fn listen_once(
        &self,
        signals: &super::signals::Signals,
        listening: &mut bool,
    ) -> Result<(), sqlx::Error> {
        let mut listener = match &self.session {
            // LISTEN needs a session: through a pooler in transaction mode the
            // notifications would go to whichever client holds the server connection.
            Some(session) => {
                let pool = PgPoolOptions::new()
                    .max_connections(1)
                    .connect_lazy_with(PgConnectOptions::clone(session));
                PgListener::connect_with(&pool).await?
            }
            None => PgListener::connect_with(&self.pool).await?,
        };
        listener.listen(CHANNEL).await?;
        *listening = true;
        // Anything appended before LISTEN took effect must be read too.
        signals.listening();
        while let Some(notification) = listener.try_recv().await? {
            signals.notified(notification.payload());
        }
        Ok(())
    }
}

fn const_format(template: &str) -> String {
    template.replace("{COLUMNS}", COLUMNS)
}

/// The body of every Postgres append: one call of `awl_append()` (see the migration),
/// in the caller's transaction or, for group commit, as its own statement.
pub(crate) async fn append_in(
    conn: &mut PgConnection,
    requests: &[&AppendRequest],
    atomicity: Atomicity,
) -> Result<Vec<Result<Appended, StoreError>>, StoreError> {
    Ok(append_recorded(conn, requests, atomicity).await?.results)
}

/// [`append_in`], with when the events were recorded (the transaction's `now()`,
/// which every event's `recorded_at` defaults to).
async fn append_recorded(
    conn: &mut PgConnection,
    requests: &[&AppendRequest],
    atomicity: Atomicity,
) -> Result<Recorded, StoreError> {
    // Refuse what the store refuses outright before touching the database.
    let mut results: Vec<Option<Result<Appended, StoreError>>> = Vec::with_capacity(requests.len());
    let mut sent: Vec<usize> = Vec::with_capacity(requests.len());
    for (i, request) in requests.iter().enumerate() {
        match plan::validate(request) {
            Ok(()) => {
                sent.push(i);
                results.push(None);
            }
            Err(e) if atomicity == Atomicity::AllOrNothing => return Err(e),
            Err(e) => results.push(Some(Err(e))),
        }
    }
    let mut recorded_at = None;
    if !sent.is_empty() {
        let rows = call_append(conn, requests, &sent, atomicity).await?;
        recorded_at = rows.first().map(|r| r.recorded_at);
        if rows.len() != sent.len() {
            return Err(unexpected(format!(
                "awl_append() answered {} rows for {} requests",
                rows.len(),
                sent.len()
            )));
        }
        for (&i, row) in sent.iter().zip(rows) {
            let request = requests[i];
            results[i] = Some(if row.ok {
                Ok(Appended {
                    first_position: row.first_position.unwrap_or_default(),
                    last_position: row.last_position.unwrap_or_default(),
                    stream_version: row.stream_version.unwrap_or_default(),
                })
            } else {
                Err(StoreError::Conflict {
                    stream: request.stream.clone(),
                    expected: request.expected,
                    actual: row.actual,
                })
            });
        }
    }
    // Every slot is filled: refused before the call, or answered by it.
    let results = results
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| unexpected("a request was left without an answer".into()))?;
    Ok(Recorded {
        results,
        recorded_at,
    })
}

/// Begins a transaction holding the log's write lock (the key `awl_append()` takes;
/// advisory locks nest, so its own call then holds it twice until the commit). Only
/// the batching depends on the two keys being the same: `awl_append()` serialises
/// appends whatever was taken before it.
const LOCK_LOG: &str = "BEGIN; SELECT pg_advisory_xact_lock(7023201090551113505)";

/// A transaction holding the log's write lock, for one batch.
pub(crate) struct LockedLog {
    tx: sqlx::Transaction<'static, sqlx::Postgres>,
}

impl LockedLog {
    /// Append `requests` (each on its own: a conflict refuses only its request) and
    /// commit, which gives the lock back. Dropped without this, it rolls back.
    pub(crate) async fn append(
        mut self,
        requests: &[&AppendRequest],
    ) -> Result<Recorded, StoreError> {
        let recorded = append_recorded(&mut self.tx, requests, Atomicity::PerRequest).await?;
        self.tx
            .commit()
            .await
            .map_err(StoreError::db("committing an append"))?;
        Ok(recorded)
    }
}

/// The database answered something awl_append() never does.
fn unexpected(what: String) -> StoreError {
    StoreError::db("appending events")(sqlx::Error::Protocol(what))
}

struct AppendRow {
    ok: bool,
    actual: i64,
    first_position: Option<i64>,
    last_position: Option<i64>,
    stream_version: Option<i64>,
    recorded_at: DateTime<Utc>,
}

async fn call_append(
    conn: &mut PgConnection,
    requests: &[&AppendRequest],
    sent: &[usize],
    atomicity: Atomicity,
) -> Result<Vec<AppendRow>, StoreError> {
    let sent_requests: Vec<&AppendRequest> = sent.iter().map(|&i| requests[i]).collect();
    let streams = plan::distinct_streams(&sent_requests);
    let stream_types: Vec<&str> = streams.iter().map(|s| s.kind.as_str()).collect();
    let stream_ids: Vec<&str> = streams.iter().map(|s| s.id.as_str()).collect();
    let mut req_streams = Vec::with_capacity(sent.len());
    let mut expected = Vec::with_capacity(sent.len());
    let mut counts = Vec::with_capacity(sent.len());
    let n: usize = sent_requests.iter().map(|r| r.events.len()).sum();
    let mut ev_requests = Vec::with_capacity(n);
    let mut event_types = Vec::with_capacity(n);
    let mut event_versions = Vec::with_capacity(n);
    let mut payloads = Vec::with_capacity(n);
    let mut metadata = Vec::with_capacity(n);
    for (r, request) in sent_requests.iter().enumerate() {
        // `streams` is sorted and distinct: find each request's stream by search.
        // `streams` holds every sent request's stream, sorted: this search succeeds.
        let stream = streams
            .binary_search(&&request.stream)
            .map_err(|_| unexpected(format!("{} is missing from its batch", request.stream)))?;
        req_streams.push(stream as i32 + 1);
        expected.push(match request.expected {
            ExpectedVersion::Any => None,
            ExpectedVersion::NoStream => Some(0i64),
            ExpectedVersion::Exactly(v) => Some(v),
        });
        counts.push(request.events.len() as i32);
        for event in &request.events {
            ev_requests.push(r as i32 + 1);
            event_types.push(event.event_type.as_str());
            event_versions.push(event.event_version);
            payloads.push(JsonbText(event.payload.as_str()));
            // Written as JSON text as it is bound, not built as a `Value` first.
            metadata.push(sqlx::types::Json(&event.metadata));
        }
    }
    // `now()` is the transaction's start, the default of every event's `recorded_at`.
    sqlx::query_as::<
        _,
        (
            bool,
            i64,
            Option<i64>,
            Option<i64>,
            Option<i64>,
            DateTime<Utc>,
        ),
    >(
        "SELECT ok, actual, first_position, last_position, stream_version, now() \
         FROM awl_append($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
    )
    .bind(&stream_types)
    .bind(&stream_ids)
    .bind(&req_streams)
    .bind(&expected)
    .bind(&counts)
    .bind(&ev_requests)
    .bind(&event_types)
    .bind(&event_versions)
    .bind(&payloads)
    .bind(&metadata)
    .bind(atomicity == Atomicity::AllOrNothing)
    .fetch_all(&mut *conn)
    .await
    .map(|rows| {
        rows.into_iter()
            .map(
                |(ok, actual, first_position, last_position, stream_version, recorded_at)| {
                    AppendRow {
                        ok,
                        actual,
                        first_position,
                        last_position,
                        stream_version,
                        recorded_at,
                    }
                },
            )
            .collect()
    })
    .map_err(|e| append_error(e, requests, sent))
}

/// JSON text bound as `jsonb` as it is: the format's version byte, then the text
/// (what sqlx's `Json` writes, without serialising anything again). Only ever bound
/// with text `serde_json` wrote ([`crate::log::Payload`]).
struct JsonbText<'a>(&'a str);

impl sqlx::Type<sqlx::Postgres> for JsonbText<'_> {
    fn type_info() -> sqlx::postgres::PgTypeInfo {
        <sqlx::types::Json<()> as sqlx::Type<sqlx::Postgres>>::type_info()
    }
}

impl sqlx::postgres::PgHasArrayType for JsonbText<'_> {
    fn array_type_info() -> sqlx::postgres::PgTypeInfo {
        <sqlx::types::Json<()> as sqlx::postgres::PgHasArrayType>::array_type_info()
    }
}

impl sqlx::Encode<'_, sqlx::Postgres> for JsonbText<'_> {
    fn encode_by_ref(
        &self,
        buf: &mut sqlx::postgres::PgArgumentBuffer,
    ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
        // JSONB's binary format, version 1: the text follows.
        buf.push(1);
        buf.extend_from_slice(self.0.as_bytes());
        Ok(sqlx::encode::IsNull::No)
    }
}

/// `awl_append` raises AWL01 for an all-or-nothing conflict; a unique violation means
/// someone wrote events without taking the head lock (by hand): a conflict too.
fn append_error(e: sqlx::Error, requests: &[&AppendRequest], sent: &[usize]) -> StoreError {
    if let sqlx::Error::Database(db) = &e {
        let code = db.code();
        if code.as_deref() == Some("AWL01")
            && let Some(pg) = db.try_downcast_ref::<PgDatabaseError>()
            && let Some(detail) = pg.detail()
            && let Ok(conflict) = serde_json::from_str::<ConflictDetail>(detail)
            && let Some(&i) = sent.get(conflict.request)
        {
            return StoreError::Conflict {
                stream: requests[i].stream.clone(),
                expected: requests[i].expected,
                actual: conflict.actual,
            };
        }
        if code.as_deref() == Some("23505")
            && let Some(&i) = sent.first()
        {
            return StoreError::Conflict {
                stream: requests[i].stream.clone(),
                expected: requests[i].expected,
                actual: -1,
            };
        }
    }
    StoreError::db("appending events")(e)
}

#[derive(serde::Deserialize)]
struct ConflictDetail {
    request: usize,
    actual: i64,
}

fn raw_event(row: &PgRow) -> Result<RawEvent, StoreError> {
    // By index, in the order of COLUMNS: a name lookup per column per row shows up
    // when loading long streams.
    let get = |e: sqlx::Error| StoreError::db("decoding an event row")(e);
    Ok(RawEvent {
        position: row.try_get(0).map_err(get)?,
        stream_type: row.try_get(1).map_err(get)?,
        stream_id: row.try_get(2).map_err(get)?,
        version: row.try_get(3).map_err(get)?,
        event_type: row.try_get(4).map_err(get)?,
        event_version: row.try_get(5).map_err(get)?,
        payload: RawJson::Parsed(row.try_get::<Value, _>(6).map_err(get)?),
        metadata: RawMetadata::Decoded(
            row.try_get::<sqlx::types::Json<Metadata>, _>(7)
                .map(|m| m.0)
                .map_err(|e| e.to_string()),
        ),
        recorded_at: row.try_get::<DateTime<Utc>, _>(8).map_err(get)?,
    })
}
