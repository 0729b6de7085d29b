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
//!   [`ATTEMPTS`] times, then gives up with [`CommandError::Busy`] (a stream moved
//!   into the archive is refused at once: [`StoreError::Archived`]);
//! - a decision refused on a cached state is decided again on the stream as stored
//!   before the refusal is reported (a cache may be behind another process's write);
//! - runs named by the `wakes` function (of the state after the events) get a wake-up
//!   row in the same transaction as the events, so no wake-up is lost;
//! - every event of a command carries its id (`Metadata::command_id`). When the
//!   connection dies around the commit, whether the events were written is unknown:
//!   the command reloads the stream and, if its own events are there, it was
//!   recorded and is done; if not, it is decided again. A command tried again under
//!   the same id ([`Command::with_id`]) is recorded once in the same way.

use std::time::Duration;

use chrono::{DateTime, Utc};
use cqrs_es::Aggregate;
use uuid::Uuid;

use crate::log::{Metadata, StreamRef};
use crate::telemetry;

use super::error::is_unreachable;
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
    /// The command's events were already in the stream (an earlier try under the
    /// same id was recorded): nothing was decided or appended this time.
    pub already_recorded: bool,
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
type Loaded<'a, A> = Box<dyn Fn(&A, i64) + Send + Sync + 'a>;

/// A command about to be decided on one stream. Build it, then [`Command::run`].
pub struct Command<'a, A: Aggregate> {
    store: &'a EventStore,
    stream: &'a StreamRef,
    metadata: Metadata,
    cached: Option<(A, i64)>,
    wakes: Option<(DateTime<Utc>, Wakes<'a, A>)>,
    /// Told the stream's state each time it is read from the store.
    loaded: Option<Loaded<'a, A>>,
    /// The priority a run new to the wake-up queue gets.
    priority: i32,
    /// Look for this command's events before deciding (its id was given, or an
    /// append's outcome is unknown).
    look_for_own: bool,
}

impl<'a, A: Aggregate> Command<'a, A> {
    /// A command on `stream`, recorded with `metadata` (its actor at least) and the
    /// trace it runs in.
    pub fn new(store: &'a EventStore, stream: &'a StreamRef, metadata: Metadata) -> Self {
        let mut metadata = match metadata.traceparent {
            Some(_) => metadata,
            None => metadata.with_trace(telemetry::current_traceparent()),
        };
        let look_for_own = metadata.command_id.is_some();
        metadata.command_id.get_or_insert_with(Uuid::now_v7);
        Self {
            store,
            stream,
            metadata,
            cached: None,
            wakes: None,
            loaded: None,
            priority: 0,
            look_for_own,
        }
    }

    /// Carry the command out under `id`: if the stream already holds events of a
    /// command with this id (an earlier try that was recorded), it is not decided
    /// again and [`Executed::already_recorded`] says so.
    pub fn with_id(mut self, id: Uuid) -> Self {
        self.metadata.command_id = Some(id);
        self.look_for_own = true;
        self
    }

    /// Decide first on this state at this version (a cache the caller keeps) instead of
    /// loading the stream.
    pub fn cached(mut self, state: Option<(A, i64)>) -> Self {
        self.cached = state;
        self
    }

    /// Tell `seen` the stream's state and version each time the command reads it from
    /// the store (after a conflict, or with no cached state), so a cache the caller
    /// keeps can take it. Without this a decision refused on the stored state leaves
    /// the cache as it was, and the caller would decide the same stale way again.
    pub fn on_load(mut self, seen: impl Fn(&A, i64) + Send + Sync + 'a) -> Self {
        self.loaded = Some(Box::new(seen));
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

    /// Runs new to the wake-up queue (a run being started) get `priority` there.
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// Decide with `decide` and append what it returns.
    pub async fn run<E, D>(mut self, mut decide: D) -> Result<Executed<A>, CommandError<E>>
    where
        D: FnMut(&A) -> Result<Vec<A::Event>, E>,
    {
        let mut pause = Duration::from_millis(50);
        for _ in 0..ATTEMPTS {
            let cached = self.cached.take().filter(|_| !self.look_for_own);
            let (from_cache, (mut state, version)) = match cached {
                Some(known) => (true, known),
                None => {
                    let (state, version, own) = self.load().await?;
                    if let Some(seen) = &self.loaded {
                        seen(&state, version);
                    }
                    if own > 0 && self.look_for_own {
                        return Ok(Executed {
                            state,
                            version,
                            appended: own,
                            already_recorded: true,
                        });
                    }
                    (false, (state, version))
                }
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
                    already_recorded: false,
                });
            }
            for e in &events {
                state.apply(e.clone());
            }
            match self.append(version, &events, &state).await {
                Ok(()) => {}
                Err(e @ StoreError::Conflict { .. }) => {
                    // A stream moved into the archive never takes the append.
                    match self.store.explain_conflict(e).await {
                        StoreError::Conflict { .. } => {
                            telemetry::command_conflict(self.stream.kind.as_str());
                            continue;
                        }
                        e => return Err(CommandError::Store(e)),
                    }
                }
                Err(StoreError::Database { source, context }) if is_unreachable(&source) => {
                    // Written or not: look before deciding again.
                    tracing::warn!(
                        stream = %self.stream,
                        command = ?self.metadata.command_id,
                        error = %source,
                        "the connection failed while {context}; looking whether the command was recorded"
                    );
                    self.look_for_own = true;
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                    continue;
                }
                Err(e) => return Err(CommandError::Store(e)),
            }
            return Ok(Executed {
                state,
                version: version + events.len() as i64,
                appended: events.len(),
                already_recorded: false,
            });
        }
        Err(CommandError::Busy(self.stream.clone()))
    }

    /// The stream's state and version, and how many of its events this command wrote.
    async fn load<E>(&self) -> Result<(A, i64, usize), CommandError<E>> {
        let events = self
            .store
            .read_current(self.stream)
            .await
            .map_err(CommandError::Store)?;
        let own = events
            .iter()
            .filter(|e| {
                e.metadata.command_id.is_some() && e.metadata.command_id == self.metadata.command_id
            })
            .count();
        let (state, version) = domain_io::fold::<A>(&events).map_err(CommandError::Store)?;
        Ok((state, version, own))
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
            tx.enqueue_run(run_id, at, self.priority).await?;
        }
        // The append last: the log's lock is held for one statement and the commit.
        if let Err(e) = tx.append(&[request]).await {
            tx.rollback().await?;
            return Err(e);
        }
        tx.commit().await
    }
}
