//! A worker's own view of how long it holds a run: its effects stop before its lease
//! runs out.
//!
//! The commit's fence (`StoreTx::fence`) keeps a worker that lost a run from writing
//! for it, but it cannot stop the work that worker already started: a shell step
//! still running when another worker claims the run would run twice at once, under
//! the same idempotency key. So every held run carries a local deadline, measured on
//! this process's monotonic clock from the moment before the claim or renewal that
//! set the lease in the database, and shortened by a margin. Each effect of the run
//! races that deadline: when it passes without a renewal moving it (the store was
//! slow or unreachable, or the worker's rounds stalled), the effect is dropped (a
//! shell step's process group is killed) before any other worker can claim the run.
//! Dropping the run (its lease found lost) drops the deadline's sender, which stops
//! the run's effects at once.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// The share of the lease kept back: effects stop this long before the lease, as
/// written in the database, runs out (time for the kill, and for clocks a little
/// apart).
const MARGIN_DIVISOR: u32 = 6;

/// How long after `from` (taken before the claim or renewal was sent) this worker
/// may still run a run's effects under a lease of `lease`.
pub(super) fn deadline(from: Instant, lease: Duration) -> Instant {
    from + (lease - lease / MARGIN_DIVISOR)
}

/// The deadline of one held run, moved by each renewal.
pub(super) struct LocalLease {
    until: watch::Sender<Instant>,
}

impl LocalLease {
    pub(super) fn new(until: Instant) -> Self {
        Self {
            until: watch::Sender::new(until),
        }
    }

    /// A renewal that succeeded.
    pub(super) fn extend(&self, until: Instant) {
        self.until.send_if_modified(|current| {
            let later = until > *current;
            if later {
                *current = until;
            }
            later
        });
    }

    /// What an effect of the run watches.
    pub(super) fn watch(&self) -> watch::Receiver<Instant> {
        self.until.subscribe()
    }
}

/// Run `work` while the lease lasts: `None` if its deadline passed first, or the run
/// was dropped (`work` is dropped then, which kills a shell step's processes).
pub(super) async fn within<F: Future>(
    mut lease: watch::Receiver<Instant>,
    work: F,
) -> Option<F::Output> {
    tokio::pin!(work);
    loop {
        let until = *lease.borrow_and_update();
        if Instant::now() >= until {
            return None;
        }
        tokio::select! {
            biased;
            out = &mut work => return Some(out),
            moved = lease.changed() => {
                if moved.is_err() {
                    return None;
                }
            }
            () = tokio::time::sleep_until(until) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(60);

    #[tokio::test]
    async fn work_that_ends_in_time_gives_its_output() {
        let lease = LocalLease::new(Instant::now() + LONG);
        let out = within(lease.watch(), async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            7
        })
        .await;
        assert_eq!(out, Some(7));
    }

    #[tokio::test]
    async fn work_past_the_deadline_is_stopped_at_it() {
        let start = Instant::now();
        let lease = LocalLease::new(start + Duration::from_millis(50));
        let out = within(lease.watch(), tokio::time::sleep(LONG)).await;
        assert_eq!(out, None);
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(50) && took < LONG / 2,
            "{took:?}"
        );
    }

    #[tokio::test]
    async fn a_renewal_moves_the_deadline() {
        let start = Instant::now();
        let lease = LocalLease::new(start + Duration::from_millis(100));
        let work = tokio::spawn(within(lease.watch(), async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            "done"
        }));
        tokio::time::sleep(Duration::from_millis(20)).await;
        lease.extend(start + LONG);
        // An older deadline arriving late does not shorten it.
        lease.extend(start + Duration::from_millis(100));
        assert_eq!(work.await.expect("the task"), Some("done"));
    }

    #[tokio::test]
    async fn dropping_the_run_stops_its_work_at_once() {
        let start = Instant::now();
        let lease = LocalLease::new(start + LONG);
        let work = tokio::spawn(within(lease.watch(), tokio::time::sleep(LONG)));
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(lease);
        assert_eq!(work.await.expect("the task"), None);
        assert!(start.elapsed() < LONG / 2);
    }

    #[tokio::test]
    async fn a_deadline_already_past_starts_nothing() {
        let lease = LocalLease::new(Instant::now());
        let mut started = false;
        let out = within(lease.watch(), async { started = true }).await;
        assert_eq!(out, None);
        assert!(!started);
    }

    #[test]
    fn the_deadline_keeps_a_sixth_of_the_lease_back() {
        let from = Instant::now();
        assert_eq!(
            deadline(from, Duration::from_secs(30)),
            from + Duration::from_secs(25)
        );
        assert_eq!(
            deadline(from, Duration::from_millis(600)),
            from + Duration::from_millis(500)
        );
    }
}
