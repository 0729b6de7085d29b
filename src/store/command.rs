//! One way to carry out a command on one stream: load the aggregate (or start from a
//! state the caller already holds), decide, append the events with the version the
//! decision was made on, and, when another writer got there first, decide again on the
//! stream as it now is.
//!
//! Every service that acts on a stream (the board, runs, workflow registration) goes
//! through [`Command::run`], so the retry rule, the cache rule and the wake-ups
//! written beside the events are the same everywhere:
//!
//! - a conflict (someone appended since the load) reloads and decides again, up to
//!   [`ATTEMPTS`] times, then gives up with [`CommandError::Busy`];
//! - a decision refused on a cached state is decided again on the stream as stored
//!   before the refusal is reported (a cache may be behind another process's write);
//! - runs named by the `wakes` function (of the state after the events) get a wake-up
//!   row in the same transaction as the events, so no wake-up is lost.

use chrono::{DateTime, Utc};
use cqrs_es::Aggregate;

use crate::log::{Metadata, StreamRef};
use crate::telemetry;

use super::{EventStore, StoreError, domain_io};

/// How many times a decision is made again when another writer got there first.
pub const ATTEMPTS: usize = 8;

/// What a command did.
#[derive(Debug, Clone)]
pub struct Executed<A> {
    /// The state after the command.
    pub state: A,
    /// The stream's version after the command.
    pub version: i64,
    /// How many events were appended (0: the decision changed nothing).
    pub appended: usize,
}

/// Why a command did not happen. Nothing was appended in any case.
#[derive(Debug, thiserror::Error)]
pub enum CommandError<E> {
    /// The decision refused the command.
    #[error(transparent)]
    Rejected(E),
    #[error(transparent)]
    Store(StoreError),
    /// Other writers kept changing the stream between load and append.
    #[error("{0} kept changing while deciding; try again")]
    Busy(StreamRef),
}

type Wakes<'a, A> = Box<dyn Fn(&A) -> Vec<String> + Send + Sync + 'a>;

/// A command about to be decided on one stream. Build it, then [`Command::run`].
pub struct Command<'a, A: Aggregate> {
    store: &'a EventStore,
    stream: &'a StreamRef,
    metadata: Metadata,
    cached: Option<(A, i64)>,
    wakes: Option<(DateTime<Utc>, Wakes<'a, A>)>,
}

impl<'a, A: Aggregate> Command<'a, A> {
    /// A command on `stream`, recorded with `metadata` (its actor at least) and the
    /// trace it runs in.
    pub fn new(store: &'a EventStore, stream: &'a StreamRef, metadata: Metadata) -> Self {
        let metadata = match metadata.traceparent {
            Some(_) => metadata,
            None => metadata.with_trace(telemetry::current_traceparent()),
        };
        Self {
            store,
            stream,
            metadata,
            cached: None,
            wakes: None,
        }
    }

    /// Decide first on this state at this version (a cache the caller keeps) instead of
    /// loading the stream.
    pub fn cached(mut self, state: Option<(A, i64)>) -> Self {
        self.cached = state;
        self
    }

    /// Wake these runs (computed from the state after the events) at `at` (the
    /// command's time, from the service's clock) in the append's transaction.
    pub fn wakes(
        mut self,
        at: DateTime<Utc>,
        wakes: impl Fn(&A) -> Vec<String> + Send + Sync + 'a,
    ) -> Self {
        self.wakes = Some((at, Box::new(wakes)));
        self
    }

    /// Decide with `decide` and append what it returns.
    pub async fn run<E, D>(mut self, mut decide: D) -> Result<Executed<A>, CommandError<E>>
    where
        D: FnMut(&A) -> Result<Vec<A::Event>, E>,
    {
        for _ in 0..ATTEMPTS {
            let (from_cache, (mut state, version)) = match self.cached.take() {
                Some(known) => (true, known),
                None => (false, self.load().await?),
            };
            let events = match decide(&state) {
                Ok(events) => events,
                Err(_) if from_cache => continue,
                Err(e) => return Err(CommandError::Rejected(e)),
            };
            if events.is_empty() {
                return Ok(Executed {
                    state,
                    version,
                    appended: 0,
                });
            }
            for e in &events {
                state.apply(e.clone());
            }
            match self.append(version, &events, &state).await {
                Ok(()) => {}
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(CommandError::Store(e)),
            }
            return Ok(Executed {
                state,
                version: version + events.len() as i64,
                appended: events.len(),
            });
        }
        Err(CommandError::Busy(self.stream.clone()))
    }

    async fn load<E>(&self) -> Result<(A, i64), CommandError<E>> {
        domain_io::load::<A>(self.store, self.stream)
            .await
            .map_err(CommandError::Store)
    }

    /// Append `events` at `version`, with the wake-ups of `after` in one transaction
    /// (or through the group-committing appender when there are none).
    async fn append(&self, version: i64, events: &[A::Event], after: &A) -> Result<(), StoreError> {
        let request = domain_io::append_request(self.stream, version, events, &self.metadata)?;
        let (at, wake) = match &self.wakes {
            Some((at, wakes)) => (*at, wakes(after)),
            None => (DateTime::<Utc>::MIN_UTC, Vec::new()),
        };
        if wake.is_empty() {
            return self.store.append(request).await.map(|_| ());
        }
        let mut tx = self.store.begin().await?;
        for run_id in &wake {
            tx.wake_run(run_id, at).await?;
        }
        // The append last: the log's lock is held for one statement and the commit.
        if let Err(e) = tx.append(&[request]).await {
            tx.rollback().await?;
            return Err(e);
        }
        tx.commit().await
    }
}
