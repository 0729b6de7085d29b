//! One server at a time follows the log into the projections.
//!
//! Every `awl serve` can keep the projections: a batch locks the checkpoints it moves,
//! so two followers never apply an event twice. But every follower reads every commit
//! of the log, and with several servers over one database each would read the others'
//! commits, decode them and wait on the checkpoint locks only to find them moved. So
//! the servers of one database take turns through a lease, a row of
//! `follower_checkpoints` as for the chat notifier (its position is unused: the
//! projections' own checkpoints are in `projection_state`). The holder follows; the
//! others try to take the lease every [`FollowLease::renew`].
//!
//! The lease is kept by a task of its own, not between the follower's batches, so a
//! long catch-up (a backlog of a million events) does not let it lapse. A server that
//! stops gives the lease up and another takes it within `renew`; one that dies is
//! replaced once its lease lapses ([`FollowLease::lease`]). The lease saves work; what
//! makes applying safe is still the checkpoint locks, so two holders for a moment (a
//! renewal late past the lapse) apply nothing twice.

use std::time::Duration;

use tokio::sync::watch;

use crate::clock::Clock;
use crate::store::EventStore;

/// The lease's name in `follower_checkpoints`.
pub const FOLLOWER: &str = "projections";

/// How long a lease lasts without renewal. Short: after a crash the projections wait
/// this long for a server to take them over.
pub const LEASE: Duration = Duration::from_secs(10);
/// How often the holder renews the lease, and the others try to take it.
pub const RENEW: Duration = Duration::from_secs(2);

/// Who follows, and the lease's timing.
#[derive(Clone)]
pub struct FollowLease {
    /// This process, as the lease's owner.
    pub owner: String,
    pub lease: Duration,
    pub renew: Duration,
    pub clock: Clock,
}

impl FollowLease {
    /// A lease for this process, with the default timing.
    pub fn new(clock: Clock) -> Self {
        Self {
            owner: format!("{}:{}", std::process::id(), uuid::Uuid::new_v4()),
            lease: LEASE,
            renew: RENEW,
            clock,
        }
    }

    /// Take or renew the lease: whether this process holds it. A failure to reach the
    /// store counts as not holding it (the follower would fail anyway).
    async fn claim(&self, store: &EventStore) -> bool {
        let now = (self.clock)();
        let until = now + chrono::Duration::from_std(self.lease).unwrap_or_default();
        match store
            .claim_follower(FOLLOWER, &self.owner, now, until, 0)
            .await
        {
            Ok(held) => held,
            Err(e) => {
                tracing::warn!(error = %e, "cannot claim the projections' lease");
                false
            }
        }
    }

    /// Claim the lease every `renew` until `stop`, telling `held` whether this process
    /// holds it; then give it up if held.
    pub(super) async fn keep(
        self,
        store: EventStore,
        held: watch::Sender<bool>,
        mut stop: watch::Receiver<bool>,
    ) {
        loop {
            let now_held = self.claim(&store).await;
            if now_held != *held.borrow() {
                if now_held {
                    tracing::info!(owner = %self.owner, "following the log into the projections");
                } else {
                    tracing::info!(owner = %self.owner, "another server follows the log into the projections");
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
        if let Err(e) = store.release_follower(FOLLOWER, &self.owner).await {
            tracing::warn!(error = %e, "cannot give the projections' lease up");
        }
    }
}
