//! The two backends behind one set of calls.

use crate::log::{AppendRequest, EventFilter, StreamRef};

use super::StoreError;
use super::decode::RawEvent;
use super::plan::Recorded;
use super::postgres::PgBackend;
use super::sqlite::SqliteBackend;

#[derive(Clone)]
pub(crate) enum Backend {
    Postgres(PgBackend),
    Sqlite(SqliteBackend),
}

impl Backend {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Backend::Postgres(_) => "postgres",
            Backend::Sqlite(_) => "sqlite",
        }
    }

    pub(crate) async fn migrate(&self) -> Result<(), StoreError> {
        match self {
            Backend::Postgres(b) => b.migrate().await,
            Backend::Sqlite(b) => b.migrate().await,
        }
    }

    pub(crate) async fn append_batch(
        &self,
        requests: &[&AppendRequest],
    ) -> Result<Recorded, StoreError> {
        match self {
            Backend::Postgres(b) => b.append_batch(requests).await,
            Backend::Sqlite(b) => b.append_batch(requests).await,
        }
    }

    /// The log's write lock held by a transaction of its own, to form a batch
    /// under it: Postgres only (`None`: append with [`Self::append_batch`]).
    pub(crate) async fn lock_log(&self) -> Option<Result<super::postgres::LockedLog, StoreError>> {
        match self {
            Backend::Postgres(b) => Some(b.lock_log().await),
            Backend::Sqlite(_) => None,
        }
    }

    pub(crate) async fn head(&self) -> Result<i64, StoreError> {
        match self {
            Backend::Postgres(b) => b.head().await,
            Backend::Sqlite(b) => b.head().await,
        }
    }

    pub(crate) async fn read_stream(
        &self,
        stream: &StreamRef,
        after_version: i64,
        limit: i64,
    ) -> Result<Vec<RawEvent>, StoreError> {
        match self {
            Backend::Postgres(b) => b.read_stream(stream, after_version, limit).await,
            Backend::Sqlite(b) => b.read_stream(stream, after_version, limit).await,
        }
    }

    pub(crate) async fn read_streams(
        &self,
        kind: crate::log::StreamType,
        ids: &[String],
    ) -> Result<Vec<RawEvent>, StoreError> {
        match self {
            Backend::Postgres(b) => b.read_streams(kind, ids).await,
            Backend::Sqlite(b) => b.read_streams(kind, ids).await,
        }
    }

    pub(crate) async fn read_archived_streams(
        &self,
        kind: crate::log::StreamType,
        ids: &[String],
    ) -> Result<Vec<RawEvent>, StoreError> {
        match self {
            Backend::Postgres(b) => b.read_archived_streams(kind, ids).await,
            Backend::Sqlite(b) => b.read_archived_streams(kind, ids).await,
        }
    }

    pub(crate) async fn hot_stream_ids(
        &self,
        kind: crate::log::StreamType,
        ids: &[String],
    ) -> Result<Vec<String>, StoreError> {
        match self {
            Backend::Postgres(b) => b.hot_stream_ids(kind, ids).await,
            Backend::Sqlite(b) => b.hot_stream_ids(kind, ids).await,
        }
    }

    pub(crate) async fn stream_bytes(
        &self,
        stream: &StreamRef,
        from_version: i64,
    ) -> Result<u64, StoreError> {
        match self {
            Backend::Postgres(b) => b.stream_bytes(stream, from_version).await,
            Backend::Sqlite(b) => b.stream_bytes(stream, from_version).await,
        }
    }

    pub(crate) async fn read_all(
        &self,
        after: i64,
        limit: i64,
        filter: &EventFilter,
    ) -> Result<(Vec<RawEvent>, i64), StoreError> {
        match self {
            Backend::Postgres(b) => b.read_all(after, limit, filter).await,
            Backend::Sqlite(b) => b.read_all(after, limit, filter).await,
        }
    }
}
