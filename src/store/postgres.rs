//! The Postgres store: production backend.
//!
//! Appends take the row lock on `event_log_head` first (`SELECT ... FOR UPDATE`), then
//! read the versions of the streams involved, insert all rows with one `unnest`
//! statement, move the head and `pg_notify` the new head, all in one transaction. The
//! lock is held until commit, so positions are assigned and become visible in order.
//! Readers wake on `LISTEN awl_events`.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions, PgRow};
use sqlx::{PgConnection, Row};
use tokio::sync::watch;

use crate::log::{AppendRequest, EventFilter, StreamRef};

use super::decode::{RawEvent, RawJson};
use super::plan::{self, Atomicity, Plan};
use super::{StoreError, migrations};

/// The notification channel that carries the new log head after each append.
pub(crate) const CHANNEL: &str = "awl_events";

const COLUMNS: &str = "position, stream_type, stream_id, version, event_type, event_version, payload, metadata, recorded_at";

#[derive(Clone)]
pub(crate) struct PgBackend {
    pool: PgPool,
}

impl PgBackend {
    pub(crate) async fn connect(url: &str, max_connections: u32) -> Result<Self, StoreError> {
        let options: PgConnectOptions =
            url.parse().map_err(|e: sqlx::Error| StoreError::Config {
                location: super::location::redact(url),
                reason: e.to_string(),
            })?;
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options)
            .await
            .map_err(StoreError::db(format!(
                "connecting to {}",
                super::location::redact(url)
            )))?;
        Ok(Self { pool })
    }

    pub(crate) fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub(crate) async fn migrate(&self) -> Result<(), StoreError> {
        migrations::postgres()
            .run(&self.pool)
            .await
            .map_err(|e| StoreError::Migrate {
                backend: "postgres",
                source: e.into(),
            })
    }

    /// Append independent requests in one transaction (group commit).
    pub(crate) async fn append_batch(
        &self,
        requests: &[&AppendRequest],
    ) -> Result<Vec<Result<crate::log::Appended, StoreError>>, StoreError> {
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(StoreError::db("beginning an append"))?;
        let plan = append_in(&mut tx, requests, Atomicity::PerRequest).await?;
        if plan.rows.is_empty() {
            tx.rollback()
                .await
                .map_err(StoreError::db("rolling back an empty append"))?;
        } else {
            tx.commit()
                .await
                .map_err(StoreError::db("committing an append"))?;
        }
        Ok(plan.results)
    }

    pub(crate) async fn head(&self) -> Result<i64, StoreError> {
        sqlx::query_scalar("SELECT position FROM event_log_head")
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
            "SELECT {COLUMNS} FROM events WHERE stream_type = $1 AND stream_id = $2 AND version > $3 ORDER BY version LIMIT $4",
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

    /// Events after `after`, up to the committed head read in the same call, that
    /// pass `filter`. Returns them and the position scanned up to.
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
        let sql = const_format(
            "SELECT {COLUMNS} FROM events \
             WHERE position > $1 AND position <= $2 \
               AND ($3::text[] IS NULL OR stream_type = ANY($3)) \
               AND ($4::text IS NULL OR stream_id = $4) \
               AND ($5::text[] IS NULL OR event_type = ANY($5)) \
               AND ($6::timestamptz IS NULL OR recorded_at >= $6) \
               AND ($7::timestamptz IS NULL OR recorded_at < $7) \
             ORDER BY position LIMIT $8",
        );
        let stream_types: Option<Vec<&str>> = (!filter.stream_types.is_empty())
            .then(|| filter.stream_types.iter().map(|t| t.as_str()).collect());
        let event_types: Option<&Vec<String>> =
            (!filter.event_types.is_empty()).then_some(&filter.event_types);
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(after)
            .bind(head)
            .bind(stream_types)
            .bind(filter.stream_id.as_deref())
            .bind(event_types)
            .bind(filter.since)
            .bind(filter.until)
            .bind(limit)
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db(format!(
                "reading the log after position {after}"
            )))?;
        let events = rows.iter().map(raw_event).collect::<Result<Vec<_>, _>>()?;
        let scanned = if (events.len() as i64) < limit {
            head
        } else {
            events.last().map_or(head, |e| e.position)
        };
        Ok((events, scanned))
    }

    /// Follow `awl_events` notifications and bump `wake` for every one, reconnecting
    /// when the connection drops. Runs until aborted.
    pub(crate) async fn listen(self, wake: watch::Sender<u64>) {
        let mut backoff = Duration::from_millis(100);
        loop {
            match self.listen_once(&wake).await {
                Ok(()) => backoff = Duration::from_millis(100),
                Err(e) => {
                    tracing::warn!(error = %e, "event notification listener failed; reconnecting");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
            // Whatever happened, readers may have missed a notification: wake them.
            wake.send_modify(|n| *n += 1);
        }
    }

    async fn listen_once(&self, wake: &watch::Sender<u64>) -> Result<(), sqlx::Error> {
        let mut listener = PgListener::connect_with(&self.pool).await?;
        listener.listen(CHANNEL).await?;
        // Anything appended before LISTEN took effect must be read too.
        wake.send_modify(|n| *n += 1);
        while listener.try_recv().await?.is_some() {
            wake.send_modify(|n| *n += 1);
        }
        Ok(())
    }
}

fn const_format(template: &str) -> String {
    template.replace("{COLUMNS}", COLUMNS)
}

/// The body of every Postgres append, inside the caller's transaction.
pub(crate) async fn append_in<'a>(
    conn: &mut PgConnection,
    requests: &[&'a AppendRequest],
    atomicity: Atomicity,
) -> Result<Plan<'a>, StoreError> {
    // 1. The write lock: serialises appends until this transaction ends.
    let head: i64 = sqlx::query_scalar("SELECT position FROM event_log_head FOR UPDATE")
        .fetch_one(&mut *conn)
        .await
        .map_err(StoreError::db("locking the log head"))?;

    // 2. Current versions, read after the lock so they include every earlier append.
    let streams = plan::distinct_streams(requests);
    let types: Vec<&str> = streams.iter().map(|s| s.kind.as_str()).collect();
    let ids: Vec<&str> = streams.iter().map(|s| s.id.as_str()).collect();
    let versions: Vec<i64> = sqlx::query_scalar(
        "SELECT COALESCE((SELECT max(e.version) FROM events e \
                          WHERE e.stream_type = s.t AND e.stream_id = s.i), 0) \
         FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS s(t, i, n) ORDER BY s.n",
    )
    .bind(&types)
    .bind(&ids)
    .fetch_all(&mut *conn)
    .await
    .map_err(StoreError::db("reading stream versions"))?;
    let current: HashMap<StreamRef, i64> = streams.into_iter().cloned().zip(versions).collect();

    // 3. Decide, then write the rows and the new head in one statement.
    let plan = plan::plan(head, &current, requests, atomicity);
    if plan.rows.is_empty() {
        return Ok(plan);
    }
    let n = plan.rows.len();
    let mut positions = Vec::with_capacity(n);
    let mut stream_types = Vec::with_capacity(n);
    let mut stream_ids = Vec::with_capacity(n);
    let mut versions = Vec::with_capacity(n);
    let mut event_types = Vec::with_capacity(n);
    let mut event_versions = Vec::with_capacity(n);
    let mut payloads = Vec::with_capacity(n);
    let mut metadata = Vec::with_capacity(n);
    for row in &plan.rows {
        positions.push(row.position);
        stream_types.push(row.stream.kind.as_str());
        stream_ids.push(row.stream.id.as_str());
        versions.push(row.version);
        event_types.push(row.event.event_type.as_str());
        event_versions.push(row.event.event_version);
        payloads.push(&row.event.payload);
        metadata.push(serde_json::to_value(&row.event.metadata).map_err(|e| {
            StoreError::InvalidAppend {
                stream: row.stream.clone(),
                reason: format!("metadata cannot be serialised: {e}"),
            }
        })?);
    }
    sqlx::query(
        "WITH inserted AS ( \
             INSERT INTO events (position, stream_type, stream_id, version, event_type, \
                                 event_version, payload, metadata) \
             SELECT * FROM unnest($1::int8[], $2::text[], $3::text[], $4::int8[], $5::text[], \
                                  $6::int4[], $7::jsonb[], $8::jsonb[]) \
             RETURNING 1 \
         ), moved AS ( \
             UPDATE event_log_head SET position = $9 \
         ) \
         SELECT pg_notify($10, $9::text), (SELECT count(*) FROM inserted)",
    )
    .bind(&positions)
    .bind(&stream_types)
    .bind(&stream_ids)
    .bind(&versions)
    .bind(&event_types)
    .bind(&event_versions)
    .bind(&payloads)
    .bind(&metadata)
    .bind(plan.new_head)
    .bind(CHANNEL)
    .execute(&mut *conn)
    .await
    .map_err(|e| unique_violation_as_conflict(e, &plan))?;
    Ok(plan)
}

/// The version check runs under the head lock, so a unique violation means someone
/// wrote events without taking it (for example by hand): still a conflict.
fn unique_violation_as_conflict(e: sqlx::Error, plan: &Plan<'_>) -> StoreError {
    if let sqlx::Error::Database(db) = &e
        && db.code().as_deref() == Some("23505")
        && let Some(row) = plan.rows.first()
    {
        return StoreError::Conflict {
            stream: row.stream.clone(),
            expected: crate::log::ExpectedVersion::Exactly(row.version - 1),
            actual: row.version,
        };
    }
    StoreError::db("inserting events")(e)
}

fn raw_event(row: &PgRow) -> Result<RawEvent, StoreError> {
    let get = |e: sqlx::Error| StoreError::db("decoding an event row")(e);
    Ok(RawEvent {
        position: row.try_get("position").map_err(get)?,
        stream_type: row.try_get("stream_type").map_err(get)?,
        stream_id: row.try_get("stream_id").map_err(get)?,
        version: row.try_get("version").map_err(get)?,
        event_type: row.try_get("event_type").map_err(get)?,
        event_version: row.try_get("event_version").map_err(get)?,
        payload: RawJson::Parsed(row.try_get::<Value, _>("payload").map_err(get)?),
        metadata: RawJson::Parsed(row.try_get::<Value, _>("metadata").map_err(get)?),
        recorded_at: row
            .try_get::<DateTime<Utc>, _>("recorded_at")
            .map_err(get)?,
    })
}
