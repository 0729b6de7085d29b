//! Rate limits as arithmetic: the generic cell rate algorithm (GCRA), the token
//! bucket written as one timestamp per bucket.
//!
//! A bucket that allows `per_second` calls a second and `burst` at once keeps its
//! *theoretical arrival time* (TAT): when the next call would be due if calls came
//! exactly at the rate. A call arriving at `now` may go at
//! `max(now, TAT - (burst - 1) * T)` (with `T = 1 / per_second`), and moves the TAT
//! to `max(TAT, that time) + T`. awl *reserves* instead of refusing: a call that
//! cannot go now gets the time it may go, and the TAT moves past it, so each waiting
//! call is held back once, for exactly as long as needed, and calls go in the order
//! they asked. In any window of `w` seconds at most `burst + w * per_second` calls
//! go. The store keeps each bucket's TAT in a row it locks for the reservation, so
//! the arithmetic here holds across every worker.

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

/// One budget of calls: a rate limit, or one key's share of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RateBucket {
    /// `rate:NAME`, or `rate:NAME:key:VALUE` for one value of the limit's key.
    pub scope: String,
    pub per_second: f64,
    pub burst: u32,
}

/// The longest interval a bucket keeps between calls: a year (a rate out of range
/// is clamped to it, never a panic).
const MAX_INTERVAL_MICROS: i64 = 365 * 24 * 3_600 * 1_000_000;

impl RateBucket {
    /// The time between two calls at the rate, `T` (at least a microsecond).
    pub fn interval(&self) -> TimeDelta {
        let micros = (1_000_000.0 / self.per_second).round();
        // Rates are checked when the workflow loads (0 < per_second <= 10^6); one
        // outside that range is clamped.
        let micros = if micros.is_finite() && micros > 0.0 {
            (micros.min(MAX_INTERVAL_MICROS as f64) as i64).max(1)
        } else {
            MAX_INTERVAL_MICROS
        };
        TimeDelta::microseconds(micros)
    }

    /// How far ahead of its TAT a call may go: `(burst - 1) * T`.
    pub fn tolerance(&self) -> TimeDelta {
        let calls = i64::from(self.burst.max(1) - 1);
        let micros = self
            .interval()
            .num_microseconds()
            .unwrap_or(MAX_INTERVAL_MICROS);
        TimeDelta::microseconds(micros.saturating_mul(calls).min(i64::MAX / 1_000))
    }
}

fn minus(at: DateTime<Utc>, d: TimeDelta) -> DateTime<Utc> {
    at.checked_sub_signed(d).unwrap_or(DateTime::<Utc>::MIN_UTC)
}

fn plus(at: DateTime<Utc>, d: TimeDelta) -> DateTime<Utc> {
    at.checked_add_signed(d).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// What a call got from its buckets.
#[derive(Debug, Clone, PartialEq)]
pub struct Reservation {
    /// When the call may go: every bucket allows it then.
    pub go: DateTime<Utc>,
    /// The bucket that set that time (the first, when several agree).
    pub by: usize,
    /// Each bucket's new TAT, in the order given.
    pub tats: Vec<DateTime<Utc>>,
}

/// A reservation across buckets, each given with its TAT (`None` for a bucket never
/// used).
pub fn reserve(
    buckets: &[(&RateBucket, Option<DateTime<Utc>>)],
    now: DateTime<Utc>,
) -> Reservation {
    let allows: Vec<DateTime<Utc>> = buckets
        .iter()
        .map(|(bucket, tat)| match tat {
            Some(tat) => now.max(minus(*tat, bucket.tolerance())),
            None => now,
        })
        .collect();
    let go = allows.iter().copied().max().unwrap_or(now);
    let by = allows.iter().position(|t| *t == go).unwrap_or(0);
    let tats = buckets
        .iter()
        .map(|(bucket, tat)| plus(tat.map_or(go, |tat| tat.max(go)), bucket.interval()))
        .collect();
    Reservation { go, by, tats }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(per_second: f64, burst: u32) -> RateBucket {
        RateBucket {
            scope: "rate:api".into(),
            per_second,
            burst,
        }
    }

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::UNIX_EPOCH + TimeDelta::milliseconds(ms)
    }

    /// The times `n` calls asking at `asked` go, one after another.
    fn go_times(b: &RateBucket, asked: &[i64]) -> Vec<i64> {
        let mut tat = None;
        asked
            .iter()
            .map(|ms| {
                let r = reserve(&[(b, tat)], at(*ms));
                tat = Some(r.tats[0]);
                (r.go - at(0)).num_milliseconds()
            })
            .collect()
    }

    #[test]
    fn a_burst_goes_at_once_then_calls_follow_at_the_rate() {
        let b = bucket(10.0, 3);
        assert_eq!(
            go_times(&b, &[0, 0, 0, 0, 0, 0]),
            [0, 0, 0, 100, 200, 300],
            "three at once, then one every 100 ms"
        );
    }

    #[test]
    fn a_quiet_time_refills_the_burst_but_never_beyond() {
        let b = bucket(2.0, 2);
        // Two at once, then a long pause: again two at once, not more.
        assert_eq!(
            go_times(&b, &[0, 0, 10_000, 10_000, 10_000]),
            [0, 0, 10_000, 10_000, 10_500]
        );
    }

    #[test]
    fn a_slow_rate_spaces_calls_by_its_interval() {
        let b = bucket(0.5, 1);
        assert_eq!(b.interval(), TimeDelta::seconds(2));
        assert_eq!(go_times(&b, &[0, 0, 0]), [0, 2_000, 4_000]);
    }

    #[test]
    fn no_window_holds_more_than_the_burst_and_the_rate_allow() {
        let b = bucket(7.0, 4);
        // Calls asking at uneven times, many at once.
        let asked: Vec<i64> = (0..200).map(|i| (i * 37 % 1_000) + i * 20).collect();
        let mut sorted = asked.clone();
        sorted.sort_unstable();
        let went = go_times(&b, &sorted);
        for (i, start) in went.iter().enumerate() {
            for window_ms in [1, 100, 500, 1_000, 3_000] {
                let inside = went[i..]
                    .iter()
                    .take_while(|t| **t < start + window_ms)
                    .count() as f64;
                let allowed = 4.0 + 7.0 * window_ms as f64 / 1_000.0;
                assert!(
                    inside <= allowed,
                    "{inside} calls in {window_ms} ms from {start}"
                );
            }
        }
        assert!(
            went.windows(2).all(|w| w[0] <= w[1]),
            "calls go in the order they asked"
        );
    }

    #[test]
    fn several_buckets_go_when_every_one_allows() {
        let fast = bucket(100.0, 1);
        let slow = RateBucket {
            scope: "rate:slow".into(),
            per_second: 1.0,
            burst: 1,
        };
        // The slow bucket was used just now: its next call is due in a second.
        let r = reserve(&[(&fast, None), (&slow, Some(at(1_000)))], at(0));
        assert_eq!(
            (r.go, r.by),
            (at(1_000), 1),
            "the slow bucket holds it back"
        );
        assert_eq!(
            r.tats,
            [at(1_010), at(2_000)],
            "both move past the call's time"
        );
    }

    #[test]
    fn rates_out_of_range_never_panic() {
        for per_second in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e12] {
            let b = bucket(per_second, 0);
            let r = reserve(&[(&b, Some(at(5)))], at(0));
            assert!(r.go >= at(0) && r.tats[0] > r.go, "{per_second}");
        }
    }
}
