//! Time partitions of the Postgres log (migration 0016): a run's events sit in the
//! partition of the period it started in, every other stream in one partition of
//! its own. A run partition whose period is over and whose every run finished
//! before the archive's cutoff leaves the hot log whole: it is detached from
//! `events` and attached to `events_archive` as it is, a change of the catalog
//! instead of a copy and a delete of every row. A partition that still holds an
//! unfinished run stays and is drained run by run (`store::archive`) as its runs
//! finish; once empty it is dropped.
//!
//! The embedded SQLite store has no partitions: it lists none and moves none, and
//! its archive moves rows.

use chrono::{DateTime, Utc};
use sqlx::Row;

use super::backend::Backend;
use super::{EventStore, StoreError};

/// One hot run partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunPartition {
    /// Its table.
    pub name: String,
    /// The period whose new runs it holds: from `start`, until `end`.
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
}

/// What moving whole partitions did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionsArchived {
    /// The hot partitions that left (moved into the archive, or dropped empty).
    pub partitions: Vec<String>,
    /// The runs in them.
    pub runs: Vec<String>,
    /// Their events.
    pub events: u64,
    /// The runs that finished before the cutoff in the partitions whose period is
    /// over but that stayed (they hold an unfinished run, or their runs began to
    /// move row by row): retention moves these row by row.
    pub left: Vec<String>,
}

/// How one partition's move ended.
enum Move {
    Moved,
    /// `awl_archive_run_partition` declined: the partition is not as it was looked
    /// at, or cannot move whole.
    Refused,
    /// The hot log's lock was not granted in time.
    Busy,
}

/// How long the move of one partition waits for the hot log's lock before it gives
/// up until the next pass (appends and reads queue behind a waiting ACCESS
/// EXCLUSIVE request, so it must not wait long).
const LOCK_TIMEOUT: &str = "2s";

fn epoch(seconds: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(seconds, 0).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

impl EventStore {
    /// Whether the log is partitioned (Postgres; the embedded store is not).
    pub fn has_partitions(&self) -> bool {
        matches!(self.backend(), Backend::Postgres(_))
    }

    /// The hot log's run partitions, oldest first (none on SQLite).
    pub async fn run_partitions(&self) -> Result<Vec<RunPartition>, StoreError> {
        let Backend::Postgres(b) = self.backend() else {
            return Ok(Vec::new());
        };
        let rows =
            sqlx::query("SELECT name, period_start, period_end FROM awl_run_partitions('events')")
                .fetch_all(b.pool())
                .await
                .map_err(StoreError::db("listing the log's run partitions"))?;
        rows.iter()
            .map(|row| {
                Ok(RunPartition {
                    name: row.try_get("name").map_err(StoreError::db("a partition"))?,
                    start: epoch(
                        row.try_get("period_start")
                            .map_err(StoreError::db("a partition's period"))?,
                    ),
                    end: epoch(
                        row.try_get("period_end")
                            .map_err(StoreError::db("a partition's period"))?,
                    ),
                })
            })
            .collect()
    }

    /// Move into the archive, whole, every hot run partition whose period ended by
    /// `cutoff` and whose runs all finished before it (`finished_types`: the event
    /// types that end a run), and drop the emptied ones. A partition whose move
    /// cannot get the hot log's lock soon, or that took an event since it was
    /// looked at, waits for the next pass.
    pub async fn archive_run_partitions(
        &self,
        cutoff: DateTime<Utc>,
        now: DateTime<Utc>,
        finished_types: &[&str],
    ) -> Result<PartitionsArchived, StoreError> {
        let mut done = PartitionsArchived::default();
        let Backend::Postgres(b) = self.backend() else {
            return Ok(done);
        };
        // The database's clock decides when a period is over (it stamps the events
        // and `awl_archive_run_partition` checks it), whatever the caller's says.
        let db_now: DateTime<Utc> = sqlx::query_scalar("SELECT now()")
            .fetch_one(b.pool())
            .await
            .map_err(StoreError::db("reading the database's clock"))?;
        for partition in self.run_partitions().await? {
            // Only a period that is over (runs may still start in the current one),
            // even for a cutoff in the future.
            if partition.end > cutoff.min(now).min(db_now) {
                break;
            }
            let part = partition.start.timestamp();
            let summary = sqlx::query(
                "SELECT finished, unfinished, events, last \
                   FROM awl_run_partition_summary($1, $2, $3)",
            )
            .bind(part)
            .bind(finished_types)
            .bind(cutoff)
            .fetch_one(b.pool())
            .await
            .map_err(StoreError::db(format!(
                "looking at partition {}",
                partition.name
            )))?;
            let unfinished: i64 = summary
                .try_get("unfinished")
                .map_err(StoreError::db("a partition's summary"))?;
            let runs: Vec<String> = summary
                .try_get("finished")
                .map_err(StoreError::db("a partition's summary"))?;
            if unfinished > 0 {
                done.left.extend(runs);
                continue;
            }
            let events: i64 = summary
                .try_get("events")
                .map_err(StoreError::db("a partition's summary"))?;
            let last: Option<i64> = summary
                .try_get("last")
                .map_err(StoreError::db("a partition's summary"))?;
            match self.move_partition(b.pool(), part, last, now).await? {
                Move::Moved => {
                    tracing::info!(partition = %partition.name, runs = runs.len(), events, "moved a run partition into the archive");
                    done.partitions.push(partition.name);
                    done.runs.extend(runs);
                    done.events += events.max(0) as u64;
                }
                // Its runs began to leave row by row (the archive has the period's
                // partition already), it took an event since the look, or it holds
                // the log's head: what finished goes row by row.
                Move::Refused => done.left.extend(runs),
                // The next pass tries the whole move again.
                Move::Busy => {}
            }
        }
        Ok(done)
    }

    /// One partition's move, in its own short transaction.
    async fn move_partition(
        &self,
        pool: &sqlx::PgPool,
        part: i64,
        last: Option<i64>,
        now: DateTime<Utc>,
    ) -> Result<Move, StoreError> {
        let mut tx = pool
            .begin()
            .await
            .map_err(StoreError::db("beginning a partition's move"))?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"
        )))
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db("setting a partition move's lock timeout"))?;
        let moved = sqlx::query_scalar::<_, bool>("SELECT awl_archive_run_partition($1, $2, $3)")
            .bind(part)
            .bind(last)
            .bind(now)
            .fetch_one(&mut *tx)
            .await;
        match moved {
            Ok(moved) => {
                tx.commit()
                    .await
                    .map_err(StoreError::db("committing a partition's move"))?;
                Ok(if moved { Move::Moved } else { Move::Refused })
            }
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("55P03") => {
                tracing::info!(
                    part,
                    "a run partition's move did not get the log's lock in time; trying next pass"
                );
                tx.rollback()
                    .await
                    .map_err(StoreError::db("ending a partition's move"))?;
                Ok(Move::Busy)
            }
            Err(e) => Err(StoreError::db("moving a run partition into the archive")(e)),
        }
    }
}
