//! Following the log: every event after a position, in order, live.
//!
//! A tail reads pages of committed events and, when it has caught up, waits for a
//! wake-up: the in-process signal the store sends after each of its commits, or a
//! Postgres `NOTIFY` of another process's. A slow poll backs the signal up (a missed
//! notification, a writer in another process on SQLite), so a tail never stalls for
//! longer than that. A page that ended at the head is the last read until the next
//! wake-up: every tail in a process reads once per commit, not once more to find
//! nothing. Under a stream of commits a caught-up tail reads at most once per
//! [`TAIL_GATHER`]: a wake-up that comes sooner after its last read waits out the
//! rest of it, and the page then holds every commit made meanwhile. A tail woken
//! after a quiet spell reads at once, so this adds latency only where it saves reads.
//!
//! Gap-free by construction: appends are serialised and positions are assigned under
//! the write lock, so every position up to the committed head is visible once the
//! head is; the tail never reads past the head it saw.

use std::collections::VecDeque;
use std::time::Duration;

use futures_util::Stream;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::log::{EventFilter, RecordedEvent};

use super::{EventStore, StoreError, plan};

/// Events read per page while catching up.
pub const TAIL_PAGE: i64 = 1_000;

/// The least time between two reads of a caught-up tail: under a burst of commits,
/// each of a process's tails (the board's view, the live streams) reads one page per
/// this much time, not one per commit.
pub const TAIL_GATHER: Duration = Duration::from_millis(4);

struct TailState {
    store: EventStore,
    filter: EventFilter,
    after: i64,
    buffer: VecDeque<RecordedEvent>,
    wake: watch::Receiver<u64>,
    poll: Duration,
    failed: bool,
    /// The last page ended at the head: wait for a commit before reading again.
    caught_up: bool,
    /// When the last page was read.
    last_read: Option<Instant>,
}

pub(crate) fn tail(
    store: EventStore,
    after: i64,
    filter: EventFilter,
    poll: Duration,
) -> impl Stream<Item = Result<RecordedEvent, StoreError>> + Send + 'static {
    let wake = store.subscribe();
    let state = TailState {
        store,
        filter,
        after,
        buffer: VecDeque::new(),
        wake,
        poll,
        failed: false,
        caught_up: false,
        last_read: None,
    };
    futures_util::stream::unfold(state, |mut s| async move {
        loop {
            if let Some(event) = s.buffer.pop_front() {
                return Some((Ok(event), s));
            }
            if s.failed {
                return None;
            }
            if s.caught_up {
                // Either signal or time: whichever comes first.
                let _ = tokio::time::timeout(s.poll, s.wake.changed()).await;
                if let Some(next) = s.last_read.map(|last| last + TAIL_GATHER)
                    && Instant::now() < next
                {
                    tokio::time::sleep_until(next).await;
                }
            }
            // Mark the current signal seen *before* reading, so a commit that lands
            // after the read wakes the wait above.
            s.wake.borrow_and_update();
            s.last_read = Some(Instant::now());
            match s.store.read_page(s.after, TAIL_PAGE, &s.filter).await {
                Ok((events, scanned)) => {
                    s.caught_up =
                        plan::reached_head(s.after, TAIL_PAGE, &s.filter, events.len(), scanned);
                    s.after = scanned;
                    s.buffer.extend(events);
                }
                Err(e) => {
                    s.failed = true;
                    return Some((Err(e), s));
                }
            }
        }
    })
}
