//! Circuit breakers: stop hammering a program, host or database that keeps failing.
//!
//! Retries and error handlers work per step; without a breaker, a hundred runs whose
//! steps call the same broken API each retry it, and the API (or whoever is paged for
//! it) gets all of them. A breaker is kept per key (`shell:<program>`,
//! `shell:<shell> script <fingerprint of the script>`, `http:<host>:<port>`,
//! `database:<connection>`; built-in tools have none) and is a three-state machine:
//!
//! - **closed**: calls go through; consecutive failures are counted, and a success
//!   resets the count. At [`BreakerConfig::failures`] consecutive failures it opens.
//! - **open**: calls fail at once with class `dependency` and a message saying the
//!   circuit is open and until when, for [`BreakerConfig::open_for`].
//! - **half-open**: once that time is up, *one* trial call is let through (the others
//!   still fail fast). Its success closes the breaker; its failure opens it again for
//!   another `open_for`.
//!
//! Calls let through before the breaker opened still count when they end: a success
//! closes it (the dependency answered), and a trial that ends after that is counted
//! as an ordinary call of the closed breaker.
//!
//! What counts: `validation` failures mean the other side answered and the request was
//! wrong (an HTTP 404, an SQL syntax error), so for the breaker they are successes;
//! `budget` failures say nothing about the dependency and are ignored; every other
//! class is a failure.
//!
//! Time comes from a [`Monotonic`] clock so the state machine is tested without
//! sleeping.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::clock::Monotonic;
use crate::domain::run::ErrorClass;

use super::{StepFailure, StepSuccess};

/// When a breaker opens, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Consecutive failures of one key that open its breaker (5); 0 turns breakers
    /// off.
    pub failures: u32,
    /// How long an open breaker fails calls fast before letting a trial through (30 s).
    pub open_for: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            failures: 5,
            open_for: Duration::from_secs(30),
        }
    }
}

/// The state of one key's breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    Closed { consecutive_failures: u32 },
    Open { until: Instant },
    HalfOpen { trial_in_flight: bool },
}

/// A call refused because its breaker is open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BreakerOpen {
    #[error(
        "circuit breaker `{key}` is open after {failures} consecutive failures: failing fast \
         for another {remaining:.1?} (until {until}); a trial call is let through after that"
    )]
    Open {
        key: String,
        failures: u32,
        remaining: Duration,
        /// Wall-clock time, RFC 3339.
        until: String,
    },
    #[error(
        "circuit breaker `{key}` is half-open and its one trial call is still running; \
         failing fast until it ends"
    )]
    TrialRunning { key: String },
}

/// How a call went, as far as its breaker is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Success,
    Failure,
    /// Says nothing about the dependency.
    Neutral,
}

impl Outcome {
    pub fn of(result: &Result<StepSuccess, StepFailure>) -> Self {
        match result {
            Ok(_) => Self::Success,
            Err(f) => Self::of_class(f.class),
        }
    }

    pub fn of_class(class: ErrorClass) -> Self {
        match class {
            ErrorClass::Validation => Self::Success,
            ErrorClass::Budget => Self::Neutral,
            ErrorClass::Network
            | ErrorClass::RateLimit
            | ErrorClass::Authentication
            | ErrorClass::Dependency
            | ErrorClass::Timeout
            | ErrorClass::Unknown => Self::Failure,
        }
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct KeyState {
    consecutive_failures: u32,
    open_until: Option<Instant>,
    /// The id of the half-open breaker's trial call, while it runs.
    trial: Option<u64>,
}

/// Every key's breaker.
#[derive(Debug, Clone)]
pub(crate) struct Breakers {
    config: BreakerConfig,
    clock: Arc<dyn Monotonic>,
    states: Arc<Mutex<HashMap<String, KeyState>>>,
    /// Ids of trial calls: a trial that outlived its half-open period (the breaker
    /// closed and opened again meanwhile) is not mistaken for the current one.
    next_trial: Arc<AtomicU64>,
}

impl Breakers {
    pub(crate) fn new(config: BreakerConfig, clock: Arc<dyn Monotonic>) -> Self {
        Self {
            config,
            clock,
            states: Arc::default(),
            next_trial: Arc::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, KeyState>> {
        // The map holds plain counters: a panic elsewhere cannot leave it half-updated
        // in a way that matters, so a poisoned lock is used as is.
        self.states.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ask to make a call under `key`'s breaker.
    ///
    /// A closed breaker with no failures has no entry in the map, so while every
    /// dependency answers, the map is empty and asking (and recording a success)
    /// hashes nothing.
    pub(crate) fn acquire(&self, key: impl Into<String>) -> Result<Permit, BreakerOpen> {
        let key = key.into();
        if self.config.failures == 0 {
            return Ok(Permit {
                breakers: None,
                key,
                trial: None,
                recorded: true,
            });
        }
        let mut trial = None;
        {
            let mut states = self.lock();
            // An empty map answers a lookup without hashing the key.
            if let Some(st) = states.get_mut(key.as_str())
                && let Some(until) = st.open_until
            {
                let now = self.clock.now();
                if now < until {
                    let remaining = until - now;
                    let wall = chrono::Utc::now()
                        + chrono::Duration::from_std(remaining).unwrap_or(chrono::Duration::zero());
                    return Err(BreakerOpen::Open {
                        failures: st.consecutive_failures,
                        key,
                        remaining,
                        until: wall.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                    });
                }
                if st.trial.is_some() {
                    return Err(BreakerOpen::TrialRunning { key });
                }
                let id = self.next_trial.fetch_add(1, Ordering::Relaxed);
                st.trial = Some(id);
                trial = Some(id);
            }
        }
        Ok(Permit {
            breakers: Some(self.clone()),
            key,
            trial,
            recorded: false,
        })
    }

    fn record(&self, key: &str, trial: Option<u64>, outcome: Outcome) {
        let mut states = self.lock();
        // A trial decides the half-open state only while it is the current trial;
        // otherwise (another call closed the breaker meanwhile) it is an ordinary
        // call.
        let trial = trial.is_some() && states.get(key).is_some_and(|st| st.trial == trial);
        match outcome {
            Outcome::Success => {
                // Closed with no failures is the same as no entry. (Unlike a
                // lookup, `remove` hashes the key even when the map is empty.)
                if !states.is_empty() {
                    states.remove(key);
                }
            }
            Outcome::Failure => {
                let now = self.clock.now();
                let st = states.entry(key.to_string()).or_default();
                st.consecutive_failures = st.consecutive_failures.saturating_add(1);
                if trial {
                    st.trial = None;
                    st.open_until = Some(now + self.config.open_for);
                } else if st.consecutive_failures >= self.config.failures {
                    st.open_until = Some(now + self.config.open_for);
                }
            }
            Outcome::Neutral => {
                if trial && let Some(st) = states.get_mut(key) {
                    st.trial = None;
                }
            }
        }
    }

    pub(crate) fn state(&self, key: &str) -> BreakerState {
        let now = self.clock.now();
        let states = self.lock();
        match states.get(key) {
            None => BreakerState::Closed {
                consecutive_failures: 0,
            },
            Some(st) => match st.open_until {
                None => BreakerState::Closed {
                    consecutive_failures: st.consecutive_failures,
                },
                Some(until) if now < until => BreakerState::Open { until },
                Some(_) => BreakerState::HalfOpen {
                    trial_in_flight: st.trial.is_some(),
                },
            },
        }
    }
}

/// Leave to make one call; say how it went with [`Permit::record`]. A permit dropped
/// without a record (the call was cancelled) counts as [`Outcome::Neutral`], so a
/// cancelled trial call does not leave a breaker half-open for ever.
#[must_use]
pub(crate) struct Permit {
    breakers: Option<Breakers>,
    key: String,
    /// The trial's id, when this is a half-open breaker's trial call.
    trial: Option<u64>,
    recorded: bool,
}

impl Permit {
    pub(crate) fn record(mut self, outcome: Outcome) {
        self.recorded = true;
        if let Some(b) = &self.breakers {
            b.record(&self.key, self.trial, outcome);
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if !self.recorded
            && let Some(b) = &self.breakers
        {
            b.record(&self.key, self.trial, Outcome::Neutral);
        }
    }
}

#[cfg(test)]
mod tests;
