//! A follower of the log that one process runs at a time, of the many sharing a
//! store: the holder of a lease, a row of `follower_checkpoints` (see
//! [`EventStore::claim_follower`]).
//!
//! The lease is kept by a task of its own ([`FollowerLease::keep`]), not between the
//! follower's own work, so a long piece of work (a catch-up over a million events, a
//! chat message waiting out a rate limit) does not let it lapse. The keeper says on a
//! watch channel whether this process holds it; the follower works while it does.
//! A process that stops gives the lease up, so another takes it within `renew`; one
//! that dies is replaced once its lease lapses.

use std::time::Duration;

use tokio::sync::watch;

use crate::clock::Clock;

use super::EventStore;

/// Who follows, and the lease's timing.
#[derive(Clone)]
pub struct FollowerLease {
    /// The follower's name in `follower_checkpoints`.
    pub name: &'static str,
    /// This process, as the lease's owner.
    pub owner: String,
    /// How long the lease lasts without renewal.
    pub lease: Duration,
    /// How often the holder renews it, and the others try to take it.
    pub renew: Duration,
    pub clock: Clock,
}

impl FollowerLease {
    /// Follower `name`'s lease, held by this process (an owner unique to it).
    pub fn new(name: &'static str, lease: Duration, renew: Duration, clock: Clock) -> Self {
        Self {
            name,
            owner: format!("{}:{}", std::process::id(), uuid::Uuid::new_v4()),
            lease,
            renew,
            clock,
        }
    }

    /// Take or renew the lease (the follower's row made at `start` if there is none):
    /// whether this process holds it. A failure to reach the store counts as not
    /// holding it: the follower's own work would fail too.
    async fn claim(&self, store: &EventStore, start: i64) -> bool {
        let now = (self.clock)();
        let until = now + chrono::Duration::from_std(self.lease).unwrap_or_default();
        match store
            .claim_follower(self.name, &self.owner, now, until, start)
            .await
        {
            Ok(held) => held,
            Err(e) => {
                tracing::warn!(follower = self.name, error = %e, "cannot claim the lease");
                false
            }
        }
    }

    /// Claim the lease every `renew` until `stop`, telling `held` whether this
    /// process holds it; then give it up.
    pub async fn keep(
        self,
        store: EventStore,
        start: i64,
        held: watch::Sender<bool>,
        mut stop: watch::Receiver<bool>,
    ) {
        loop {
            let now_held = self.claim(&store, start).await;
            crate::telemetry::follower_lease_held(self.name, now_held);
            if now_held != *held.borrow() {
                if now_held {
                    tracing::info!(follower = self.name, owner = %self.owner, "took the lease: following");
                } else {
                    tracing::info!(follower = self.name, owner = %self.owner, "no longer holds the lease");
                }
                held.send_replace(now_held);
            }
            if *stop.borrow() {
                break;
            }
            tokio::select! {
                _ = tokio::time::sleep(self.renew) => {}
                changed = stop.changed() => if changed.is_err() || *stop.borrow() { break },
            }
        }
        held.send_replace(false);
        crate::telemetry::follower_lease_held(self.name, false);
        if let Err(e) = store.release_follower(self.name, &self.owner).await {
            tracing::warn!(follower = self.name, error = %e, "cannot give the lease up");
        }
    }

    /// [`Self::keep`] on a task of its own: whether this process holds the lease, and
    /// the task (which ends, the lease given up, once `stop` is sent).
    pub fn spawn(
        self,
        store: EventStore,
        start: i64,
        stop: watch::Receiver<bool>,
    ) -> (watch::Receiver<bool>, tokio::task::JoinHandle<()>) {
        let (held_tx, held) = watch::channel(false);
        let keeper = tokio::spawn(self.keep(store, start, held_tx, stop));
        (held, keeper)
    }
}

/// Wait until `held` says the lease is held (`true`), or `stop` is sent or either
/// channel is gone (`false`).
pub async fn until_held(
    held: &mut watch::Receiver<bool>,
    stop: &mut watch::Receiver<bool>,
) -> bool {
    while !*held.borrow_and_update() {
        if stopped(stop) {
            return false;
        }
        tokio::select! {
            changed = held.changed() => if changed.is_err() { return false },
            _ = stop.changed() => {}
        }
    }
    !stopped(stop)
}

/// Whether `stop` was sent, or its sender is gone.
fn stopped(stop: &watch::Receiver<bool>) -> bool {
    *stop.borrow() || stop.has_changed().is_err()
}
