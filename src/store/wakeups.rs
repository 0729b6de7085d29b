//! The wake-up queue of runs (`run_wakeups`, migration 0003): when each unfinished run
//! is due, and which worker holds it under a lease.
//!
//! The queue is derived from the log, and written in the same transaction as the
//! events that cause a wake-up ([`StoreTx::wake_run`]), so none is lost. Workers
//! [`EventStore::claim_runs`] due rows under a lease (`FOR UPDATE SKIP LOCKED` on
//! Postgres; the single writer on SQLite), keep them with [`EventStore::renew_leases`]
//! while work is in flight, and give them back with [`StoreTx::release_runs`], in the
//! transaction that appends what they decided.
//!
//! A release must not lose a wake-up set by someone else meanwhile (an approval, a
//! task or child run ending): it only stores the worker's own due time if nobody woke
//! the run since it was claimed (`woken`, set by [`StoreTx::wake_run`], cleared by a
//! claim; migration 0004) and the run's stream is still at the version the worker
//! decided on; otherwise the run is due at once. The flag is on the row the release
//! updates, so a wake-up committed while the release waits for that row is seen too.

use chrono::{DateTime, Utc};

use super::tx::{StoreTx, TxConnection};
use super::{EventStore, StoreError, backend::Backend};

/// Giving a run back after deciding on it.
#[derive(Debug, Clone, PartialEq)]
pub struct Release {
    pub run_id: String,
    /// When the run is due next, if nothing else happens.
    pub due_at: Option<DateTime<Utc>>,
    /// The version of the run's stream the decision was made on (after its own
    /// events).
    pub version: i64,
    /// The run ended: drop its row.
    pub finished: bool,
}

fn micros(at: DateTime<Utc>) -> i64 {
    at.timestamp_micros()
}

impl StoreTx {
    /// Make `run_id` due at `due_at` at the latest (an earlier due time stays).
    pub async fn wake_run(
        &mut self,
        run_id: &str,
        due_at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let what = format!("waking run {run_id}");
        match self.connection() {
            TxConnection::Postgres(c) => sqlx::query(
                "INSERT INTO run_wakeups (run_id, due_at) VALUES ($1, $2) \
                 ON CONFLICT (run_id) DO UPDATE SET due_at = \
                   LEAST(COALESCE(run_wakeups.due_at, EXCLUDED.due_at), EXCLUDED.due_at), \
                   woken = true",
            )
            .bind(run_id)
            .bind(due_at)
            .execute(c)
            .await
            .map(|_| ()),
            TxConnection::Sqlite(c) => sqlx::query(
                "INSERT INTO run_wakeups (run_id, due_at) VALUES (?1, ?2) \
                 ON CONFLICT (run_id) DO UPDATE SET due_at = \
                   MIN(COALESCE(run_wakeups.due_at, excluded.due_at), excluded.due_at), \
                   woken = 1",
            )
            .bind(run_id)
            .bind(micros(due_at))
            .execute(c)
            .await
            .map(|_| ()),
        }
        .map_err(StoreError::db(what))
    }

    /// Give back runs held by `owner`: each keeps its own due time unless it was woken
    /// since it was claimed or its stream moved past `version`, in which case it is due
    /// at `now`; finished runs leave the queue.
    pub async fn release_runs(
        &mut self,
        owner: &str,
        releases: &[Release],
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        if releases.is_empty() {
            return Ok(());
        }
        let (finished, open): (Vec<&Release>, Vec<&Release>) =
            releases.iter().partition(|r| r.finished);
        match self.connection() {
            TxConnection::Postgres(c) => {
                let ids: Vec<&str> = finished.iter().map(|r| r.run_id.as_str()).collect();
                sqlx::query("DELETE FROM run_wakeups WHERE run_id = ANY($1) AND lease_owner = $2")
                    .bind(&ids)
                    .bind(owner)
                    .execute(&mut *c)
                    .await
                    .map_err(StoreError::db(
                        "dropping finished runs from the wake-up queue",
                    ))?;
                let ids: Vec<&str> = open.iter().map(|r| r.run_id.as_str()).collect();
                let due: Vec<Option<DateTime<Utc>>> = open.iter().map(|r| r.due_at).collect();
                let versions: Vec<i64> = open.iter().map(|r| r.version).collect();
                sqlx::query(
                    "UPDATE run_wakeups w SET \
                       due_at = CASE WHEN NOT w.woken AND COALESCE((SELECT e.version FROM events e \
                                   WHERE e.stream_type = 'run' AND e.stream_id = w.run_id \
                                   ORDER BY e.version DESC LIMIT 1), 0) = r.version \
                                THEN r.due ELSE $4 END, \
                       lease_owner = NULL, lease_until = NULL, woken = false \
                     FROM unnest($1::text[], $2::timestamptz[], $3::int8[]) AS r(run_id, due, version) \
                     WHERE w.run_id = r.run_id AND w.lease_owner = $5",
                )
                .bind(&ids)
                .bind(&due)
                .bind(&versions)
                .bind(now)
                .bind(owner)
                .execute(&mut *c)
                .await
                .map_err(StoreError::db("releasing runs"))?;
            }
            TxConnection::Sqlite(c) => {
                for r in finished {
                    sqlx::query("DELETE FROM run_wakeups WHERE run_id = ?1 AND lease_owner = ?2")
                        .bind(&r.run_id)
                        .bind(owner)
                        .execute(&mut *c)
                        .await
                        .map_err(StoreError::db(
                            "dropping a finished run from the wake-up queue",
                        ))?;
                }
                for r in open {
                    sqlx::query(
                        "UPDATE run_wakeups SET \
                           due_at = CASE WHEN woken = 0 AND COALESCE((SELECT e.version FROM events e \
                                       WHERE e.stream_type = 'run' AND e.stream_id = ?1 \
                                       ORDER BY e.version DESC LIMIT 1), 0) = ?3 \
                                    THEN ?2 ELSE ?4 END, \
                           lease_owner = NULL, lease_until = NULL, woken = 0 \
                         WHERE run_id = ?1 AND lease_owner = ?5",
                    )
                    .bind(&r.run_id)
                    .bind(r.due_at.map(micros))
                    .bind(r.version)
                    .bind(micros(now))
                    .bind(owner)
                    .execute(&mut *c)
                    .await
                    .map_err(StoreError::db("releasing a run"))?;
                }
            }
        }
        Ok(())
    }
}

impl EventStore {
    /// Claim up to `limit` runs due at `now` that nobody holds (or whose holder's lease
    /// ran out), leasing them to `owner` until `lease_until`. `only`: claim among
    /// these runs alone.
    pub async fn claim_runs(
        &self,
        owner: &str,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
        limit: i64,
        only: Option<&[String]>,
    ) -> Result<Vec<String>, StoreError> {
        match self.backend() {
            Backend::Postgres(pg) => sqlx::query_scalar(
                "WITH due AS ( \
                   SELECT run_id FROM run_wakeups \
                    WHERE due_at <= $3 AND (lease_until IS NULL OR lease_until < $3) \
                      AND ($5::text[] IS NULL OR run_id = ANY($5)) \
                    ORDER BY due_at LIMIT $4 FOR UPDATE SKIP LOCKED) \
                 UPDATE run_wakeups w SET lease_owner = $1, lease_until = $2, woken = false \
                   FROM due WHERE w.run_id = due.run_id RETURNING w.run_id",
            )
            .bind(owner)
            .bind(lease_until)
            .bind(now)
            .bind(limit)
            .bind(only)
            .fetch_all(pg.pool())
            .await
            .map_err(StoreError::db("claiming due runs")),
            Backend::Sqlite(lite) => {
                let only = only.map(|ids| serde_json::Value::from(ids.to_vec()).to_string());
                sqlx::query_scalar(
                    "UPDATE run_wakeups SET lease_owner = ?1, lease_until = ?2, woken = 0 \
                      WHERE run_id IN ( \
                        SELECT run_id FROM run_wakeups \
                         WHERE due_at IS NOT NULL AND due_at <= ?3 \
                           AND (lease_until IS NULL OR lease_until < ?3) \
                           AND (?5 IS NULL OR run_id IN (SELECT value FROM json_each(?5))) \
                         ORDER BY due_at LIMIT ?4) \
                     RETURNING run_id",
                )
                .bind(owner)
                .bind(micros(lease_until))
                .bind(micros(now))
                .bind(limit)
                .bind(only)
                .fetch_all(lite.writer())
                .await
                .map_err(StoreError::db("claiming due runs"))
            }
        }
    }

    /// Extend `owner`'s leases on `run_ids`; returns the runs it still holds.
    pub async fn renew_leases(
        &self,
        owner: &str,
        run_ids: &[String],
        lease_until: DateTime<Utc>,
    ) -> Result<Vec<String>, StoreError> {
        if run_ids.is_empty() {
            return Ok(Vec::new());
        }
        match self.backend() {
            Backend::Postgres(pg) => sqlx::query_scalar(
                "UPDATE run_wakeups SET lease_until = $3 \
                  WHERE run_id = ANY($2) AND lease_owner = $1 RETURNING run_id",
            )
            .bind(owner)
            .bind(run_ids)
            .bind(lease_until)
            .fetch_all(pg.pool())
            .await
            .map_err(StoreError::db("renewing leases")),
            Backend::Sqlite(lite) => sqlx::query_scalar(
                "UPDATE run_wakeups SET lease_until = ?3 \
                  WHERE run_id IN (SELECT value FROM json_each(?2)) AND lease_owner = ?1 \
                  RETURNING run_id",
            )
            .bind(owner)
            .bind(serde_json::Value::from(run_ids.to_vec()).to_string())
            .bind(micros(lease_until))
            .fetch_all(lite.writer())
            .await
            .map_err(StoreError::db("renewing leases")),
        }
    }

    /// The earliest due time among runs nobody holds, to sleep until.
    pub async fn next_wakeup(
        &self,
        now: DateTime<Utc>,
    ) -> Result<Option<DateTime<Utc>>, StoreError> {
        match self.backend() {
            Backend::Postgres(pg) => sqlx::query_scalar(
                "SELECT min(due_at) FROM run_wakeups \
                  WHERE due_at IS NOT NULL AND (lease_until IS NULL OR lease_until < $1)",
            )
            .bind(now)
            .fetch_one(pg.pool())
            .await
            .map_err(StoreError::db("reading the next wake-up")),
            Backend::Sqlite(lite) => {
                let micros: Option<i64> = sqlx::query_scalar(
                    "SELECT min(due_at) FROM run_wakeups \
                      WHERE due_at IS NOT NULL AND (lease_until IS NULL OR lease_until < ?1)",
                )
                .bind(micros(now))
                .fetch_one(lite.writer())
                .await
                .map_err(StoreError::db("reading the next wake-up"))?;
                Ok(micros.and_then(DateTime::<Utc>::from_timestamp_micros))
            }
        }
    }

    /// Every run in the wake-up queue with its due time and holder, for tests and
    /// `awl status`.
    pub async fn wakeups(
        &self,
    ) -> Result<Vec<(String, Option<DateTime<Utc>>, Option<String>)>, StoreError> {
        match self.backend() {
            Backend::Postgres(pg) => sqlx::query_as(
                "SELECT run_id, due_at, lease_owner FROM run_wakeups ORDER BY run_id",
            )
            .fetch_all(pg.pool())
            .await
            .map_err(StoreError::db("reading the wake-up queue")),
            Backend::Sqlite(lite) => {
                let rows: Vec<(String, Option<i64>, Option<String>)> = sqlx::query_as(
                    "SELECT run_id, due_at, lease_owner FROM run_wakeups ORDER BY run_id",
                )
                .fetch_all(lite.writer())
                .await
                .map_err(StoreError::db("reading the wake-up queue"))?;
                Ok(rows
                    .into_iter()
                    .map(|(id, due, owner)| {
                        (
                            id,
                            due.and_then(DateTime::<Utc>::from_timestamp_micros),
                            owner,
                        )
                    })
                    .collect())
            }
        }
    }
}
