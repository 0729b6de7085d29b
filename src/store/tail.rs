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
//!
//! Followers of the log ([`Following`]: the tails, the projections) take this
//! process's own latest commits from memory ([`super::feed`]) when those continue
//! exactly where the follower stands and nothing else is known to be committed past
//! them; everything else (other processes' commits, transactions', a follower
//! behind the feed, a reset of the signals, a poll) is read from the database.

use std::collections::VecDeque;
use std::time::Duration;

use futures_util::Stream;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::log::{EventFilter, RecordedEvent};

use super::{EventStore, StoreError, plan};

/// Where a follower stands with the signals, and how it read its pages.
#[derive(Debug, Default, Clone)]
pub struct Following {
    /// The signals' resets when it last read the database (`None`: it must).
    resets: Option<u64>,
    fed: u64,
    read: u64,
}

impl Following {
    /// Read the database next time (a follower that polled without a wake-up: a
    /// commit may have gone unannounced).
    pub fn force(&mut self) {
        self.resets = None;
    }

    /// Pages taken from this process's own commits, and pages read from the
    /// database.
    pub fn pages(&self) -> (u64, u64) {
        (self.fed, self.read)
    }
}

/// A follower's page of the log.
#[derive(Debug)]
pub struct FollowedPage {
    pub events: Vec<RecordedEvent>,
    /// The position to continue after.
    pub scanned: i64,
    /// Everything committed when the page was read has been read: wait for the next
    /// commit instead of asking again.
    pub reached_head: bool,
}

impl EventStore {
    /// The next page for a follower after `after`: [`EventStore::read_page`], or
    /// this process's own latest commits when they are exactly what the log holds
    /// next. Call it after marking the wake-up signal seen.
    pub async fn read_following(
        &self,
        after: i64,
        limit: i64,
        filter: &EventFilter,
        following: &mut Following,
    ) -> Result<FollowedPage, StoreError> {
        let known = self.inner.signals.known();
        if following.resets == Some(known.resets)
            && let Some(fed) = self.inner.feed.after(after, limit, filter)
        {
            following.fed += 1;
            crate::telemetry::log_page(true);
            return Ok(FollowedPage {
                reached_head: !fed.limited && fed.scanned >= known.head,
                events: fed.events,
                scanned: fed.scanned,
            });
        }
        following.resets = Some(known.resets);
        following.read += 1;
        crate::telemetry::log_page(false);
        let (events, scanned) = self.read_page(after, limit, filter).await?;
        Ok(FollowedPage {
            reached_head: plan::reached_head(after, limit, filter, events.len(), scanned),
            events,
            scanned,
        })
    }
}

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
    following: Following,
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
        following: Following::default(),
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
                // Either signal or time: whichever comes first. Woken by time, read
                // the database (a commit may have gone unannounced).
                if tokio::time::timeout(s.poll, s.wake.changed())
                    .await
                    .is_err()
                {
                    s.following.force();
                }
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
            let read = s
                .store
                .read_following(s.after, TAIL_PAGE, &s.filter, &mut s.following)
                .await;
            match read {
                Ok(page) => {
                    s.caught_up = page.reached_head;
                    s.after = page.scanned;
                    s.buffer.extend(page.events);
                }
                Err(e) => {
                    s.failed = true;
                    return Some((Err(e), s));
                }
            }
        }
    })
}
