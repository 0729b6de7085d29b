use chrono::{Duration, TimeZone};
use cqrs_es::Aggregate;

use super::*;

fn t(h: u32, m: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, h, m, s).unwrap()
}

fn declare(spec: ScheduleSpec, at: DateTime<Utc>) -> ScheduleCommand {
    ScheduleCommand::Declare {
        name: "minutely".into(),
        workflow: "report".into(),
        spec,
        source: ScheduleSource::Api,
        by: "ops".into(),
        at,
    }
}

/// A schedule declared at 09:00 with `spec`.
fn declared(spec: ScheduleSpec) -> Schedule {
    let mut s = Schedule::default();
    run(&mut s, declare(spec, t(9, 0, 0))).unwrap();
    s
}

fn every_minute() -> ScheduleSpec {
    ScheduleSpec::every("1m")
}

fn run(s: &mut Schedule, command: ScheduleCommand) -> Result<Vec<ScheduleEvent>, ScheduleError> {
    let events = s.decide(command)?;
    for e in &events {
        s.apply(e.clone());
    }
    Ok(events)
}

fn tick(s: &mut Schedule, now: DateTime<Utc>, previous_active: bool) -> Vec<ScheduleEvent> {
    run(
        s,
        ScheduleCommand::Tick {
            now,
            previous_active,
        },
    )
    .unwrap()
}

fn fired(due: DateTime<Utc>, now: DateTime<Utc>) -> ScheduleEvent {
    ScheduleEvent::Fired {
        due_at: Some(due),
        run_id: scheduled_run_id("minutely", due),
        by: "schedule:minutely".into(),
        at: now,
    }
}

fn skipped(
    first: DateTime<Utc>,
    last: DateTime<Utc>,
    count: u64,
    reason: SkipReason,
    now: DateTime<Utc>,
) -> ScheduleEvent {
    ScheduleEvent::Skipped {
        first,
        last,
        count,
        reason,
        at: now,
    }
}

#[test]
fn a_time_fires_once_when_it_comes() {
    let mut s = declared(every_minute());
    assert_eq!(s.next(), Some((t(9, 1, 0), t(9, 1, 0))));
    assert!(tick(&mut s, t(9, 0, 59), false).is_empty(), "not yet");
    let now = t(9, 1, 0) + Duration::milliseconds(3);
    assert_eq!(tick(&mut s, now, false), [fired(t(9, 1, 0), now)]);
    // A second server deciding on the same state would decide the same; once the
    // first's events are in, the time is handled and nothing fires again.
    assert!(tick(&mut s, now, false).is_empty());
    assert_eq!(s.last_run(), Some(scheduled_run_id("minutely", t(9, 1, 0))));
    assert_eq!(s.next(), Some((t(9, 2, 0), t(9, 2, 0))));
    assert_ne!(
        scheduled_run_id("minutely", t(9, 1, 0)),
        scheduled_run_id("minutely", t(9, 2, 0))
    );
    assert_ne!(
        scheduled_run_id("minutely", t(9, 1, 0)),
        scheduled_run_id("hourly", t(9, 1, 0))
    );
}

#[test]
fn missed_times_are_skipped_by_default_and_the_one_on_time_fires() {
    let mut s = declared(every_minute());
    // No server ran from 09:00 to 09:10:30: 09:01 to 09:09 are over a minute late.
    let now = t(9, 10, 30);
    assert_eq!(
        tick(&mut s, now, false),
        [
            skipped(t(9, 1, 0), t(9, 9, 0), 9, SkipReason::Missed, now),
            fired(t(9, 10, 0), now)
        ]
    );
    assert_eq!((s.fired(), s.skipped()), (1, 9));
}

#[test]
fn catch_up_fires_the_latest_missed_times_up_to_its_limit() {
    let mut spec = every_minute();
    spec.missed = MissedPolicy::CatchUp;
    spec.catch_up_limit = 3;
    spec.overlap = OverlapPolicy::Allow;
    let mut s = declared(spec.clone());
    let now = t(9, 10, 30);
    assert_eq!(
        tick(&mut s, now, false),
        [
            skipped(t(9, 1, 0), t(9, 6, 0), 6, SkipReason::Missed, now),
            fired(t(9, 7, 0), now),
            fired(t(9, 8, 0), now),
            fired(t(9, 9, 0), now),
            fired(t(9, 10, 0), now),
        ]
    );
    // With overlap `skip`, caught-up times overlap the first one fired.
    spec.overlap = OverlapPolicy::Skip;
    let mut s = declared(spec);
    assert_eq!(
        tick(&mut s, now, false),
        [
            skipped(t(9, 1, 0), t(9, 6, 0), 6, SkipReason::Missed, now),
            fired(t(9, 7, 0), now),
            skipped(t(9, 8, 0), t(9, 10, 0), 3, SkipReason::Overlap, now),
        ]
    );
}

#[test]
fn a_time_during_the_previous_run_is_skipped_queued_or_allowed() {
    let now = t(9, 1, 1);
    let mut skip = declared(every_minute());
    assert_eq!(
        tick(&mut skip, now, true),
        [skipped(t(9, 1, 0), t(9, 1, 0), 1, SkipReason::Overlap, now)]
    );
    let mut allow_spec = every_minute();
    allow_spec.overlap = OverlapPolicy::Allow;
    let mut allow = declared(allow_spec);
    assert_eq!(tick(&mut allow, now, true), [fired(t(9, 1, 0), now)]);

    let mut queue_spec = every_minute();
    queue_spec.overlap = OverlapPolicy::Queue;
    let mut queue = declared(queue_spec);
    assert_eq!(
        tick(&mut queue, now, true),
        [ScheduleEvent::Queued {
            due_at: t(9, 1, 0),
            at: now
        }]
    );
    assert_eq!(queue.queued(), [t(9, 1, 0)]);
    assert_eq!(
        queue.wake_at(),
        Some(t(9, 1, 0)),
        "a queued time wakes at once"
    );
    // Still going: it waits. Ended: the queued time fires, and the next time, which
    // comes while that run goes, queues in its turn.
    assert!(tick(&mut queue, t(9, 1, 30), true).is_empty());
    let later = t(9, 2, 0);
    assert_eq!(
        tick(&mut queue, later, false),
        [
            fired(t(9, 1, 0), later),
            ScheduleEvent::Queued {
                due_at: t(9, 2, 0),
                at: later
            }
        ]
    );
    assert_eq!(queue.queued(), [t(9, 2, 0)]);
}

#[test]
fn a_full_queue_skips() {
    let mut spec = ScheduleSpec::every("1s");
    spec.overlap = OverlapPolicy::Queue;
    spec.grace_seconds = 3600;
    let mut s = declared(spec);
    let now = t(9, 0, 0) + Duration::seconds(QUEUE_LIMIT as i64 + 5);
    let events = tick(&mut s, now, true);
    assert_eq!(s.queued().len(), QUEUE_LIMIT);
    assert_eq!(
        events.last(),
        Some(&skipped(
            t(9, 0, 0) + Duration::seconds(QUEUE_LIMIT as i64 + 1),
            now,
            5,
            SkipReason::QueueFull,
            now
        ))
    );
}

#[test]
fn a_paused_schedule_fires_nothing_and_resumes_from_then() {
    let mut s = declared(every_minute());
    run(
        &mut s,
        ScheduleCommand::Pause {
            by: "ops".into(),
            reason: "maintenance".into(),
            at: t(9, 0, 30),
        },
    )
    .unwrap();
    assert_eq!(s.wake_at(), None);
    assert!(tick(&mut s, t(9, 5, 0), false).is_empty());
    let again = run(
        &mut s,
        ScheduleCommand::Pause {
            by: "ops".into(),
            reason: "again".into(),
            at: t(9, 5, 0),
        },
    );
    assert!(matches!(
        again,
        Err(ScheduleError::State {
            state: "paused",
            ..
        })
    ));
    run(
        &mut s,
        ScheduleCommand::Resume {
            by: "ops".into(),
            at: t(9, 5, 10),
        },
    )
    .unwrap();
    // The times while it was paused are not caught up.
    let now = t(9, 6, 0);
    assert_eq!(tick(&mut s, now, false), [fired(t(9, 6, 0), now)]);
}

#[test]
fn jitter_delays_a_time_by_the_same_amount_everywhere() {
    let mut spec = every_minute();
    spec.jitter_seconds = 30;
    let mut s = declared(spec);
    let delay = jitter("minutely", t(9, 1, 0), 30);
    assert_eq!(s.next(), Some((t(9, 1, 0), t(9, 1, 0) + delay)));
    let early = t(9, 1, 0) + delay - Duration::milliseconds(1);
    assert!(tick(&mut s, early, false).is_empty());
    let now = t(9, 1, 0) + delay;
    assert_eq!(tick(&mut s, now, false), [fired(t(9, 1, 0), now)]);
}

#[test]
fn declaring_again_changes_only_what_changed_and_keeps_its_owner() {
    let mut s = declared(every_minute());
    assert!(
        run(&mut s, declare(every_minute(), t(9, 0, 5)))
            .unwrap()
            .is_empty()
    );
    let hourly = ScheduleSpec::every("1h");
    assert_eq!(
        run(&mut s, declare(hourly.clone(), t(9, 0, 5)))
            .unwrap()
            .len(),
        1
    );
    assert_eq!(s.next(), Some((t(10, 0, 0), t(10, 0, 0))));
    let mut from_file = declare(hourly, t(9, 0, 6));
    if let ScheduleCommand::Declare { source, .. } = &mut from_file {
        *source = ScheduleSource::Workflow;
    }
    let owned = run(&mut s, from_file).unwrap_err();
    assert!(owned.to_string().contains("over the API"), "{owned}");
    let bad = run(
        &mut s,
        declare(ScheduleSpec::cron("99 * * * *"), t(9, 0, 7)),
    )
    .unwrap_err();
    assert!(bad.to_string().contains("cron"), "{bad}");
    // Removed, it fires nothing; declared again, only times from then on.
    run(
        &mut s,
        ScheduleCommand::Remove {
            by: "ops".into(),
            at: t(9, 1, 0),
        },
    )
    .unwrap();
    assert!(tick(&mut s, t(11, 0, 0), false).is_empty());
    assert!(matches!(
        s.decide(ScheduleCommand::Pause {
            by: "ops".into(),
            reason: String::new(),
            at: t(11, 0, 0)
        }),
        Err(ScheduleError::NotDeclared(_))
    ));
    run(&mut s, declare(every_minute(), t(11, 30, 10))).unwrap();
    let now = t(11, 31, 0);
    assert_eq!(tick(&mut s, now, false), [fired(t(11, 31, 0), now)]);
}

#[test]
fn a_trigger_fires_by_hand_without_moving_the_times() {
    let mut s = declared(every_minute());
    let run_id = RunId::from_uuid(Uuid::from_u128(7));
    let events = run(
        &mut s,
        ScheduleCommand::Trigger {
            run_id,
            by: "ops".into(),
            at: t(9, 0, 10),
        },
    )
    .unwrap();
    assert_eq!(
        events,
        [ScheduleEvent::Fired {
            due_at: None,
            run_id,
            by: "ops".into(),
            at: t(9, 0, 10)
        }]
    );
    assert_eq!(s.last_run(), Some(run_id));
    assert_eq!(s.next(), Some((t(9, 1, 0), t(9, 1, 0))));
}

#[test]
fn the_events_keep_their_wire_names() {
    use cqrs_es::DomainEvent;
    let now = t(9, 1, 0);
    for (event, name) in [
        (fired(now, now), "schedule.fired"),
        (
            skipped(now, now, 1, SkipReason::Missed, now),
            "schedule.skipped",
        ),
        (
            ScheduleEvent::Queued {
                due_at: now,
                at: now,
            },
            "schedule.queued",
        ),
    ] {
        assert_eq!(event.event_type(), name);
        let wire = serde_json::to_value(&event).unwrap();
        assert!(wire.get(name).is_some(), "{wire}");
        assert_eq!(
            serde_json::from_value::<ScheduleEvent>(wire).unwrap(),
            event
        );
    }
}
