use chrono::TimeZone;

use super::*;

fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap()
}

fn times(timing: &Timing, from: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
    let mut out = Vec::new();
    let mut t = from;
    for _ in 0..n {
        t = timing.next_after(t).expect("a next time");
        out.push(t);
    }
    out
}

#[test]
fn an_interval_counts_from_the_epoch_whatever_the_start() {
    let timing = ScheduleSpec::every("15m").timing().unwrap();
    assert_eq!(
        times(&timing, utc(2026, 1, 1, 9, 7, 30), 3),
        [
            utc(2026, 1, 1, 9, 15, 0),
            utc(2026, 1, 1, 9, 30, 0),
            utc(2026, 1, 1, 9, 45, 0)
        ]
    );
    // Strictly after: a time exactly on the grid moves to the next one.
    assert_eq!(
        timing.next_after(utc(2026, 1, 1, 9, 15, 0)),
        Some(utc(2026, 1, 1, 9, 30, 0))
    );
    assert_eq!(parse_interval("90"), Ok(90));
    assert_eq!(parse_interval("2h"), Ok(7200));
    assert_eq!(parse_interval("1d"), Ok(86_400));
    for bad in ["", "0s", "15 minutes", "m", "-5m", "400d"] {
        assert!(parse_interval(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn a_cron_pattern_is_read_in_its_time_zone() {
    let mut spec = ScheduleSpec::cron("0 9 * * MON-FRI");
    spec.timezone = Some("America/New_York".into());
    let timing = spec.timing().unwrap();
    // Friday 2026-01-02 at 09:00 in New York is 14:00 UTC; then Monday.
    assert_eq!(
        times(&timing, utc(2026, 1, 2, 12, 0, 0), 2),
        [utc(2026, 1, 2, 14, 0, 0), utc(2026, 1, 5, 14, 0, 0)]
    );
    // Six fields: seconds first.
    let seconds = ScheduleSpec::cron("*/20 * * * * *").timing().unwrap();
    assert_eq!(
        times(&seconds, utc(2026, 1, 1, 0, 0, 5), 2),
        [utc(2026, 1, 1, 0, 0, 20), utc(2026, 1, 1, 0, 0, 40)]
    );
}

#[test]
fn daylight_saving_changes_fire_a_daily_time_once() {
    let mut spec = ScheduleSpec::cron("30 2 * * *");
    spec.timezone = Some("Europe/Berlin".into());
    let timing = spec.timing().unwrap();
    // 2026-03-29: clocks jump from 02:00 to 03:00, so 02:30 does not exist; it fires
    // once, at 03:00 CEST (01:00 UTC), and the next day at 02:30 CEST again.
    assert_eq!(
        times(&timing, utc(2026, 3, 28, 12, 0, 0), 2),
        [utc(2026, 3, 29, 1, 0, 0), utc(2026, 3, 30, 0, 30, 0)]
    );
    // 2026-10-25: 02:30 happens twice (CEST, then CET); it fires once, at the first.
    assert_eq!(
        times(&timing, utc(2026, 10, 24, 12, 0, 0), 2),
        [utc(2026, 10, 25, 0, 30, 0), utc(2026, 10, 26, 1, 30, 0)]
    );
}

#[test]
fn a_bad_spec_says_which_field_and_why() {
    let field = |spec: ScheduleSpec| {
        spec.problems()
            .into_iter()
            .map(|(field, message)| format!("{field}: {message}"))
            .collect::<Vec<_>>()
            .join("; ")
    };
    assert!(field(ScheduleSpec::cron("61 * * * *")).starts_with("cron: cron pattern"));
    assert!(field(ScheduleSpec::cron("* * *")).starts_with("cron:"));
    let mut zone = ScheduleSpec::cron("0 9 * * *");
    zone.timezone = Some("Mars/Olympus".into());
    assert!(field(zone).contains("unknown time zone \"Mars/Olympus\""));
    let mut both = ScheduleSpec::cron("0 9 * * *");
    both.every = Some("1h".into());
    assert!(field(both).contains("not both"));
    let mut neither = ScheduleSpec::every("1h");
    neither.every = None;
    assert!(field(neither).contains("needs `cron`"));
    let mut zoned_interval = ScheduleSpec::every("1h");
    zoned_interval.timezone = Some("UTC".into());
    assert!(field(zoned_interval).starts_with("timezone:"));
    let mut limits = ScheduleSpec::every("1h");
    limits.catch_up_limit = 0;
    limits.grace_seconds = 0;
    limits.name = Some("-bad".into());
    let said = field(limits);
    assert!(
        said.contains("catch_up_limit") && said.contains("grace_seconds") && said.contains("name"),
        "{said}"
    );
    assert!(ScheduleSpec::every("1h").problems().is_empty());
}

#[test]
fn jitter_is_the_same_everywhere_and_stays_below_its_bound() {
    let due = utc(2026, 1, 1, 9, 0, 0);
    assert_eq!(jitter("nightly", due, 0), Duration::zero());
    let once = jitter("nightly", due, 30);
    assert_eq!(once, jitter("nightly", due, 30), "deterministic");
    let spread: std::collections::BTreeSet<i64> = (0..50)
        .map(|i| jitter(&format!("s{i}"), due, 30).num_milliseconds())
        .collect();
    assert!(spread.iter().all(|ms| (0..30_000).contains(ms)));
    assert!(spread.len() > 40, "spread over the window: {spread:?}");
}

#[test]
fn the_spec_reads_with_defaults_and_writes_only_what_differs() {
    let spec: ScheduleSpec =
        serde_json::from_value(serde_json::json!({"cron": "0 9 * * *"})).unwrap();
    assert_eq!(spec, ScheduleSpec::cron("0 9 * * *"));
    assert_eq!(
        serde_json::to_value(&spec).unwrap(),
        serde_json::json!({"cron": "0 9 * * *"})
    );
    let unknown =
        serde_json::from_value::<ScheduleSpec>(serde_json::json!({"cron": "0 9 * * *", "when": 1}));
    assert!(unknown.is_err());
}
