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

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::Serialize;

use crate::clock::Clock;
use crate::store::{EventStore, FollowerLease, StoreError};

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

/// Which server follows the log into the projections: `awl projections status` and
/// `GET /api/v1/projections/follower`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Follower {
    /// The server holding the lease (its process id and a unique suffix); `None` when
    /// no server follows: none runs, or the last one's lease lapsed.
    pub owner: Option<String>,
    /// When the lease lapses unless it is renewed (every [`RENEW`]).
    pub lease_until: Option<DateTime<Utc>>,
    /// Whether the owner is the server that answers.
    pub this_server: bool,
}

/// Who follows now; `me` is the asking server's lease (`None` outside a server).
pub async fn follower(
    store: &EventStore,
    me: Option<&FollowerLease>,
    now: DateTime<Utc>,
) -> Result<Follower, StoreError> {
    let held = store
        .follower_lease(FOLLOWER)
        .await?
        .filter(|(_, until)| *until > now);
    Ok(match held {
        Some((owner, until)) => Follower {
            this_server: me.is_some_and(|me| me.owner == owner),
            owner: Some(owner),
            lease_until: Some(until),
        },
        None => Follower {
            owner: None,
            lease_until: None,
            this_server: false,
        },
    })
}

impl std::fmt::Display for Follower {
    /// The last line of `awl projections status`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.owner, self.lease_until) {
            (Some(owner), Some(until)) => write!(
                f,
                "followed by {owner} (a server; its lease runs to {})",
                until.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ),
            _ => f.write_str(
                "followed by no server (no `awl serve` running: commands that read a view, \
                 such as `awl list`, catch it up first)",
            ),
        }
    }
}
