//! A read database for views: a streaming replica of the primary's Postgres.
//!
//! Views (the board's Kanban rows, runs, timelines, the inbox, analytics, audit) are
//! read models the projections write on the primary. A physical streaming replica
//! holds the same tables a moment later, so their queries can be served there and
//! leave the primary's cores to appends, claims and checkpoints. Nothing is ever
//! written through a read store: it is opened without migrations, and checked at
//! open to be the same cluster and database as the primary (a URL naming another
//! database would serve someone else's views) with the same migrations applied.
//! How far it is behind is measured in the log's own unit, events: the primary's
//! head minus the head the replica has replayed.

use super::backend::Backend;
use super::{EventStore, StoreError, StoreLocation, StoreOptions, redact};

/// Where a read database stands against its primary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaStatus {
    /// Whether it is a standby replaying the primary's WAL (false: the primary itself).
    pub in_recovery: bool,
    /// The primary's head.
    pub primary_head: i64,
    /// The last event the read database has.
    pub replica_head: i64,
}

impl ReplicaStatus {
    /// Events the read database is behind the log.
    pub fn lag(&self) -> i64 {
        (self.primary_head - self.replica_head).max(0)
    }
}

/// Who a Postgres database is: its cluster's system identifier (shared by a primary
/// and its physical replicas) and the database's name.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Identity {
    system: i64,
    database: String,
}

impl EventStore {
    /// Open `location` as the read database of this (primary) store: Postgres only,
    /// no migrations run, refused unless it is this store's cluster and database
    /// (a streaming replica of it, or the primary itself) with every migration applied.
    pub async fn open_read_replica(
        &self,
        location: &StoreLocation,
        max_connections: u32,
    ) -> Result<EventStore, StoreError> {
        let refuse = |reason: String| StoreError::Config {
            location: match location {
                StoreLocation::Postgres(url) => redact(url),
                StoreLocation::Sqlite(path) => path.display().to_string(),
            },
            reason,
        };
        if !matches!(location, StoreLocation::Postgres(_)) || self.backend_name() != "postgres" {
            return Err(refuse(
                "a read database is a streaming replica of a Postgres store: both the store \
                 and the read database must be postgres:// URLs"
                    .into(),
            ));
        }
        let options = StoreOptions {
            migrate: false,
            max_connections,
            ..StoreOptions::default()
        };
        let replica = EventStore::open(location, options).await?;
        let (primary_id, replica_id) = (self.identity().await?, replica.identity().await?);
        if primary_id != replica_id {
            return Err(refuse(format!(
                "it is not a replica of the store: the store is database {:?} of cluster {}, \
                 the read database is {:?} of cluster {}",
                primary_id.database, primary_id.system, replica_id.database, replica_id.system
            )));
        }
        let pending = replica.pending_migrations().await?;
        if !pending.is_empty() {
            return Err(refuse(format!(
                "its schema lacks migrations {pending:?} that the store has (is it replaying?)"
            )));
        }
        Ok(replica)
    }

    /// Where `replica` (opened with [`EventStore::open_read_replica`]) stands against
    /// this store.
    pub async fn replica_status(&self, replica: &EventStore) -> Result<ReplicaStatus, StoreError> {
        let in_recovery: bool = match replica.backend() {
            Backend::Postgres(pg) => sqlx::query_scalar("SELECT pg_is_in_recovery()")
                .fetch_one(pg.pool())
                .await
                .map_err(StoreError::db(
                    "asking the read database whether it is a standby",
                ))?,
            Backend::Sqlite(_) => false,
        };
        // The replica's head first: read second, the primary's can only be further on,
        // so the lag is never understated.
        let replica_head = replica.head().await?;
        let primary_head = self.head().await?;
        Ok(ReplicaStatus {
            in_recovery,
            primary_head,
            replica_head,
        })
    }

    /// Wait until `replica` has replayed everything this store's cluster wrote up to
    /// now (its WAL position), for at most `limit`: so tables just created here (the
    /// read models a server prepares at start) exist there before a view is asked for.
    /// Immediate when `replica` is not a standby.
    pub async fn wait_for_replica(
        &self,
        replica: &EventStore,
        limit: std::time::Duration,
    ) -> Result<(), StoreError> {
        let (Backend::Postgres(primary), Backend::Postgres(read)) =
            (self.backend(), replica.backend())
        else {
            return Ok(());
        };
        let written: String = sqlx::query_scalar("SELECT pg_current_wal_lsn()::text")
            .fetch_one(primary.pool())
            .await
            .map_err(StoreError::db("reading the primary's WAL position"))?;
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            // NULL when not a standby: nothing to wait for.
            let replayed: Option<bool> =
                sqlx::query_scalar("SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn")
                    .bind(&written)
                    .fetch_one(read.pool())
                    .await
                    .map_err(StoreError::db(
                        "reading the read database's replay position",
                    ))?;
            if replayed != Some(false) {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(StoreError::Unavailable(format!(
                    "the read database had not replayed the primary's WAL up to {written} \
                     after {} s",
                    limit.as_secs()
                )));
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    async fn identity(&self) -> Result<Identity, StoreError> {
        let Backend::Postgres(pg) = self.backend() else {
            return Err(StoreError::Unavailable(
                "only a Postgres store has a cluster identity".into(),
            ));
        };
        let (system, database): (i64, String) = sqlx::query_as(
            "SELECT system_identifier, current_database()::text FROM pg_control_system()",
        )
        .fetch_one(pg.pool())
        .await
        .map_err(StoreError::db("reading the cluster's system identifier"))?;
        Ok(Identity { system, database })
    }
}
