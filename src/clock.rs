//! Where awl reads the time, in one place.
//!
//! Domain code reads no clock: the services (the board, runs, the executor) read a
//! [`Clock`] and pass the time into every command, so a test moves time by hand
//! ([`ManualClock`]) instead of sleeping. Wall time dates events and due times;
//! [`Monotonic`] time measures intervals where a wall clock that jumps would mislead
//! (the runners' circuit breakers).

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

/// Where a service reads the wall time: the system clock, or a test's.
pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// The system's wall clock.
pub fn system_clock() -> Clock {
    Arc::new(Utc::now)
}

/// A wall clock that moves only when told to. Cheap to clone; clones share the time.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<Mutex<DateTime<Utc>>>,
}

impl ManualClock {
    pub fn new(start: DateTime<Utc>) -> Self {
        Self {
            now: Arc::new(Mutex::new(start)),
        }
    }

    pub fn now(&self) -> DateTime<Utc> {
        *self.now.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn set(&self, to: DateTime<Utc>) {
        *self.now.lock().unwrap_or_else(|p| p.into_inner()) = to;
    }

    pub fn advance(&self, by: chrono::Duration) {
        let mut now = self.now.lock().unwrap_or_else(|p| p.into_inner());
        *now += by;
    }

    /// This clock as a service's [`Clock`].
    pub fn clock(&self) -> Clock {
        let me = self.clone();
        Arc::new(move || me.now())
    }
}

/// A source of monotonic time.
pub trait Monotonic: Send + Sync + fmt::Debug {
    fn now(&self) -> Instant;
}

/// The system's monotonic clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemMonotonic;

impl Monotonic for SystemMonotonic {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A monotonic clock that moves only when told to.
#[derive(Debug)]
pub struct ManualMonotonic {
    now: Mutex<Instant>,
}

impl ManualMonotonic {
    pub fn new() -> Self {
        Self {
            now: Mutex::new(Instant::now()),
        }
    }

    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(|p| p.into_inner());
        *now += by;
    }
}

impl Default for ManualMonotonic {
    fn default() -> Self {
        Self::new()
    }
}

impl Monotonic for ManualMonotonic {
    fn now(&self) -> Instant {
        *self.now.lock().unwrap_or_else(|p| p.into_inner())
    }
}
