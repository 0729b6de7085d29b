//! Retention: moving the streams of finished runs out of the hot `events` table into
//! `events_archive` (migration 0011). The archive is part of the log: readers of the
//! whole log read both tables by position, a stream's history and state are read from
//! the archive once it has left the hot table, and an archived event keeps its
//! position, stream and version. The one delete the log's triggers allow is this
//! move: an event leaves `events` only when the archive holds it unchanged.
//!
//! The stream holding the log's head is never moved in a batch, so the hot table's
//! highest position never goes back and appends keep taking the next one.

use chrono::{DateTime, Utc};

use crate::log::{ExpectedVersion, StreamRef, StreamType};

use super::backend::Backend;
use super::{EventStore, StoreError};

/// What one move did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Archived {
    /// The streams moved.
    pub streams: Vec<String>,
    /// Events moved.
    pub events: u64,
}

impl EventStore {
    /// Move every event of the `kind` streams `ids` into the archive, in one
    /// transaction (a stream holding the log's head is left for a later move).
    pub async fn archive_streams(
        &self,
        kind: StreamType,
        ids: &[String],
        now: DateTime<Utc>,
    ) -> Result<Archived, StoreError> {
        if ids.is_empty() {
            return Ok(Archived::default());
        }
        let head = self.head_stream().await?;
        let ids: Vec<String> = ids
            .iter()
            .filter(|id| head.as_ref() != Some(&StreamRef::new(kind, id.as_str())))
            .cloned()
            .collect();
        let events = match self.backend() {
            Backend::Postgres(b) => b.archive(kind, &ids, now).await?,
            Backend::Sqlite(b) => b.archive(kind, &ids, now).await?,
        };
        // (`events` counts what left the hot table in this move: a stream another
        // process moved first is not counted twice.)
        Ok(Archived {
            streams: if events == 0 { Vec::new() } else { ids },
            events,
        })
    }

    /// Which of the `kind` streams `ids` are still in the hot log (not archived,
    /// and not unknown).
    pub async fn hot_streams(
        &self,
        kind: StreamType,
        ids: &[String],
    ) -> Result<Vec<String>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        self.backend().hot_stream_ids(kind, ids).await
    }

    /// Whether `stream` was moved into the archive.
    pub async fn is_archived(&self, stream: &StreamRef) -> Result<bool, StoreError> {
        let found = self
            .backend()
            .read_archived_streams(stream.kind, std::slice::from_ref(&stream.id))
            .await?;
        Ok(!found.is_empty())
    }

    /// `error`, or, when it is a conflict because the stream left the hot table for
    /// the archive, [`StoreError::Archived`]: a clear refusal instead of a conflict
    /// that deciding again can never resolve.
    pub(crate) async fn explain_conflict(&self, error: StoreError) -> StoreError {
        let StoreError::Conflict {
            stream,
            expected: ExpectedVersion::Exactly(v),
            actual: 0,
        } = &error
        else {
            return error;
        };
        if *v > 0 && matches!(self.is_archived(stream).await, Ok(true)) {
            return StoreError::Archived(stream.clone());
        }
        error
    }

    /// The size of the events of a hot stream from `from_version` on (their
    /// payloads as JSON text): what a history limit in bytes is held against.
    pub async fn stream_bytes(
        &self,
        stream: &StreamRef,
        from_version: i64,
    ) -> Result<u64, StoreError> {
        self.backend().stream_bytes(stream, from_version).await
    }

    /// The stream of the event at the log's head.
    async fn head_stream(&self) -> Result<Option<StreamRef>, StoreError> {
        let head = self.head().await?;
        if head == 0 {
            return Ok(None);
        }
        let filter = crate::log::EventFilter::default();
        let (events, _) = self.read_page(head - 1, 1, &filter).await?;
        Ok(events.into_iter().next().map(|e| e.stream))
    }
}
