//! One server at a time follows the log into the projections.
//!
//! Every `awl serve` can keep the projections: a batch locks the checkpoints it moves,
//! so two followers never apply an event twice. But every follower reads every commit
//! of the log, and with several servers over one database each would read the others'
//! commits, decode them and wait on the checkpoint locks only to find them moved. So
//! the servers of one database take turns through a [`FollowerLease`] (its row's
//! position is unused: the projections' own checkpoints are in `projection_state`).
//! The holder follows; the others try to take the lease every [`RENEW`]. The lease
//! saves work; what makes applying safe is still the checkpoint locks, so two holders
//! for a moment (a renewal late past the lapse) apply nothing twice.

use std::time::Duration;

use crate::clock::Clock;
use crate::store::FollowerLease;

/// The lease's name in `follower_checkpoints`.
pub const FOLLOWER: &str = "projections";

/// How long a lease lasts without renewal. Short: after a crash the projections wait
/// this long (and up to one [`RENEW`] more) for a server to take them over.
pub const LEASE: Duration = Duration::from_secs(10);
/// How often the holder renews the lease, and the others try to take it.
pub const RENEW: Duration = Duration::from_secs(2);

/// This process's lease on following the log into the projections.
pub fn lease(clock: Clock) -> FollowerLease {
    FollowerLease::new(FOLLOWER, LEASE, RENEW, clock)
}
