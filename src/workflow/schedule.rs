//! Schedules in the language: when a workflow starts by itself, declared in its file
//! (`schedules:`) or over the API, and the arithmetic of their times.
//!
//! A schedule is a cron pattern read in a time zone (daylight-saving gaps and repeats
//! handled by `croner`: a time that does not exist that day fires at the first one
//! after the gap, a time that happens twice fires once) or a fixed interval counted
//! from the Unix epoch, so every server computes the same times without agreeing on
//! anything. The policies say what happens to times that were missed (the service
//! was down) and to times that come while the previous run still runs.

use std::str::FromStr;

use chrono::{DateTime, Duration, Utc};
use chrono_tz::Tz;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Times older than this many seconds past due are missed (default).
pub const DEFAULT_GRACE_SECONDS: u64 = 60;
/// Missed times caught up at most (default).
pub const DEFAULT_CATCH_UP_LIMIT: u32 = 10;
/// Missed times caught up at most, whatever is asked.
pub const MAX_CATCH_UP_LIMIT: u32 = 1_000;

/// One schedule of a workflow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSpec {
    /// The schedule's name, unique in a store (default: the workflow's name; needed
    /// when a file declares more than one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"))]
    pub name: Option<String>,
    /// A cron pattern: 5 fields (minute hour day-of-month month day-of-week) or 6
    /// (seconds first); names (`MON`, `JAN`), ranges, steps, `L`, `W` and `#`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// An interval instead of a cron pattern: `30s`, `15m`, `1h`, `1d` (times are
    /// whole multiples of it since 1970-01-01T00:00:00Z).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<String>,
    /// The IANA time zone the cron pattern is read in (default `UTC`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// The inputs each run starts with.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub inputs: Map<String, Value>,
    /// Times missed by more than `grace_seconds` (no server was running): `skip`
    /// them, or `catch_up` the last `catch_up_limit` of them.
    #[serde(default, skip_serializing_if = "is_default")]
    pub missed: MissedPolicy,
    /// How many missed times `catch_up` fires at most (the latest ones).
    #[serde(
        default = "default_catch_up",
        skip_serializing_if = "is_default_catch_up"
    )]
    #[schemars(range(min = 1, max = 1000))]
    pub catch_up_limit: u32,
    /// How late a time may fire and still count as on time.
    #[serde(default = "default_grace", skip_serializing_if = "is_default_grace")]
    #[schemars(range(min = 1))]
    pub grace_seconds: u64,
    /// A time that comes while the schedule's previous run is still going: `skip` it,
    /// `queue` it until that run ends, or `allow` both to run.
    #[serde(default, skip_serializing_if = "is_default")]
    pub overlap: OverlapPolicy,
    /// Spread starts over up to this many seconds after each time (the same delay on
    /// every server, so a thousand schedules at 09:00 do not all start at once).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub jitter_seconds: u64,
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}
fn default_catch_up() -> u32 {
    DEFAULT_CATCH_UP_LIMIT
}
fn is_default_catch_up(n: &u32) -> bool {
    *n == DEFAULT_CATCH_UP_LIMIT
}
fn default_grace() -> u64 {
    DEFAULT_GRACE_SECONDS
}
fn is_default_grace(n: &u64) -> bool {
    *n == DEFAULT_GRACE_SECONDS
}
fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What happens to times that were missed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MissedPolicy {
    #[default]
    Skip,
    CatchUp,
}

/// What happens to a time that comes while the previous run still runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OverlapPolicy {
    #[default]
    Skip,
    Queue,
    Allow,
}

impl OverlapPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Skip => "skip",
            Self::Queue => "queue",
            Self::Allow => "allow",
        }
    }
}

/// When a schedule's times are, parsed.
#[derive(Debug, Clone)]
pub enum Timing {
    Cron {
        pattern: Box<croner::Cron>,
        zone: Tz,
    },
    Every {
        seconds: i64,
    },
}

/// Longest interval accepted (a year).
const MAX_EVERY_SECONDS: i64 = 366 * 24 * 3600;

impl ScheduleSpec {
    /// A spec with defaults for everything but its timing.
    pub fn cron(pattern: &str) -> Self {
        Self {
            cron: Some(pattern.to_string()),
            ..Self::blank()
        }
    }

    /// A spec with defaults for everything but its interval.
    pub fn every(interval: &str) -> Self {
        Self {
            every: Some(interval.to_string()),
            ..Self::blank()
        }
    }

    fn blank() -> Self {
        Self {
            name: None,
            cron: None,
            every: None,
            timezone: None,
            inputs: Map::new(),
            missed: MissedPolicy::Skip,
            catch_up_limit: DEFAULT_CATCH_UP_LIMIT,
            grace_seconds: DEFAULT_GRACE_SECONDS,
            overlap: OverlapPolicy::Skip,
            jitter_seconds: 0,
        }
    }

    /// Its timing, or what is wrong with it: `(field, message)`.
    pub fn timing(&self) -> Result<Timing, (&'static str, String)> {
        match (&self.cron, &self.every) {
            (Some(_), Some(_)) => Err(("every", "give `cron` or `every`, not both".to_string())),
            (None, None) => Err((
                "cron",
                "a schedule needs `cron` (a pattern) or `every` (an interval)".to_string(),
            )),
            (Some(pattern), None) => {
                let zone = self.zone()?;
                let parsed = croner::Cron::from_str(pattern)
                    .map_err(|e| ("cron", format!("cron pattern {pattern:?}: {e}")))?;
                Ok(Timing::Cron {
                    pattern: Box::new(parsed),
                    zone,
                })
            }
            (None, Some(every)) => {
                if self.timezone.is_some() {
                    return Err((
                        "timezone",
                        "an interval counts from the epoch in any zone: `timezone` goes with `cron`"
                            .to_string(),
                    ));
                }
                let seconds = parse_interval(every).map_err(|e| ("every", e))?;
                Ok(Timing::Every { seconds })
            }
        }
    }

    fn zone(&self) -> Result<Tz, (&'static str, String)> {
        match &self.timezone {
            None => Ok(Tz::UTC),
            Some(name) => name.parse::<Tz>().map_err(|_| {
                (
                    "timezone",
                    format!("unknown time zone {name:?}: use an IANA name such as Europe/Paris"),
                )
            }),
        }
    }

    /// Every problem with the spec, `(field, message)`: its timing and its limits.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut found = Vec::new();
        match (&self.cron, self.timing()) {
            // Both the pattern and the zone, when both are wrong.
            (Some(pattern), Err(problem)) if problem.0 == "timezone" => {
                found.push(problem);
                if let Err(e) = croner::Cron::from_str(pattern) {
                    found.push(("cron", format!("cron pattern {pattern:?}: {e}")));
                }
            }
            (_, Err(problem)) => found.push(problem),
            (_, Ok(_)) => {}
        }
        if !(1..=MAX_CATCH_UP_LIMIT).contains(&self.catch_up_limit) {
            found.push((
                "catch_up_limit",
                format!("must be 1 to {MAX_CATCH_UP_LIMIT}"),
            ));
        }
        if self.grace_seconds == 0 {
            found.push(("grace_seconds", "must be at least 1".to_string()));
        }
        if let Some(name) = &self.name
            && !valid_name(name)
        {
            found.push((
                "name",
                format!("{name:?}: letters, digits, `-`, `_` and `.`, 1 to 128, starting with a letter or digit"),
            ));
        }
        found
    }
}

/// Whether `name` can name a schedule.
pub fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && name.len() <= 128
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// `30s`, `15m`, `2h`, `1d` (or a bare number of seconds) in seconds.
pub fn parse_interval(text: &str) -> Result<i64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let unit_seconds = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => {
            return Err(format!(
                "interval {text:?}: a number and a unit, s, m, h or d (`15m`)"
            ));
        }
    };
    let n: i64 = number
        .parse()
        .map_err(|_| format!("interval {text:?}: a number and a unit, s, m, h or d (`15m`)"))?;
    let seconds = n.saturating_mul(unit_seconds);
    if !(1..=MAX_EVERY_SECONDS).contains(&seconds) {
        return Err(format!("interval {text:?}: from 1 second to 366 days"));
    }
    Ok(seconds)
}

impl Timing {
    /// The first time strictly after `after`; `None` when there is none (a cron
    /// pattern for a day that never comes).
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Self::Every { seconds } => {
                let now = after.timestamp();
                let next = (now.div_euclid(*seconds) + 1).checked_mul(*seconds)?;
                DateTime::from_timestamp(next, 0)
            }
            Self::Cron { pattern, zone } => {
                // Whole seconds: a time is a second, and "after" means the next one.
                let from = after.with_timezone(zone);
                pattern
                    .find_next_occurrence(&from, false)
                    .ok()
                    .map(|t| t.with_timezone(&Utc))
                    .filter(|t| *t > after)
            }
        }
    }
}

/// The delay a schedule adds to one of its times, the same on every server: a hash of
/// the schedule's name and the time, below `jitter_seconds`.
pub fn jitter(name: &str, due: DateTime<Utc>, jitter_seconds: u64) -> Duration {
    if jitter_seconds == 0 {
        return Duration::zero();
    }
    let digest = uuid::Uuid::new_v5(
        &uuid::Uuid::NAMESPACE_OID,
        format!("{name}\n{}", due.timestamp()).as_bytes(),
    );
    let spread = jitter_seconds.saturating_mul(1000);
    let ms = (digest.as_u128() as u64) % spread;
    Duration::milliseconds(i64::try_from(ms).unwrap_or(0))
}

#[cfg(test)]
mod tests;
