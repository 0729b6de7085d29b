//! Group commit: many concurrent appends, one transaction.
//!
//! Appends are serialised by the log's write lock, so a transaction per append would
//! cap the log at one commit (one fsync) at a time. Instead every `EventStore::append`
//! goes to one background task per store, which takes whatever requests are waiting
//! (up to [`MAX_BATCH_EVENTS`] events), writes them in one transaction and answers
//! each caller with its own result. A lone append is written at once: the batch is
//! whatever queued while the previous commit ran, never a timed wait.
//!
//! Other processes' appenders queue for the same lock. Once this one sees another
//! commit land between two of its own, it takes the lock first (Postgres) and forms
//! the batch only when it holds it: what queued during the wait joins this commit
//! instead of the next, so its batches grow with the contention (BENCHMARKS.md,
//! "Batches formed under the lock").
//!
//! Requests in a batch are independent: a conflict refuses only its own request.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::sync::{mpsc, oneshot};

use crate::log::{AppendRequest, Appended, RecordedEvent, Upcasters};

use super::StoreError;
use super::backend::Backend;
use super::feed::Feed;
use super::plan::Recorded;
use super::signals::Signals;

/// Most events written by one group-commit transaction.
pub const MAX_BATCH_EVENTS: usize = 2_000;

pub(crate) struct Job {
    pub request: AppendRequest,
    pub reply: oneshot::Sender<Result<Appended, StoreError>>,
}

/// Where the appender reports what it committed.
pub(crate) struct Committed {
    pub signals: Arc<Signals>,
    /// This process's followers take its commits from here (see [`super::feed`]).
    pub feed: Arc<Feed>,
    /// What every reader's events go through, so the feed's events are the ones a
    /// read of the log would give.
    pub upcasters: Upcasters,
}

/// Run the appender until every sender is dropped.
pub(crate) async fn run(backend: Backend, mut jobs: mpsc::Receiver<Job>, to: Committed) {
    let mut batch: Vec<Job> = Vec::new();
    let mut others = OtherAppenders::default();
    while let Some(first) = jobs.recv().await {
        // Timed from here: an append's time includes its wait for the lock, whether
        // awl_append() waits for it or it is taken before the batch is formed.
        let started = std::time::Instant::now();
        // With other appenders about, the lock is taken before the batch is formed:
        // what queues here while it is waited for joins this batch.
        let locked = if others.seen {
            backend.lock_log().await
        } else {
            None
        };
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
        let outcome = match locked {
            Some(Ok(log)) => log.append(&requests).await,
            Some(Err(e)) => Err(e),
            None => backend.append_batch(&requests).await,
        };
        if let Ok(recorded) = &outcome {
            others.after(&recorded.results);
        }
        crate::telemetry::appended(requests.len(), started.elapsed().as_secs_f64());
        match outcome {
            Ok(Recorded {
                results,
                recorded_at,
            }) => {
                let mut written = Vec::with_capacity(batch.len());
                let mut replies = Vec::with_capacity(batch.len());
                for (job, result) in batch.drain(..).zip(results) {
                    if let Ok(appended) = &result {
                        written.push((job.request, *appended));
                    }
                    replies.push((job.reply, result));
                }
                // The commit's last position: the one its notification carries.
                let last = written.iter().map(|(_, a)| a.last_position).max();
                // Kept and announced before anyone is answered: once an append
                // returns, this process's followers can read it from memory.
                if let Some(at) = recorded_at
                    && let Some(events) = as_recorded(written, at, &to.upcasters)
                {
                    to.feed.push(events);
                }
                // No run wake-up is ever written here (only in transactions).
                if last.is_some() {
                    to.signals.committed_here(last, false);
                }
                for (reply, result) in replies {
                    // A caller that went away no longer needs its answer.
                    let _ = reply.send(result);
                }
            }
            Err(e) => {
                for job in batch.drain(..) {
                    let _ = job.reply.send(Err(e.clone()));
                }
            }
        }
    }
}

/// Whether another process (or a transaction of this one) appended between this
/// appender's last two commits: then its commits queue behind theirs for the log's
/// lock, and one that forms its batch only once it holds the lock gathers all that
/// queued meanwhile. Alone, it appends in one round trip as soon as a request comes.
#[derive(Debug, Default)]
struct OtherAppenders {
    /// The last position of this appender's last commit.
    last: Option<i64>,
    seen: bool,
}

impl OtherAppenders {
    fn after(&mut self, results: &[Result<Appended, StoreError>]) {
        let written = results.iter().filter_map(|r| r.as_ref().ok());
        let (first, last) = written.fold((None, None), |(first, last), a| {
            (
                Some(first.map_or(a.first_position, |f: i64| f.min(a.first_position))),
                Some(last.map_or(a.last_position, |l: i64| l.max(a.last_position))),
            )
        });
        if let (Some(first), Some(last)) = (first, last) {
            self.seen = self.last.is_some_and(|before| first != before + 1);
            self.last = Some(last);
        }
    }
}

/// The events of a commit as a reader of the log gets them: through the same
/// upcasters. `None` if one would not upcast (a reader of the log then meets the
/// error itself).
fn as_recorded(
    written: Vec<(AppendRequest, Appended)>,
    recorded_at: DateTime<Utc>,
    upcasters: &Upcasters,
) -> Option<Vec<RecordedEvent>> {
    let mut out = Vec::with_capacity(written.iter().map(|(r, _)| r.events.len()).sum());
    for (request, appended) in written {
        let count = request.events.len() as i64;
        let first_version = appended.stream_version - count + 1;
        for (i, event) in (0..).zip(request.events) {
            let payload = event.payload.to_value().ok()?;
            let (event_version, payload) = upcasters
                .upcast(&event.event_type, event.event_version, payload)
                .ok()?;
            out.push(RecordedEvent {
                position: appended.first_position + i,
                stream: request.stream.clone(),
                version: first_version + i,
                event_type: event.event_type,
                event_version,
                payload,
                metadata: event.metadata,
                recorded_at,
            });
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(first: i64, last: i64) -> Result<Appended, StoreError> {
        Ok(Appended {
            first_position: first,
            last_position: last,
            stream_version: last,
        })
    }

    #[test]
    fn another_commit_between_two_of_ours_is_seen_and_forgotten_once_gone() {
        let mut others = OtherAppenders::default();
        others.after(&[at(1, 2), at(3, 5)]);
        assert!(!others.seen, "a first commit tells nothing");
        others.after(&[at(6, 6)]);
        assert!(!others.seen, "ours follows ours");
        others.after(&[at(9, 10)]);
        assert!(others.seen, "7 and 8 were another's");
        others.after(&[at(11, 12)]);
        assert!(!others.seen, "alone again");
    }

    #[test]
    fn refused_requests_are_left_out_and_a_commit_of_none_changes_nothing() {
        let mut others = OtherAppenders::default();
        others.after(&[at(1, 1)]);
        let refused = || {
            Err(StoreError::Conflict {
                stream: crate::log::StreamRef::new(crate::log::StreamType::Task, "t"),
                expected: crate::log::ExpectedVersion::NoStream,
                actual: 1,
            })
        };
        others.after(&[refused(), at(2, 3)]);
        assert!(!others.seen);
        others.after(&[refused()]);
        assert_eq!((others.seen, others.last), (false, Some(3)));
        others.after(&[at(5, 5)]);
        assert!(others.seen);
    }
}
