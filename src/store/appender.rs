//! Group commit: many concurrent appends, one transaction.
//!
//! Appends are serialised by the log's write lock, so a transaction per append would
//! cap the log at one commit (one fsync) at a time. Instead every `EventStore::append`
//! goes to one background task per store, which takes whatever requests are waiting
//! (up to [`MAX_BATCH_EVENTS`] events), writes them in one transaction and answers
//! each caller with its own result. A lone append is written at once: the batch is
//! whatever queued while the previous commit ran, never a timed wait.
//!
//! Requests in a batch are independent: a conflict refuses only its own request.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use crate::log::{AppendRequest, Appended};

use super::StoreError;
use super::backend::Backend;
use super::signals::Signals;

/// Most events written by one group-commit transaction.
pub const MAX_BATCH_EVENTS: usize = 2_000;

pub(crate) struct Job {
    pub request: AppendRequest,
    pub reply: oneshot::Sender<Result<Appended, StoreError>>,
}

/// Run the appender until every sender is dropped.
pub(crate) async fn run(backend: Backend, mut jobs: mpsc::Receiver<Job>, signals: Arc<Signals>) {
    let mut batch: Vec<Job> = Vec::new();
    while let Some(first) = jobs.recv().await {
        let mut events = first.request.events.len();
        batch.push(first);
        while events < MAX_BATCH_EVENTS {
            match jobs.try_recv() {
                Ok(job) => {
                    events += job.request.events.len();
                    batch.push(job);
                }
                Err(_) => break,
            }
        }
        let requests: Vec<&AppendRequest> = batch.iter().map(|j| &j.request).collect();
        let started = std::time::Instant::now();
        let outcome = backend.append_batch(&requests).await;
        crate::telemetry::appended(requests.len(), started.elapsed().as_secs_f64());
        // The commit's last position: the one its notification carries.
        let last = match &outcome {
            Ok(results) => results
                .iter()
                .filter_map(|r| r.as_ref().ok().map(|a| a.last_position))
                .max(),
            Err(_) => None,
        };
        match outcome {
            Ok(results) => {
                for (job, result) in batch.drain(..).zip(results) {
                    // A caller that went away no longer needs its answer.
                    let _ = job.reply.send(result);
                }
            }
            Err(e) => {
                for job in batch.drain(..) {
                    let _ = job.reply.send(Err(e.clone()));
                }
            }
        }
        // No run wake-up is ever written here (only in transactions).
        if last.is_some() {
            signals.committed_here(last, false);
        }
    }
}
