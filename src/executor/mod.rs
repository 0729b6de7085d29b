//! The executor: stateless workers that move runs forward.
//!
//! A [`Worker`] claims due runs from the wake-up queue under a lease, folds each run's
//! stream, asks the [`engine`](crate::engine) what to do, and writes what it decided
//! for many runs in one transaction: their events, the tasks and child runs they start,
//! and their next wake-ups. Then it carries out the effects (processes, HTTP calls,
//! database statements) and reports their outcomes on the next round. Nothing is kept
//! only in memory: a worker that dies loses its leases, and the next worker to claim
//! its runs replays them and starts any attempt that had no outcome again, with the
//! same idempotency key.
//!
//! - `worker`: the loop: claim, decide, commit, perform; leases and shutdown.
//! - `waiting`: what a held run's agent and workflow steps wait on (tasks, child runs).
//! - `decide`: ticking the engine for one run, and planning what the commit writes
//!   beside the run's events (tasks queued, child runs started, wake-ups).
//! - `commit`: writing many runs' decisions in one transaction; nothing is decided
//!   there.
//! - `perform`: one effect through the step runners.
//! - `rate`: an attempt's rate-limit tokens, taken before it is performed; attempts
//!   held back recorded as throttled.
//!
//! What people do to runs (start, decide gates, cancel) is the runs service's
//! ([`crate::runs`]): an append plus a wake-up that a worker here picks up.

mod commit;
mod decide;
mod lease;
mod perform;
mod rate;
mod waiting;
mod worker;

pub use worker::{DEFAULT_HISTORY_BYTES, DEFAULT_HISTORY_LIMIT, Worker, WorkerConfig};

use crate::engine::EngineError;
use crate::store::StoreError;
use crate::workflow::Diagnostics;

/// What can stop the executor or a control command.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Invalid(Diagnostics),
    #[error("{0}")]
    Refused(String),
    #[error("{what} cannot be read: {reason}")]
    Corrupt { what: String, reason: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Definition(#[from] crate::definitions::DefinitionError),
}

impl ExecError {
    /// A stored event of this one run (or of a task or child run it waits on) that
    /// cannot be read back: about the run, not about the worker or the database.
    fn is_unreadable(&self) -> bool {
        matches!(self, Self::Store(StoreError::Corrupt { .. }))
    }
}
