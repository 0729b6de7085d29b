//! The event store: one contract, two backends (Postgres and embedded SQLite).
//!
//! [`EventStore`] is the only way into the log. It appends with optimistic
//! concurrency (group-committed, see [`appender`]), reads a stream, reads the whole
//! log in pages, tails it live, and opens transactions that combine events with other
//! rows ([`StoreTx`]). Stored rows come back through the upcasters as
//! [`RecordedEvent`]s; a row that cannot be read is a [`StoreError::Corrupt`] naming
//! it. Only this module contains SQL for the log.

pub mod appender;
mod archive;
mod backend;
mod chat;
pub mod command;
mod decode;
pub mod domain_io;
mod error;
mod feed;
mod flow;
mod follower_lease;
pub mod health;
mod keyring;
mod location;
mod migrations;
mod partitions;
mod plan;
mod postgres;
mod presence;
mod rate;
mod replica;
pub mod repository;
pub mod rows;
mod signals;
mod sqlite;
mod tail;
mod tokens;
mod tx;
mod wakeups;

pub use archive::Archived;
pub use chat::ChatUser;

use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;
use tokio::sync::{OnceCell, mpsc, oneshot, watch};
use tokio::task::AbortHandle;

use crate::log::{AppendRequest, Appended, EventFilter, RecordedEvent, StreamRef, Upcasters};

use backend::Backend;
pub use error::StoreError;
pub use flow::{SlotAnswer, SlotRequest};
pub use follower_lease::{FollowerLease, until_held};
pub use location::{DEFAULT_SQLITE_PATH, StoreLocation, redact};
pub use partitions::{PartitionsArchived, RunPartition};
pub(crate) use plan::reached_head;
pub use replica::ReplicaStatus;
pub use tail::{FollowedPage, Following, TAIL_PAGE};
pub use tokens::TokenRecord;
pub use tx::{StoreTx, TxConnection};
pub use wakeups::{Lease, Release, Waiting};

/// How a store is opened.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Apply migrations when opening (the default; `awl migrate` does it explicitly).
    pub migrate: bool,
    /// Connections in the pool (Postgres) or read connections (SQLite).
    pub max_connections: u32,
    /// How often a caught-up tail re-reads without a wake-up signal.
    pub tail_poll: Option<Duration>,
    /// Upcasters applied to every event read.
    pub upcasters: Upcasters,
    /// Postgres only: the database's own address, for what needs a session of its
    /// own, when the store's URL goes through a pooler in transaction mode
    /// (PgBouncer 1.21 or later, with `max_prepared_statements`): the LISTEN
    /// connection that wakes followers and workers, and the migrations (whose lock is
    /// held across statements). Without it, both use the store's URL.
    pub session_url: Option<String>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            migrate: true,
            max_connections: 16,
            tail_poll: None,
            upcasters: crate::domain::upcasters::all(),
            session_url: None,
        }
    }
}

/// The event log. Cheap to clone; all clones share one pool and one appender.
#[derive(Clone)]
pub struct EventStore {
    inner: Arc<Inner>,
}

struct Inner {
    backend: Backend,
    upcasters: Upcasters,
    jobs: mpsc::Sender<appender::Job>,
    signals: Arc<signals::Signals>,
    feed: Arc<feed::Feed>,
    tail_poll: Duration,
    listener: OnceCell<AbortHandle>,
    appender: AbortHandle,
    location: StoreLocation,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.appender.abort();
        if let Some(listener) = self.listener.get() {
            listener.abort();
        }
    }
}

impl EventStore {
    /// Open the store at `location`, applying migrations unless told not to.
    pub async fn open(location: &StoreLocation, options: StoreOptions) -> Result<Self, StoreError> {
        let backend = match location {
            StoreLocation::Postgres(url) => Backend::Postgres(
                postgres::PgBackend::connect(
                    url,
                    options.max_connections,
                    options.session_url.as_deref(),
                )
                .await?,
            ),
            StoreLocation::Sqlite(_) if options.session_url.is_some() => {
                return Err(StoreError::Config {
                    location: location.to_string(),
                    reason: "a session URL applies to a Postgres store only".into(),
                });
            }
            StoreLocation::Sqlite(path) => {
                Backend::Sqlite(sqlite::SqliteBackend::open(path, options.max_connections).await?)
            }
        };
        if options.migrate {
            backend.migrate().await?;
        }
        let tail_poll = options.tail_poll.unwrap_or(match backend {
            Backend::Postgres(_) => Duration::from_secs(1),
            Backend::Sqlite(_) => Duration::from_millis(250),
        });
        let (jobs_tx, jobs_rx) = mpsc::channel(4_096);
        let signals = Arc::new(signals::Signals::new());
        let feed = Arc::new(feed::Feed::default());
        let appender = tokio::spawn(appender::run(
            backend.clone(),
            jobs_rx,
            appender::Committed {
                signals: signals.clone(),
                feed: feed.clone(),
                upcasters: options.upcasters.clone(),
            },
        ));
        Ok(Self {
            inner: Arc::new(Inner {
                backend,
                upcasters: options.upcasters,
                jobs: jobs_tx,
                signals,
                feed,
                tail_poll,
                listener: OnceCell::new(),
                appender: appender.abort_handle(),
                location: location.clone(),
            }),
        })
    }

    /// Open with default options.
    pub async fn open_default(location: &StoreLocation) -> Result<Self, StoreError> {
        Self::open(location, StoreOptions::default()).await
    }

    pub fn location(&self) -> &StoreLocation {
        &self.inner.location
    }

    pub fn backend_name(&self) -> &'static str {
        self.inner.backend.name()
    }

    /// Apply pending migrations (idempotent).
    pub async fn migrate(&self) -> Result<(), StoreError> {
        self.inner.backend.migrate().await
    }

    /// Apply the migrations up to `version` only, leaving the store as an older awl
    /// did: for tests of a later migration on a log that already holds events
    /// (open with `migrate: false` first).
    #[doc(hidden)]
    pub async fn migrate_to(&self, version: i64) -> Result<(), StoreError> {
        match &self.inner.backend {
            backend::Backend::Postgres(b) => {
                b.migrate_with(migrations::postgres_up_to(version)).await
            }
            backend::Backend::Sqlite(b) => b.migrate_with(migrations::sqlite_up_to(version)).await,
        }
    }

    /// Append events to one stream if it is at the expected version. Concurrent calls
    /// are committed together; each gets its own result.
    pub async fn append(&self, request: AppendRequest) -> Result<Appended, StoreError> {
        plan::validate(&request)?;
        let (reply, answer) = oneshot::channel();
        self.inner
            .jobs
            .send(appender::Job { request, reply })
            .await
            .map_err(|_| StoreError::Closed)?;
        match answer.await.map_err(|_| StoreError::Closed)? {
            Err(e @ StoreError::Conflict { .. }) => Err(self.explain_conflict(e).await),
            done => done,
        }
    }

    /// Begin a transaction that can write other rows and append events atomically.
    pub async fn begin(&self) -> Result<StoreTx, StoreError> {
        let signals = self.inner.signals.clone();
        match &self.inner.backend {
            Backend::Postgres(b) => Ok(StoreTx::postgres(
                b.pool()
                    .begin()
                    .await
                    .map_err(StoreError::db("beginning a transaction"))?,
                signals,
            )),
            Backend::Sqlite(b) => Ok(StoreTx::sqlite(
                b.writer()
                    .begin_with("BEGIN IMMEDIATE")
                    .await
                    .map_err(StoreError::db("beginning a transaction"))?,
                signals,
            )),
        }
    }

    /// Every event of a stream, oldest first.
    pub async fn read_stream(&self, stream: &StreamRef) -> Result<Vec<RecordedEvent>, StoreError> {
        self.read_stream_after(stream, 0).await
    }

    /// The events of a stream with a version above `after_version`.
    pub async fn read_stream_after(
        &self,
        stream: &StreamRef,
        after_version: i64,
    ) -> Result<Vec<RecordedEvent>, StoreError> {
        let raw = self
            .inner
            .backend
            .read_stream(stream, after_version, i64::MAX)
            .await?;
        raw.into_iter()
            .map(|r| r.decode(&self.inner.upcasters))
            .collect()
    }

    /// One page of the whole log after `after` (a global position), matching
    /// `filter`. Returns the events and the position to continue after: past the last
    /// event, or past everything committed that was scanned.
    pub async fn read_page(
        &self,
        after: i64,
        limit: i64,
        filter: &EventFilter,
    ) -> Result<(Vec<RecordedEvent>, i64), StoreError> {
        let (raw, scanned) = self.inner.backend.read_all(after, limit, filter).await?;
        let events = raw
            .into_iter()
            .map(|r| r.decode(&self.inner.upcasters))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((events, scanned))
    }

    /// The ids of the `kind` streams in the log (hot and archived), sorted; with
    /// `event_type`, of those holding such an event. Read through the streams'
    /// index, so it costs the streams of that kind, not the whole log (the
    /// workflow catalog and the schedules list used to scan every event).
    pub async fn stream_ids(
        &self,
        kind: crate::log::StreamType,
        event_type: Option<&str>,
    ) -> Result<Vec<String>, StoreError> {
        self.stream_ids_where(kind, event_type, 0).await
    }

    /// The ids of the `kind` streams with an event past `after` (a global position),
    /// hot or archived, sorted. Read through the streams' index: it costs the events
    /// of that kind, where paging through the log past `after` for them costs every
    /// event since, of whatever kind.
    pub async fn stream_ids_after(
        &self,
        kind: crate::log::StreamType,
        after: i64,
    ) -> Result<Vec<String>, StoreError> {
        self.stream_ids_where(kind, None, after).await
    }

    async fn stream_ids_where(
        &self,
        kind: crate::log::StreamType,
        event_type: Option<&str>,
        after: i64,
    ) -> Result<Vec<String>, StoreError> {
        let what = format!("listing the {kind} streams with events after position {after}");
        match self.backend() {
            Backend::Postgres(pg) => {
                sqlx::query_scalar(
                    "SELECT stream_id FROM events WHERE stream_type = $1 \
                   AND ($2::text IS NULL OR event_type = $2) AND position > $3 \
                 UNION \
                 SELECT stream_id FROM events_archive WHERE stream_type = $1 \
                   AND ($2::text IS NULL OR event_type = $2) AND position > $3 \
                 ORDER BY 1",
                )
                .bind(kind.as_str())
                .bind(event_type)
                .bind(after)
                .fetch_all(pg.pool())
                .await
            }
            Backend::Sqlite(lite) => {
                sqlx::query_scalar(
                    "SELECT stream_id FROM events WHERE stream_type = ?1 \
                   AND (?2 IS NULL OR event_type = ?2) AND position > ?3 \
                 UNION \
                 SELECT stream_id FROM events_archive WHERE stream_type = ?1 \
                   AND (?2 IS NULL OR event_type = ?2) AND position > ?3 \
                 ORDER BY 1",
                )
                .bind(kind.as_str())
                .bind(event_type)
                .bind(after)
                .fetch_all(lite.reader())
                .await
            }
        }
        .map_err(StoreError::db(what))
    }

    /// The events of a stream its state is folded from: from its last continuation
    /// (an event carrying the whole state, [`crate::log::CONTINUED_EVENT_TYPE`]) on,
    /// or every event when it has none. For its history, [`EventStore::read_stream`].
    pub async fn read_current(&self, stream: &StreamRef) -> Result<Vec<RecordedEvent>, StoreError> {
        let mut streams = self
            .read_streams(stream.kind, std::slice::from_ref(&stream.id))
            .await?;
        Ok(streams.remove(&stream.id).unwrap_or_default())
    }

    /// The events several streams of one type are folded from (each from its last
    /// continuation, as [`EventStore::read_current`]), by stream id, in one query.
    pub async fn read_streams(
        &self,
        kind: crate::log::StreamType,
        ids: &[String],
    ) -> Result<std::collections::HashMap<String, Vec<RecordedEvent>>, StoreError> {
        let mut by_stream: std::collections::HashMap<String, Vec<RecordedEvent>> =
            ids.iter().map(|id| (id.clone(), Vec::new())).collect();
        if ids.is_empty() {
            return Ok(by_stream);
        }
        let mut raw = self.inner.backend.read_streams(kind, ids).await?;
        let mut found = std::collections::HashSet::new();
        for r in &raw {
            found.insert(r.stream_id.clone());
        }
        // Streams not in the hot table may have been archived (a finished run).
        let missing: Vec<String> = ids
            .iter()
            .filter(|id| !found.contains(*id))
            .cloned()
            .collect();
        if !missing.is_empty() {
            raw.extend(
                self.inner
                    .backend
                    .read_archived_streams(kind, &missing)
                    .await?,
            );
        }
        for raw in raw {
            let event = raw.decode(&self.inner.upcasters)?;
            by_stream
                .entry(event.stream.id.clone())
                .or_default()
                .push(event);
        }
        // The backends return each stream's events in no set order (sorting rows
        // in the database cost Postgres more than reading them): by version here,
        // which for rows that came in order is one pass.
        for events in by_stream.values_mut() {
            events.sort_by_key(|e| e.version);
        }
        Ok(by_stream)
    }

    pub(crate) fn backend(&self) -> &Backend {
        &self.inner.backend
    }

    /// The position of the last committed event (0 for an empty log).
    pub async fn head(&self) -> Result<i64, StoreError> {
        self.inner.backend.head().await
    }

    /// Follow the log from after `after`, forever: catch up page by page, then yield
    /// each new event as it commits. Ends after yielding an error.
    pub fn tail(
        &self,
        after: i64,
        filter: EventFilter,
    ) -> impl Stream<Item = Result<RecordedEvent, StoreError>> + Send + 'static {
        tail::tail(self.clone(), after, filter, self.inner.tail_poll)
    }

    /// A receiver that changes whenever new events may have committed.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.listen();
        self.inner.signals.commits()
    }

    /// A receiver that changes whenever runs may have become due (run wake-ups were
    /// written here, or anything was committed by another process).
    pub(crate) fn subscribe_runs(&self) -> watch::Receiver<u64> {
        self.listen();
        self.inner.signals.runs()
    }

    /// Start following other processes' commits, once per store (Postgres).
    fn listen(&self) {
        if let Backend::Postgres(pg) = &self.inner.backend
            && self.inner.listener.get().is_none()
        {
            let task = tokio::spawn(pg.clone().listen(self.inner.signals.clone()));
            if let Err(e) = self.inner.listener.set(task.abort_handle()) {
                // Another tail started the listener first; keep that one.
                drop(e);
                task.abort();
            }
        }
    }
}
