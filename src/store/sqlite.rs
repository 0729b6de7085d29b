//! The SQLite store: the embedded default, one file, nothing to install.
//!
//! All writes go through a pool of exactly one connection and `BEGIN IMMEDIATE`, so
//! there is one writer at a time, within this process and across processes (SQLite's
//! own lock, waited on with a busy timeout). Reads use a separate pool; WAL mode lets
//! them run beside the writer. Readers in this process are woken in-process after
//! each commit; readers in other processes fall back to a short poll.

use std::collections::HashMap;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{Row, SqliteConnection};

use crate::log::{AppendRequest, Appended, EventFilter, StreamRef};

use super::decode::{RawEvent, RawJson, RawMetadata};
use super::plan::{self, Atomicity, Plan, Recorded};
use super::{StoreError, migrations};

const SELECT: &str = "SELECT position, stream_type, stream_id, version, event_type, event_version, payload, metadata, recorded_at FROM events";

#[derive(Clone)]
pub(crate) struct SqliteBackend {
    writer: SqlitePool,
    reader: SqlitePool,
}

impl SqliteBackend {
    pub(crate) async fn open(path: &Path, readers: u32) -> Result<Self, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| StoreError::Config {
                location: format!("sqlite://{}", path.display()),
                reason: format!("cannot create the folder {}: {e}", dir.display()),
            })?;
        }
        let options = SqliteConnectOptions::from_str("sqlite:")
            .map_err(StoreError::db("building SQLite options"))?
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // FULL: a committed event survives power loss, not only a crash of awl.
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true)
            // A forgotten subject's key is overwritten on disk, not only unlinked.
            .pragma("secure_delete", "ON");
        let location = format!("opening {}", path.display());
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(options.clone())
            .await
            .map_err(StoreError::db(location.clone()))?;
        let reader = SqlitePoolOptions::new()
            .max_connections(readers.max(1))
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(options)
            .await
            .map_err(StoreError::db(location))?;
        Ok(Self { writer, reader })
    }

    pub(crate) fn writer(&self) -> &SqlitePool {
        &self.writer
    }

    pub(crate) fn reader(&self) -> &SqlitePool {
        &self.reader
    }

    pub(crate) async fn migrate(&self) -> Result<(), StoreError> {
        self.migrate_with(migrations::sqlite()).await
    }

    pub(crate) async fn migrate_with(
        &self,
        migrator: sqlx::migrate::Migrator,
    ) -> Result<(), StoreError> {
        migrator
            .run(&self.writer)
            .await
            .map_err(|e| StoreError::Migrate {
                backend: "sqlite",
                source: e.into(),
            })
    }

    pub(crate) async fn append_batch(
        &self,
        requests: &[&AppendRequest],
    ) -> Result<Recorded, StoreError> {
        let mut tx = self
            .writer
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(StoreError::db("beginning an append"))?;
        let (plan, recorded_at) = plan_and_insert(&mut tx, requests, Atomicity::PerRequest).await?;
        if plan.rows.is_empty() {
            tx.rollback()
                .await
                .map_err(StoreError::db("rolling back an empty append"))?;
        } else {
            tx.commit()
                .await
                .map_err(StoreError::db("committing an append"))?;
        }
        Ok(Recorded {
            results: plan.results,
            recorded_at,
        })
    }

    pub(crate) async fn head(&self) -> Result<i64, StoreError> {
        sqlx::query_scalar(
            "SELECT COALESCE((SELECT position FROM events ORDER BY position DESC LIMIT 1), 0)",
        )
        .fetch_one(&self.reader)
        .await
        .map_err(StoreError::db("reading the log head"))
    }

    pub(crate) async fn read_stream(
        &self,
        stream: &StreamRef,
        after_version: i64,
        limit: i64,
    ) -> Result<Vec<RawEvent>, StoreError> {
        let sql = format!(
            "{SELECT} WHERE stream_type = ?1 AND stream_id = ?2 AND version > ?3 \
             UNION ALL \
             {SELECT}_archive WHERE stream_type = ?1 AND stream_id = ?2 AND version > ?3 \
             ORDER BY version LIMIT ?4"
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(stream.kind.as_str())
            .bind(&stream.id)
            .bind(after_version)
            .bind(limit)
            .fetch_all(&self.reader)
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
        // From each stream's last continuation, or from its start.
        let sql = format!(
            "{SELECT} WHERE stream_type = ?1 AND stream_id IN (SELECT value FROM json_each(?2)) \
               AND version >= COALESCE((SELECT max(c.version) FROM events c \
                    WHERE c.stream_type = ?1 AND c.stream_id = events.stream_id \
                      AND c.event_type = ?3), 0) \
             ORDER BY stream_id, version"
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(kind.as_str())
            .bind(serde_json::Value::from(ids.to_vec()).to_string())
            .bind(crate::log::CONTINUED_EVENT_TYPE)
            .fetch_all(&self.reader)
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
        let sql = format!(
            "{SELECT}_archive WHERE stream_type = ?1 \
               AND stream_id IN (SELECT value FROM json_each(?2)) ORDER BY stream_id, version"
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(kind.as_str())
            .bind(serde_json::Value::from(ids.to_vec()).to_string())
            .fetch_all(&self.reader)
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
    /// into the archive whole, so its first event tells).
    pub(crate) async fn hot_stream_ids(
        &self,
        kind: crate::log::StreamType,
        ids: &[String],
    ) -> Result<Vec<String>, StoreError> {
        sqlx::query_scalar::<_, String>(
            "SELECT stream_id FROM events WHERE stream_type = ?1 AND version = 1 \
               AND stream_id IN (SELECT value FROM json_each(?2))",
        )
        .bind(kind.as_str())
        .bind(serde_json::Value::from(ids.to_vec()).to_string())
        .fetch_all(&self.reader)
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
            "SELECT COALESCE(sum(length(CAST(payload AS BLOB))), 0) FROM events \
             WHERE stream_type = ?1 AND stream_id = ?2 AND version >= ?3",
        )
        .bind(stream.kind.as_str())
        .bind(&stream.id)
        .bind(from_version)
        .fetch_one(&self.reader)
        .await
        .map_err(StoreError::db(format!("measuring stream {stream}")))?;
        Ok(bytes.max(0) as u64)
    }

    /// Move the `kind` streams `ids` into the archive in one transaction: how many
    /// events moved.
    pub(crate) async fn archive(
        &self,
        kind: crate::log::StreamType,
        ids: &[String],
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<u64, StoreError> {
        let ids = serde_json::Value::from(ids.to_vec()).to_string();
        let mut tx = self
            .writer
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(StoreError::db("beginning a move into the archive"))?;
        sqlx::query(
            "INSERT OR IGNORE INTO events_archive (position, stream_type, stream_id, version, event_type, \
               event_version, payload, metadata, recorded_at, archived_at) \
             SELECT position, stream_type, stream_id, version, event_type, event_version, \
               payload, metadata, recorded_at, ?3 FROM events \
             WHERE stream_type = ?1 AND stream_id IN (SELECT value FROM json_each(?2))",
        )
        .bind(kind.as_str())
        .bind(&ids)
        .bind(now.timestamp_micros())
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db("copying events into the archive"))?;
        let moved = sqlx::query(
            "DELETE FROM events WHERE stream_type = ?1 \
               AND stream_id IN (SELECT value FROM json_each(?2))",
        )
        .bind(kind.as_str())
        .bind(&ids)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db("removing archived events from the hot log"))?
        .rows_affected();
        tx.commit()
            .await
            .map_err(StoreError::db("committing a move into the archive"))?;
        Ok(moved)
    }

    pub(crate) async fn read_all(
        &self,
        after: i64,
        limit: i64,
        filter: &EventFilter,
    ) -> Result<(Vec<RawEvent>, i64), StoreError> {
        let head = self.head().await?;
        if head <= after {
            return Ok((Vec::new(), after));
        }
        let upper = plan::scan_upper_bound(after, limit, head, filter);
        let sql = format!(
            "SELECT * FROM ( \
               {SELECT} WHERE position > ?1 AND position <= ?2 \
               UNION ALL \
               {SELECT}_archive WHERE position > ?1 AND position <= ?2) \
             WHERE (?3 IS NULL OR stream_type IN (SELECT value FROM json_each(?3))) \
               AND (?4 IS NULL OR stream_id = ?4) \
               AND (?5 IS NULL OR event_type IN (SELECT value FROM json_each(?5))) \
               AND (?6 IS NULL OR recorded_at >= ?6) \
               AND (?7 IS NULL OR recorded_at < ?7) \
             ORDER BY position LIMIT ?8"
        );
        let json_list = |items: Vec<&str>| {
            (!items.is_empty()).then(|| serde_json::Value::from(items).to_string())
        };
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(after)
            .bind(upper)
            .bind(json_list(
                filter.stream_types.iter().map(|t| t.as_str()).collect(),
            ))
            .bind(filter.stream_id.as_deref())
            .bind(json_list(
                filter.event_types.iter().map(String::as_str).collect(),
            ))
            .bind(filter.since.map(|t| t.timestamp_micros()))
            .bind(filter.until.map(|t| t.timestamp_micros()))
            .bind(limit)
            .fetch_all(&self.reader)
            .await
            .map_err(StoreError::db(format!(
                "reading the log after position {after}"
            )))?;
        let events = rows.iter().map(raw_event).collect::<Result<Vec<_>, _>>()?;
        let scanned = if (events.len() as i64) < limit {
            upper
        } else {
            events.last().map_or(head, |e| e.position)
        };
        Ok((events, scanned))
    }
}

/// The body of every SQLite append, inside a `BEGIN IMMEDIATE` transaction.
pub(crate) async fn append_in(
    conn: &mut SqliteConnection,
    requests: &[&AppendRequest],
    atomicity: Atomicity,
) -> Result<Vec<Result<Appended, StoreError>>, StoreError> {
    let (plan, _) = plan_and_insert(conn, requests, atomicity).await?;
    if atomicity == Atomicity::AllOrNothing
        && let Some(Err(e)) = plan.results.iter().find(|r| r.is_err())
    {
        return Err(e.clone());
    }
    Ok(plan.results)
}

/// Plan the requests and insert their rows; with when they were recorded (none if
/// nothing was written).
async fn plan_and_insert<'a>(
    conn: &mut SqliteConnection,
    requests: &[&'a AppendRequest],
    atomicity: Atomicity,
) -> Result<(Plan<'a>, Option<DateTime<Utc>>), StoreError> {
    let head: i64 = sqlx::query_scalar(
        "SELECT COALESCE((SELECT position FROM events ORDER BY position DESC LIMIT 1), 0)",
    )
    .fetch_one(&mut *conn)
    .await
    .map_err(StoreError::db("reading the log head"))?;
    let mut current = HashMap::new();
    for stream in plan::distinct_streams(requests) {
        let version: i64 = sqlx::query_scalar(
            "SELECT COALESCE((SELECT version FROM events WHERE stream_type = ?1 AND stream_id = ?2 ORDER BY version DESC LIMIT 1), 0)",
        )
        .bind(stream.kind.as_str())
        .bind(&stream.id)
        .fetch_one(&mut *conn)
        .await
        .map_err(StoreError::db(format!("reading the version of {stream}")))?;
        current.insert(stream.clone(), version);
    }
    let plan = plan::plan(head, &current, requests, atomicity);
    if plan.rows.is_empty() {
        return Ok((plan, None));
    }
    let recorded_at = Utc::now().timestamp_micros();
    for row in &plan.rows {
        let payload = row.event.payload.as_str();
        let metadata =
            serde_json::to_string(&row.event.metadata).map_err(|e| StoreError::InvalidAppend {
                stream: row.stream.clone(),
                reason: format!("metadata cannot be serialised: {e}"),
            })?;
        sqlx::query(
            "INSERT INTO events (position, stream_type, stream_id, version, event_type, \
                                 event_version, payload, metadata, recorded_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )
        .bind(row.position)
        .bind(row.stream.kind.as_str())
        .bind(&row.stream.id)
        .bind(row.version)
        .bind(&row.event.event_type)
        .bind(row.event.event_version)
        .bind(payload)
        .bind(metadata)
        .bind(recorded_at)
        .execute(&mut *conn)
        .await
        .map_err(StoreError::db(format!(
            "inserting event {} of {}",
            row.version, row.stream
        )))?;
    }
    Ok((plan, DateTime::<Utc>::from_timestamp_micros(recorded_at)))
}

fn raw_event(row: &SqliteRow) -> Result<RawEvent, StoreError> {
    let get = |e: sqlx::Error| StoreError::db("decoding an event row")(e);
    let micros: i64 = row.try_get("recorded_at").map_err(get)?;
    let position: i64 = row.try_get("position").map_err(get)?;
    let recorded_at =
        DateTime::<Utc>::from_timestamp_micros(micros).ok_or_else(|| StoreError::Corrupt {
            event: format!("at position {position}"),
            reason: format!("recorded_at {micros} is out of range"),
        })?;
    Ok(RawEvent {
        position,
        stream_type: row.try_get("stream_type").map_err(get)?,
        stream_id: row.try_get("stream_id").map_err(get)?,
        version: row.try_get("version").map_err(get)?,
        event_type: row.try_get("event_type").map_err(get)?,
        event_version: row.try_get("event_version").map_err(get)?,
        payload: RawJson::Text(row.try_get("payload").map_err(get)?),
        metadata: RawMetadata::Text(row.try_get("metadata").map_err(get)?),
        recorded_at,
    })
}
