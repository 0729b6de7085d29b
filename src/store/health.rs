//! What the store can say about its own health, for `/ready`, the metrics and the
//! start-up warnings: does the database answer, are the migrations applied, how busy
//! is the pool, will an acknowledged write survive a crash, and how many runs wait
//! for a worker.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::backend::Backend;
use super::{EventStore, StoreError, migrations};

/// How long a health query may take before the database counts as unreachable.
pub const PING_TIMEOUT: Duration = Duration::from_secs(2);

/// Due run wake-ups that no worker holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DueWakeups {
    pub count: u64,
    /// The earliest due time among them.
    pub oldest: Option<DateTime<Utc>>,
}

impl EventStore {
    /// Answer a trivial query within [`PING_TIMEOUT`].
    pub async fn ping(&self) -> Result<(), StoreError> {
        let query = async {
            let answered = match self.backend() {
                Backend::Postgres(pg) => {
                    sqlx::query("SELECT 1").execute(pg.pool()).await.map(|_| ())
                }
                Backend::Sqlite(lite) => sqlx::query("SELECT 1")
                    .execute(lite.reader())
                    .await
                    .map(|_| ()),
            };
            answered.map_err(StoreError::db("pinging the database"))
        };
        tokio::time::timeout(PING_TIMEOUT, query)
            .await
            .map_err(|_| {
                StoreError::Unavailable(format!(
                    "the database did not answer within {} s",
                    PING_TIMEOUT.as_secs()
                ))
            })?
    }

    /// The versions of the embedded migrations not applied to this database.
    pub async fn pending_migrations(&self) -> Result<Vec<i64>, StoreError> {
        let (embedded, applied): (Vec<i64>, Vec<i64>) = match self.backend() {
            Backend::Postgres(pg) => (
                migrations::postgres().iter().map(|m| m.version).collect(),
                sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success")
                    .fetch_all(pg.pool())
                    .await
                    .map_err(StoreError::db("reading the applied migrations"))?,
            ),
            Backend::Sqlite(lite) => (
                migrations::sqlite().iter().map(|m| m.version).collect(),
                sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success")
                    .fetch_all(lite.reader())
                    .await
                    .map_err(StoreError::db("reading the applied migrations"))?,
            ),
        };
        Ok(embedded
            .into_iter()
            .filter(|v| !applied.contains(v))
            .collect())
    }

    /// The pool's open connections and how many of them are idle.
    pub fn pool_use(&self) -> (u32, u32) {
        let (size, idle) = match self.backend() {
            Backend::Postgres(pg) => (pg.pool().size(), pg.pool().num_idle()),
            Backend::Sqlite(lite) => (lite.reader().size(), lite.reader().num_idle()),
        };
        (size, u32::try_from(idle).unwrap_or(u32::MAX))
    }

    /// Warnings, one per setting, when the database could lose acknowledged events in
    /// a crash (Postgres `fsync`, `synchronous_commit` or `full_page_writes` off;
    /// SQLite's `synchronous` below FULL).
    pub async fn durability_warnings(&self) -> Result<Vec<String>, StoreError> {
        match self.backend() {
            Backend::Postgres(pg) => {
                let mut settings = Vec::new();
                for name in ["fsync", "synchronous_commit", "full_page_writes"] {
                    let value: String = sqlx::query_scalar("SELECT current_setting($1)")
                        .bind(name)
                        .fetch_one(pg.pool())
                        .await
                        .map_err(StoreError::db(format!("reading the setting {name}")))?;
                    settings.push((name, value));
                }
                Ok(postgres_durability_warnings(&settings))
            }
            Backend::Sqlite(lite) => {
                let level: i64 = sqlx::query_scalar("PRAGMA synchronous")
                    .fetch_one(lite.writer())
                    .await
                    .map_err(StoreError::db("reading PRAGMA synchronous"))?;
                Ok(sqlite_durability_warnings(level))
            }
        }
    }

    /// Due wake-ups that no worker holds at `now`, and the oldest due time.
    pub async fn due_wakeups(&self, now: DateTime<Utc>) -> Result<DueWakeups, StoreError> {
        const PG: &str = "SELECT count(*), min(due_at) FROM run_wakeups \
             WHERE due_at IS NOT NULL AND due_at <= $1 AND (lease_until IS NULL OR lease_until < $1)";
        const LITE: &str = "SELECT count(*), min(due_at) FROM run_wakeups \
             WHERE due_at IS NOT NULL AND due_at <= ?1 AND (lease_until IS NULL OR lease_until < ?1)";
        match self.backend() {
            Backend::Postgres(pg) => {
                let (count, oldest): (i64, Option<DateTime<Utc>>) = sqlx::query_as(PG)
                    .bind(now)
                    .fetch_one(pg.pool())
                    .await
                    .map_err(StoreError::db("counting due wake-ups"))?;
                Ok(DueWakeups {
                    count: count.max(0) as u64,
                    oldest,
                })
            }
            Backend::Sqlite(lite) => {
                let (count, oldest): (i64, Option<i64>) = sqlx::query_as(LITE)
                    .bind(now.timestamp_micros())
                    .fetch_one(lite.reader())
                    .await
                    .map_err(StoreError::db("counting due wake-ups"))?;
                Ok(DueWakeups {
                    count: count.max(0) as u64,
                    oldest: oldest.and_then(DateTime::<Utc>::from_timestamp_micros),
                })
            }
        }
    }
}

/// What Postgres settings (name, value) put acknowledged events at risk.
pub fn postgres_durability_warnings(settings: &[(&str, String)]) -> Vec<String> {
    settings
        .iter()
        .filter_map(|(name, value)| {
            let off = value.eq_ignore_ascii_case("off");
            let why = match *name {
                "fsync" => {
                    "a crash of the database server can corrupt the log or lose committed events"
                }
                "synchronous_commit" => {
                    "events acknowledged in the last moments before a crash can be lost"
                }
                "full_page_writes" => "a crash during a page write can corrupt the log",
                _ => return None,
            };
            off.then(|| format!("Postgres runs with {name} = {value}: {why}"))
        })
        .collect()
}

/// What SQLite's `synchronous` level (0 OFF, 1 NORMAL, 2 FULL, 3 EXTRA) risks.
pub fn sqlite_durability_warnings(level: i64) -> Vec<String> {
    if level >= 2 {
        Vec::new()
    } else {
        vec![format!(
            "SQLite runs with synchronous = {level} (below FULL): events acknowledged before a power loss can be lost"
        )]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_that_risk_acknowledged_events_are_named() {
        let on = |v: &str| v.to_string();
        assert!(
            postgres_durability_warnings(&[
                ("fsync", on("on")),
                ("synchronous_commit", on("on")),
                ("full_page_writes", on("on")),
            ])
            .is_empty()
        );
        let warnings = postgres_durability_warnings(&[
            ("fsync", on("off")),
            ("synchronous_commit", on("local")),
            ("full_page_writes", on("OFF")),
        ]);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("fsync = off"));
        assert!(warnings[1].contains("full_page_writes"));
        assert!(
            postgres_durability_warnings(&[("synchronous_commit", on("off"))])[0]
                .contains("synchronous_commit = off")
        );
        assert!(sqlite_durability_warnings(2).is_empty());
        assert_eq!(sqlite_durability_warnings(1).len(), 1);
    }
}
