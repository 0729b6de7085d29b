//! What a store's followers wait on: a signal that events were committed (tails, the
//! projections) and one that the run queue may have changed (workers).
//!
//! Every commit of this process signals its followers at once, from the appender or
//! the transaction that made it. Postgres also announces every commit with a
//! `NOTIFY` carrying the commit's last position, to every process, this one included.
//! A notification of one of this process's own commits would wake every follower a
//! second time for events they have already read (each then reads a page, or a worker
//! a claim, to find nothing), so the positions of this process's commits are kept
//! until their notification arrives and that notification is dropped. Only other
//! processes' commits wake followers through the listener.
//!
//! The run signal is narrower: run wake-ups are written only in transactions
//! ([`super::StoreTx`]), never by the group-committing appender, so an idle worker is
//! not woken by the board's task traffic. Another process's commit wakes it (whether
//! it wrote wake-ups cannot be told from the notification).
//!
//! Skipping a notification is only ever an optimisation: one that is not recognised
//! as this process's wakes its followers, which then read what there is. A position
//! is recorded only once its commit is done (a rolled-back transaction's positions
//! are taken by the next writer, whose notification must not be mistaken for ours).
//!
//! Followers also need to know how far the log is known to reach, to tell whether
//! this process's latest commits ([`super::feed`]) are all there is to read: the
//! *known head* is the highest last position of a commit made here or announced by
//! a notification, raised before the followers are woken. When notifications may
//! have been missed (a listener (re)connecting, a payload that is no position) the
//! signals are *reset*: every follower reads the database on its next read.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

use tokio::sync::watch;

/// Most positions of own commits kept waiting for their notification (a listener
/// that is down leaves them unmatched: past this the set is dropped, which costs
/// only redundant wake-ups).
const OWN_KEPT: usize = 65_536;

pub(crate) struct Signals {
    commits: watch::Sender<u64>,
    runs: watch::Sender<u64>,
    own: Mutex<OwnCommits>,
    /// A listener receives notifications (Postgres, once something follows the
    /// log): only then are own commits' positions kept to be matched.
    listening: AtomicBool,
    /// The highest position known to be committed.
    head: AtomicI64,
    /// How many times the signals were reset.
    resets: AtomicU64,
}

/// What a follower knows of the log when it reads, taken after it marked its wake-up
/// signal seen: anything raised later wakes it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Known {
    /// The highest position known to be committed.
    pub head: i64,
    /// Changes when the signals are reset (a follower must read the database).
    pub resets: u64,
}

impl Signals {
    pub(crate) fn new() -> Self {
        Self {
            commits: watch::channel(0).0,
            runs: watch::channel(0).0,
            own: Mutex::new(OwnCommits::default()),
            listening: AtomicBool::new(false),
            head: AtomicI64::new(0),
            resets: AtomicU64::new(0),
        }
    }

    /// The known head and resets, for a follower about to read.
    pub(crate) fn known(&self) -> Known {
        Known {
            // SeqCst throughout: a follower that saw a wake-up sees what was raised
            // before it.
            resets: self.resets.load(Ordering::SeqCst),
            head: self.head.load(Ordering::SeqCst),
        }
    }

    /// A listener is receiving notifications from now on: wake everyone (anything
    /// committed before it listened must be read too).
    pub(crate) fn listening(&self) {
        self.listening.store(true, Ordering::Relaxed);
        self.wake_all();
    }

    /// Changes whenever events may have been committed.
    pub(crate) fn commits(&self) -> watch::Receiver<u64> {
        self.commits.subscribe()
    }

    /// Changes whenever runs may have become due.
    pub(crate) fn runs(&self) -> watch::Receiver<u64> {
        self.runs.subscribe()
    }

    /// This process committed events, the last at `last_position`; `runs`: the
    /// transaction may have written run wake-ups.
    pub(crate) fn committed_here(&self, last_position: Option<i64>, runs: bool) {
        match last_position {
            Some(position) => {
                self.head.fetch_max(position, Ordering::SeqCst);
            }
            // A commit whose place is unknown: read the database to find it.
            None => {
                self.resets.fetch_add(1, Ordering::SeqCst);
            }
        }
        // With no listener no notification comes to match (SQLite, or a store
        // nothing follows): nothing is kept.
        if let Some(position) = last_position
            && self.listening.load(Ordering::Relaxed)
        {
            self.own().recorded(position);
        }
        self.commits.send_modify(|n| *n += 1);
        if runs {
            self.runs.send_modify(|n| *n += 1);
        }
    }

    /// A commit was announced with `payload` (its last position): wake everyone
    /// unless it was this process's own.
    pub(crate) fn notified(&self, payload: &str) {
        let Ok(position) = payload.parse::<i64>() else {
            self.wake_all();
            return;
        };
        self.head.fetch_max(position, Ordering::SeqCst);
        if !self.own().notified(position) {
            self.wake();
        }
    }

    /// Something may have been missed (the listener (re)connected): reset, and wake
    /// everyone.
    pub(crate) fn wake_all(&self) {
        self.resets.fetch_add(1, Ordering::SeqCst);
        self.wake();
    }

    fn wake(&self) {
        self.commits.send_modify(|n| *n += 1);
        self.runs.send_modify(|n| *n += 1);
    }

    fn own(&self) -> std::sync::MutexGuard<'_, OwnCommits> {
        // Every update leaves the set usable; a poisoned lock is still consistent.
        self.own.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The last positions of this process's commits whose notification has not come.
/// Notifications arrive in commit order, which is position order (appends hold the
/// log's lock through their commit).
#[derive(Debug, Default)]
struct OwnCommits {
    waiting: BTreeSet<i64>,
    /// The highest position notified so far.
    notified_up_to: i64,
}

impl OwnCommits {
    fn recorded(&mut self, position: i64) {
        // Its notification came first (and woke the followers): nothing to drop.
        if position <= self.notified_up_to {
            return;
        }
        if self.waiting.len() >= OWN_KEPT {
            self.waiting.clear();
        }
        self.waiting.insert(position);
    }

    /// Whether `position` is an own commit's. Positions below it will not be
    /// notified any more and are forgotten.
    fn notified(&mut self, position: i64) -> bool {
        self.notified_up_to = self.notified_up_to.max(position);
        let own = self.waiting.remove(&position);
        self.waiting = self.waiting.split_off(&position);
        own
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listening() -> Signals {
        let signals = Signals::new();
        signals.listening();
        signals
    }

    #[test]
    fn an_own_commit_is_not_announced_twice() {
        let signals = listening();
        let mut commits = signals.commits();
        let runs = signals.runs();
        signals.committed_here(Some(10), false);
        assert!(commits.has_changed().unwrap());
        assert!(!runs.has_changed().unwrap());
        commits.borrow_and_update();
        signals.notified("10");
        assert!(
            !commits.has_changed().unwrap(),
            "its notification is dropped"
        );
        assert!(!runs.has_changed().unwrap());
    }

    #[test]
    fn another_process_commit_wakes_everyone() {
        let signals = listening();
        let mut commits = signals.commits();
        let runs = signals.runs();
        signals.committed_here(Some(10), false);
        commits.borrow_and_update();
        signals.notified("11");
        assert!(commits.has_changed().unwrap());
        assert!(runs.has_changed().unwrap());
    }

    #[test]
    fn a_notification_before_the_commit_is_recorded_wakes_and_is_not_kept() {
        let signals = listening();
        let mut commits = signals.commits();
        signals.notified("10");
        assert!(commits.has_changed().unwrap());
        commits.borrow_and_update();
        signals.committed_here(Some(10), true);
        assert!(signals.own().waiting.is_empty());
        // The next process to write position 11 is not mistaken for us either.
        commits.borrow_and_update();
        signals.notified("11");
        assert!(commits.has_changed().unwrap());
    }

    #[test]
    fn unmatched_positions_are_forgotten_once_passed() {
        let mut own = OwnCommits::default();
        own.recorded(5);
        own.recorded(8);
        own.recorded(12);
        assert!(!own.notified(9), "9 is another process's");
        assert_eq!(own.waiting.iter().copied().collect::<Vec<_>>(), vec![12]);
        assert!(own.notified(12));
        assert!(own.waiting.is_empty());
    }

    #[test]
    fn a_payload_that_is_no_position_wakes_everyone() {
        let signals = listening();
        let mut commits = signals.commits();
        signals.notified("");
        assert!(commits.has_changed().unwrap());
        commits.borrow_and_update();
    }

    #[test]
    fn the_known_head_is_raised_before_followers_are_woken() {
        let signals = listening();
        let mut commits = signals.commits();
        let start = signals.known();
        assert_eq!(start.head, 0);
        signals.committed_here(Some(10), false);
        assert!(commits.has_changed().unwrap());
        commits.borrow_and_update();
        assert_eq!(signals.known().head, 10);
        // Another process's commit raises it too; an own one's notification and an
        // older position leave it.
        signals.notified("10");
        signals.notified("14");
        assert_eq!(signals.known().head, 14);
        signals.committed_here(Some(12), true);
        assert_eq!(signals.known().head, 14);
        assert_eq!(signals.known().resets, start.resets, "no reset so far");
    }

    #[test]
    fn what_may_have_been_missed_resets() {
        let signals = listening();
        let before = signals.known().resets;
        signals.notified("not a position");
        let after_payload = signals.known().resets;
        assert_ne!(after_payload, before);
        signals.wake_all();
        assert_ne!(signals.known().resets, after_payload);
        let before = signals.known().resets;
        signals.committed_here(None, false);
        assert_ne!(signals.known().resets, before, "a commit of unknown place");
    }

    #[test]
    fn without_a_listener_no_position_is_kept() {
        let signals = Signals::new();
        let mut commits = signals.commits();
        signals.committed_here(Some(10), true);
        assert!(commits.has_changed().unwrap(), "followers are still woken");
        commits.borrow_and_update();
        assert!(signals.own().waiting.is_empty());
    }
}
