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

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

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
}

impl Signals {
    pub(crate) fn new() -> Self {
        Self {
            commits: watch::channel(0).0,
            runs: watch::channel(0).0,
            own: Mutex::new(OwnCommits::default()),
            listening: AtomicBool::new(false),
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
        let own = payload
            .parse::<i64>()
            .is_ok_and(|position| self.own().notified(position));
        if !own {
            self.wake_all();
        }
    }

    /// Something may have been missed (the listener (re)connected): wake everyone.
    pub(crate) fn wake_all(&self) {
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
    fn without_a_listener_no_position_is_kept() {
        let signals = Signals::new();
        let mut commits = signals.commits();
        signals.committed_here(Some(10), true);
        assert!(commits.has_changed().unwrap(), "followers are still woken");
        commits.borrow_and_update();
        assert!(signals.own().waiting.is_empty());
    }
}
