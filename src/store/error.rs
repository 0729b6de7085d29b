//! What can go wrong in the store, as one typed error.

use std::sync::Arc;

use crate::error::{Classified, ErrorKind};
use crate::log::{ExpectedVersion, StreamRef};

/// An error from the event store.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// Optimistic concurrency: the stream was not at the expected version. Nothing
    /// from the append was written.
    #[error(
        "conflict on stream {stream}: expected {expected}, but the stream is at version {actual}"
    )]
    Conflict {
        stream: StreamRef,
        expected: ExpectedVersion,
        actual: i64,
    },

    /// The stream was moved into the archive (retention): its history can be read,
    /// nothing can be appended to it.
    #[error("stream {0} is archived: its history can be read, but nothing can be added to it")]
    Archived(StreamRef),

    /// A stored event cannot be read back as a valid event.
    #[error("corrupt event {event}: {reason}")]
    Corrupt { event: String, reason: String },

    /// A request the store refuses before touching the database.
    #[error("invalid append to {stream}: {reason}")]
    InvalidAppend { stream: StreamRef, reason: String },

    /// The database failed (connection, query, transaction).
    #[error("database error while {context}: {source}")]
    Database {
        context: String,
        #[source]
        source: Arc<sqlx::Error>,
    },

    /// Schema migrations failed.
    #[error("migrating the {backend} store failed: {source}")]
    Migrate {
        backend: &'static str,
        #[source]
        source: Arc<sqlx::migrate::MigrateError>,
    },

    /// The database URL or file cannot be used.
    #[error("cannot open the store at {location}: {reason}")]
    Config { location: String, reason: String },

    /// A row the store refuses to write (for example a duplicate token name).
    #[error("{0}")]
    Refused(String),

    /// The store's background appender has stopped (the store is shutting down).
    #[error("the event store is shut down")]
    Closed,

    /// The database does not answer in time.
    #[error("{0}")]
    Unavailable(String),
}

impl StoreError {
    /// Wrap a sqlx error with what we were doing when it happened.
    pub(crate) fn db(context: impl Into<String>) -> impl FnOnce(sqlx::Error) -> StoreError {
        let context = context.into();
        move |source| StoreError::Database {
            context,
            source: Arc::new(source),
        }
    }

    pub fn is_conflict(&self) -> bool {
        matches!(self, StoreError::Conflict { .. })
    }
}

impl Classified for StoreError {
    fn kind(&self) -> ErrorKind {
        match self {
            StoreError::Conflict { .. } | StoreError::Refused(_) | StoreError::Archived(_) => {
                ErrorKind::Conflict
            }
            // The caller's request, refused before anything was written.
            StoreError::InvalidAppend { .. } => ErrorKind::Invalid,
            StoreError::Unavailable(_) => ErrorKind::Unavailable,
            StoreError::Database { source, .. } if is_unreachable(source) => ErrorKind::Unavailable,
            _ => ErrorKind::Internal,
        }
    }

    fn code(&self) -> &'static str {
        match self {
            StoreError::Conflict { .. } => "conflict",
            StoreError::Refused(_) => "refused",
            StoreError::Archived(_) => "archived",
            StoreError::InvalidAppend { .. } => "invalid_append",
            StoreError::Unavailable(_) => "store_unavailable",
            StoreError::Database { source, .. } if is_unreachable(source) => "store_unavailable",
            _ => "store_error",
        }
    }
}

/// Whether `e` says the database cannot be reached now (down, restarting, the
/// connection cut, no connection free in time), rather than that a statement failed:
/// a caller should try again later (503), not report a fault of awl (500).
pub(crate) fn is_unreachable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        // SQLSTATE class 08 (connection exception) and 57P01..57P03 (the server is
        // shutting down, crashed or starting up).
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|c| c.starts_with("08") || matches!(&*c, "57P01" | "57P02" | "57P03")),
        _ => false,
    }
}
