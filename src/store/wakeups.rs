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
//!
//! Fencing (migration 0008): every claim takes the next `lease_epoch` of the row and
//! returns it in a [`Lease`]. A worker paused past its lease may come back after
//! another worker claimed the run; before it writes anything for a run, its commit
//! calls [`StoreTx::fence`], which locks the run's row and keeps only the runs whose
//! row still carries the worker's epoch. The lock holds until the commit, so no claim
//! can slip in between the check and the write (claims skip locked rows). Releases
//! and renewals match the epoch too: a stale holder can neither write, give back nor
//! keep a run.

use chrono::{DateTime, Utc};

use super::tx::{StoreTx, TxConnection};
use super::{EventStore, StoreError, backend::Backend};

/// A run claimed by a worker, with the fencing token of that claim.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Lease {
    pub run_id: String,
    /// Taken by the claim: one more than the row's previous claim.
    pub epoch: i64,
}

/// Giving a run back after deciding on it.
#[derive(Debug, Clone, PartialEq)]
pub struct Release {
    pub run_id: String,
    /// The epoch of the claim being given back: a release by a stale holder does
    /// nothing.
    pub epoch: i64,
    /// When the run is due next, if nothing else happens.
    pub due_at: Option<DateTime<Utc>>,
    /// The version of the run's stream the decision was made on (after its own
    /// events).
    pub version: i64,
    /// The run ended: drop its row.
    pub finished: bool,
    /// The run is queued for a concurrency slot it found full: it waits for that
    /// scope (woken when a slot frees; `due_at` is only a safety net).
    pub waiting: Option<Waiting>,
}

/// What a queued run waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// The scope whose slots were all held.
    pub scope: String,
    /// The scope of the run's key (its share is weighed against other keys').
    pub fair_key: Option<String>,
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
        self.enqueue_run(run_id, due_at, 0).await
    }

    /// [`StoreTx::wake_run`], and a run new to the queue gets `priority` (claims
    /// take higher priorities first among due runs).
    pub async fn enqueue_run(
        &mut self,
        run_id: &str,
        due_at: DateTime<Utc>,
        priority: i32,
    ) -> Result<(), StoreError> {
        let what = format!("waking run {run_id}");
        match self.connection() {
            TxConnection::Postgres(c) => sqlx::query(
                "INSERT INTO run_wakeups (run_id, due_at, priority) VALUES ($1, $2, $3) \
                 ON CONFLICT (run_id) DO UPDATE SET due_at = \
                   LEAST(COALESCE(run_wakeups.due_at, EXCLUDED.due_at), EXCLUDED.due_at), \
                   woken = true",
            )
            .bind(run_id)
            .bind(due_at)
            .bind(priority)
            .execute(c)
            .await
            .map(|_| ()),
            TxConnection::Sqlite(c) => sqlx::query(
                "INSERT INTO run_wakeups (run_id, due_at, priority) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (run_id) DO UPDATE SET due_at = \
                   MIN(COALESCE(run_wakeups.due_at, excluded.due_at), excluded.due_at), \
                   woken = 1",
            )
            .bind(run_id)
            .bind(micros(due_at))
            .bind(priority)
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
                // Each statement only when it has rows: this runs under the append
                // lock, so a statement with nothing to do still holds up every append.
                if !finished.is_empty() {
                    let ids: Vec<&str> = finished.iter().map(|r| r.run_id.as_str()).collect();
                    let epochs: Vec<i64> = finished.iter().map(|r| r.epoch).collect();
                    sqlx::query(
                    "DELETE FROM run_wakeups w USING unnest($1::text[], $3::int8[]) AS r(run_id, epoch) \
                      WHERE w.run_id = r.run_id AND w.lease_epoch = r.epoch AND w.lease_owner = $2",
                )
                    .bind(&ids)
                    .bind(owner)
                    .bind(&epochs)
                    .execute(&mut *c)
                    .await
                    .map_err(StoreError::db(
                        "dropping finished runs from the wake-up queue",
                    ))?;
                }
                if open.is_empty() {
                    return Ok(());
                }
                let ids: Vec<&str> = open.iter().map(|r| r.run_id.as_str()).collect();
                let due: Vec<Option<DateTime<Utc>>> = open.iter().map(|r| r.due_at).collect();
                let versions: Vec<i64> = open.iter().map(|r| r.version).collect();
                let epochs: Vec<i64> = open.iter().map(|r| r.epoch).collect();
                let waiting: Vec<Option<&str>> = open
                    .iter()
                    .map(|r| r.waiting.as_ref().map(|w| w.scope.as_str()))
                    .collect();
                let fair: Vec<Option<&str>> = open
                    .iter()
                    .map(|r| r.waiting.as_ref().and_then(|w| w.fair_key.as_deref()))
                    .collect();
                // A run that waits for a slot waits while nobody woke it: a wake-up
                // that came meanwhile (a slot freed, a cancel) makes it due now.
                sqlx::query(
                    "UPDATE run_wakeups w SET \
                       due_at = CASE WHEN NOT w.woken AND COALESCE((SELECT e.version FROM events e \
                                   WHERE e.stream_type = 'run' AND e.stream_id = w.run_id AND e.part > 0 \
                                   ORDER BY e.version DESC LIMIT 1), 0) = r.version \
                                THEN r.due ELSE $4 END, \
                       waiting_for = CASE WHEN w.woken THEN NULL ELSE r.waiting END, \
                       waiting_since = CASE WHEN r.waiting IS NULL THEN NULL \
                                            ELSE COALESCE(w.waiting_since, $4) END, \
                       fair_key = r.fair, \
                       lease_owner = NULL, lease_until = NULL, woken = false \
                     FROM unnest($1::text[], $2::timestamptz[], $3::int8[], $6::int8[], \
                                 $7::text[], $8::text[]) \
                          AS r(run_id, due, version, epoch, waiting, fair) \
                     WHERE w.run_id = r.run_id AND w.lease_owner = $5 AND w.lease_epoch = r.epoch",
                )
                .bind(&ids)
                .bind(&due)
                .bind(&versions)
                .bind(now)
                .bind(owner)
                .bind(&epochs)
                .bind(&waiting)
                .bind(&fair)
                .execute(&mut *c)
                .await
                .map_err(StoreError::db("releasing runs"))?;
            }
            TxConnection::Sqlite(c) => {
                for r in finished {
                    sqlx::query(
                        "DELETE FROM run_wakeups \
                          WHERE run_id = ?1 AND lease_owner = ?2 AND lease_epoch = ?3",
                    )
                    .bind(&r.run_id)
                    .bind(owner)
                    .bind(r.epoch)
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
                           waiting_for = CASE WHEN woken = 1 THEN NULL ELSE ?7 END, \
                           waiting_since = CASE WHEN ?7 IS NULL THEN NULL \
                                                ELSE COALESCE(waiting_since, ?4) END, \
                           fair_key = ?8, \
                           lease_owner = NULL, lease_until = NULL, woken = 0 \
                         WHERE run_id = ?1 AND lease_owner = ?5 AND lease_epoch = ?6",
                    )
                    .bind(&r.run_id)
                    .bind(r.due_at.map(micros))
                    .bind(r.version)
                    .bind(micros(now))
                    .bind(owner)
                    .bind(r.epoch)
                    .bind(r.waiting.as_ref().map(|w| w.scope.as_str()))
                    .bind(r.waiting.as_ref().and_then(|w| w.fair_key.as_deref()))
                    .execute(&mut *c)
                    .await
                    .map_err(StoreError::db("releasing a run"))?;
                }
            }
        }
        Ok(())
    }

    /// Of `leases`, the runs `owner` still holds under those very claims, their rows
    /// locked until this transaction ends. A run missing from the answer was claimed
    /// again by someone else (or given back): nothing may be written for it.
    pub async fn fence(
        &mut self,
        owner: &str,
        leases: &[Lease],
    ) -> Result<Vec<String>, StoreError> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let mut sorted: Vec<&Lease> = leases.iter().collect();
        sorted.sort();
        let ids: Vec<&str> = sorted.iter().map(|l| l.run_id.as_str()).collect();
        let epochs: Vec<i64> = sorted.iter().map(|l| l.epoch).collect();
        match self.connection() {
            // Rows are locked in run order, so two fences never wait on each other.
            TxConnection::Postgres(c) => sqlx::query_scalar(
                "SELECT w.run_id FROM run_wakeups w \
                   JOIN unnest($1::text[], $2::int8[]) AS l(run_id, epoch) \
                     ON w.run_id = l.run_id AND w.lease_epoch = l.epoch \
                  WHERE w.lease_owner = $3 ORDER BY w.run_id FOR UPDATE OF w",
            )
            .bind(&ids)
            .bind(&epochs)
            .bind(owner)
            .fetch_all(c)
            .await
            .map_err(StoreError::db(
                "checking the leases of the runs to write for",
            )),
            // One writer at a time: nobody can claim between this check and the commit.
            TxConnection::Sqlite(c) => {
                let pairs = serde_json::Value::from(
                    sorted
                        .iter()
                        .map(|l| serde_json::json!([l.run_id, l.epoch]))
                        .collect::<Vec<_>>(),
                )
                .to_string();
                sqlx::query_scalar(
                    "SELECT w.run_id FROM run_wakeups w \
                       JOIN json_each(?1) AS l \
                         ON w.run_id = json_extract(l.value, '$[0]') \
                        AND w.lease_epoch = json_extract(l.value, '$[1]') \
                      WHERE w.lease_owner = ?2 ORDER BY w.run_id",
                )
                .bind(pairs)
                .bind(owner)
                .fetch_all(c)
                .await
                .map_err(StoreError::db(
                    "checking the leases of the runs to write for",
                ))
            }
        }
    }
}

impl EventStore {
    /// Claim up to `limit` runs due at `now` that nobody holds (or whose holder's lease
    /// ran out), leasing them to `owner` until `lease_until`, each under a new epoch.
    /// `only`: claim among these runs alone.
    pub async fn claim_runs(
        &self,
        owner: &str,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
        limit: i64,
        only: Option<&[String]>,
    ) -> Result<Vec<Lease>, StoreError> {
        let rows: Vec<(String, i64)> = match self.backend() {
            Backend::Postgres(pg) => sqlx::query_as(
                "WITH due AS ( \
                   SELECT run_id FROM run_wakeups \
                    WHERE due_at <= $3 AND (lease_until IS NULL OR lease_until < $3) \
                      AND ($5::text[] IS NULL OR run_id = ANY($5)) \
                    ORDER BY priority DESC, due_at LIMIT $4 FOR UPDATE SKIP LOCKED) \
                 UPDATE run_wakeups w SET lease_owner = $1, lease_until = $2, woken = false, \
                        lease_epoch = w.lease_epoch + 1 \
                   FROM due WHERE w.run_id = due.run_id RETURNING w.run_id, w.lease_epoch",
            )
            .bind(owner)
            .bind(lease_until)
            .bind(now)
            .bind(limit)
            .bind(only)
            .fetch_all(pg.pool())
            .await
            .map_err(StoreError::db("claiming due runs"))?,
            Backend::Sqlite(lite) => {
                let only = only.map(|ids| serde_json::Value::from(ids.to_vec()).to_string());
                sqlx::query_as(
                    "UPDATE run_wakeups SET lease_owner = ?1, lease_until = ?2, woken = 0, \
                            lease_epoch = lease_epoch + 1 \
                      WHERE run_id IN ( \
                        SELECT run_id FROM run_wakeups \
                         WHERE due_at IS NOT NULL AND due_at <= ?3 \
                           AND (lease_until IS NULL OR lease_until < ?3) \
                           AND (?5 IS NULL OR run_id IN (SELECT value FROM json_each(?5))) \
                         ORDER BY priority DESC, due_at LIMIT ?4) \
                     RETURNING run_id, lease_epoch",
                )
                .bind(owner)
                .bind(micros(lease_until))
                .bind(micros(now))
                .bind(limit)
                .bind(only)
                .fetch_all(lite.writer())
                .await
                .map_err(StoreError::db("claiming due runs"))?
            }
        };
        Ok(rows
            .into_iter()
            .map(|(run_id, epoch)| Lease { run_id, epoch })
            .collect())
    }

    /// Extend `owner`'s `leases`; returns the runs it still holds under those claims.
    pub async fn renew_leases(
        &self,
        owner: &str,
        leases: &[Lease],
        lease_until: DateTime<Utc>,
    ) -> Result<Vec<String>, StoreError> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        match self.backend() {
            Backend::Postgres(pg) => {
                let ids: Vec<&str> = leases.iter().map(|l| l.run_id.as_str()).collect();
                let epochs: Vec<i64> = leases.iter().map(|l| l.epoch).collect();
                sqlx::query_scalar(
                    "UPDATE run_wakeups w SET lease_until = $3 \
                       FROM unnest($2::text[], $4::int8[]) AS l(run_id, epoch) \
                      WHERE w.run_id = l.run_id AND w.lease_epoch = l.epoch \
                        AND w.lease_owner = $1 RETURNING w.run_id",
                )
                .bind(owner)
                .bind(&ids)
                .bind(lease_until)
                .bind(&epochs)
                .fetch_all(pg.pool())
                .await
                .map_err(StoreError::db("renewing leases"))
            }
            Backend::Sqlite(lite) => {
                let pairs = serde_json::Value::from(
                    leases
                        .iter()
                        .map(|l| serde_json::json!([l.run_id, l.epoch]))
                        .collect::<Vec<_>>(),
                )
                .to_string();
                sqlx::query_scalar(
                    "UPDATE run_wakeups SET lease_until = ?3 \
                      WHERE lease_owner = ?1 AND EXISTS (SELECT 1 FROM json_each(?2) AS l \
                        WHERE json_extract(l.value, '$[0]') = run_wakeups.run_id \
                          AND json_extract(l.value, '$[1]') = run_wakeups.lease_epoch) \
                      RETURNING run_id",
                )
                .bind(owner)
                .bind(pairs)
                .bind(micros(lease_until))
                .fetch_all(lite.writer())
                .await
                .map_err(StoreError::db("renewing leases"))
            }
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

    /// Whether any run is in the wake-up queue (unfinished): a cheap check for
    /// waiting until a batch of runs is done.
    pub async fn has_wakeups(&self) -> Result<bool, StoreError> {
        let sql = "SELECT EXISTS (SELECT 1 FROM run_wakeups)";
        match self.backend() {
            Backend::Postgres(pg) => sqlx::query_scalar(sql).fetch_one(pg.pool()).await,
            Backend::Sqlite(lite) => sqlx::query_scalar(sql).fetch_one(lite.writer()).await,
        }
        .map_err(StoreError::db("checking the wake-up queue"))
    }
}
