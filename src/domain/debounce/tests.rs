use chrono::{Duration, TimeZone, Utc};
use cqrs_es::Aggregate;
use uuid::Uuid;

use super::*;

fn run(n: u128) -> RunId {
    RunId::from_uuid(Uuid::from_u128(n))
}

fn start(n: u128, at: DateTime<Utc>) -> DebounceCommand {
    DebounceCommand::Start {
        run_id: run(n),
        window_seconds: 60,
        by: "hook:orders".into(),
        at,
    }
}

#[test]
fn a_start_within_the_window_joins_the_first_and_a_later_one_starts_anew() {
    let t0 = Utc.with_ymd_and_hms(2026, 11, 25, 9, 0, 0).unwrap();
    let mut key = Debounce::default();
    let first = key
        .decide(start(1, t0))
        .expect("the first start owns the key");
    assert_eq!(first.len(), 1);
    for e in first {
        key.apply(e);
    }
    for later in [0, 1, 59] {
        let at = t0 + Duration::seconds(later);
        assert_eq!(
            key.decide(start(2, at)),
            Err(DebounceError::Joins {
                run_id: run(1),
                since: t0
            }),
            "{later}s after"
        );
        assert_eq!(key.owner_at(at), Some(run(1)));
    }
    let after = t0 + Duration::seconds(60);
    assert_eq!(key.owner_at(after), None, "the window is half-open");
    let next = key.decide(start(3, after)).expect("a new window");
    for e in next {
        key.apply(e);
    }
    assert_eq!(key.owner_at(after + Duration::seconds(30)), Some(run(3)));
    let refused = key.decide(DebounceCommand::Start {
        run_id: run(4),
        window_seconds: 0,
        by: "x".into(),
        at: after,
    });
    assert_eq!(refused, Err(DebounceError::NoWindow));
}

#[test]
fn the_started_event_reads_as_documented() {
    let at = Utc.with_ymd_and_hms(2026, 11, 25, 9, 0, 0).unwrap();
    let event = DebounceEvent::Started {
        run_id: run(7),
        window_seconds: 30,
        by: "ops".into(),
        at,
    };
    let json = serde_json::to_value(&event).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"debounce.started": {
            "run_id": run(7).to_string(), "window_seconds": 30, "by": "ops",
            "at": "2026-11-25T09:00:00Z"}})
    );
    assert_eq!(cqrs_es::DomainEvent::event_type(&event), "debounce.started");
}
