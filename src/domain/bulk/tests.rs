use chrono::{TimeZone, Utc};
use cqrs_es::Aggregate;
use uuid::Uuid;

use super::*;

fn at() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 9, 0, 0).unwrap()
}

fn run(n: u128) -> RunId {
    RunId::from_uuid(Uuid::from_u128(n))
}

fn planned(total: u64) -> Bulk {
    let mut b = Bulk::default();
    for e in b
        .decide(BulkCommand::Plan {
            bulk_id: Uuid::from_u128(1),
            action: BulkAction::Cancel,
            from_step: None,
            filter: BulkFilter::default(),
            reason: "cleanup".into(),
            total,
            by: "ops".into(),
            at: at(),
        })
        .unwrap()
    {
        b.apply(e);
    }
    b
}

fn apply(b: &mut Bulk, command: BulkCommand) -> Result<(), BulkError> {
    for e in b.decide(command)? {
        b.apply(e);
    }
    Ok(())
}

#[test]
fn a_bulk_action_selects_then_moves_forward_to_its_end() {
    let mut b = planned(3);
    assert_eq!(b.status(), Some(BulkStatus::Selecting));
    apply(
        &mut b,
        BulkCommand::Select {
            runs: vec![run(1), run(2)],
            at: at(),
        },
    )
    .unwrap();
    // Progress waits for the whole selection.
    let early = apply(
        &mut b,
        BulkCommand::Progress {
            through: 1,
            acted: 1,
            skipped: vec![],
            at: at(),
        },
    );
    assert!(early.is_err());
    apply(
        &mut b,
        BulkCommand::Select {
            runs: vec![run(3)],
            at: at(),
        },
    )
    .unwrap();
    assert!(
        apply(
            &mut b,
            BulkCommand::Select {
                runs: vec![run(4)],
                at: at()
            }
        )
        .is_err(),
        "more than selected"
    );
    assert_eq!(b.status(), Some(BulkStatus::Running));
    assert_eq!(b.remaining(), &[run(1), run(2), run(3)]);
    let skipped = vec![Skipped {
        run_id: run(2),
        reason: "finished".into(),
    }];
    apply(
        &mut b,
        BulkCommand::Progress {
            through: 2,
            acted: 1,
            skipped,
            at: at(),
        },
    )
    .unwrap();
    assert_eq!(b.remaining(), &[run(3)]);
    // Backwards, or counts that do not add up, are refused; completing early too.
    assert!(
        apply(
            &mut b,
            BulkCommand::Progress {
                through: 2,
                acted: 0,
                skipped: vec![],
                at: at()
            }
        )
        .is_err()
    );
    assert!(
        apply(
            &mut b,
            BulkCommand::Progress {
                through: 3,
                acted: 2,
                skipped: vec![],
                at: at()
            }
        )
        .is_err()
    );
    assert!(apply(&mut b, BulkCommand::Complete { at: at() }).is_err());
    apply(
        &mut b,
        BulkCommand::Progress {
            through: 3,
            acted: 1,
            skipped: vec![],
            at: at(),
        },
    )
    .unwrap();
    apply(&mut b, BulkCommand::Complete { at: at() }).unwrap();
    assert_eq!(b.status(), Some(BulkStatus::Completed));
    assert_eq!((b.acted(), b.skipped().len()), (2, 1));
}

#[test]
fn nothing_but_a_plan_starts_a_bulk_action_and_a_plan_is_made_once() {
    let b = Bulk::default();
    assert!(matches!(
        b.decide(BulkCommand::Complete { at: at() }),
        Err(BulkError::NotPlanned(_))
    ));
    let planned = planned(0);
    assert_eq!(
        planned.status(),
        Some(BulkStatus::Running),
        "an empty selection is selected"
    );
    let again = planned.decide(BulkCommand::Plan {
        bulk_id: Uuid::from_u128(1),
        action: BulkAction::Pause,
        from_step: None,
        filter: BulkFilter::default(),
        reason: String::new(),
        total: 1,
        by: "ops".into(),
        at: at(),
    });
    assert!(matches!(again, Err(BulkError::AlreadyPlanned(_))));
}

#[test]
fn the_events_keep_their_wire_names() {
    use cqrs_es::DomainEvent;
    let e = BulkEvent::Completed { at: at() };
    assert_eq!(e.event_type(), "bulk.completed");
    let v = serde_json::to_value(&e).unwrap();
    assert!(v.get("bulk.completed").is_some(), "{v}");
}

fn plan(action: BulkAction, from_step: Option<&str>) -> Result<Vec<BulkEvent>, BulkError> {
    Bulk::default().decide(BulkCommand::Plan {
        bulk_id: Uuid::from_u128(2),
        action,
        from_step: from_step.map(str::to_string),
        filter: BulkFilter::default(),
        reason: "fixed the parser".into(),
        total: 0,
        by: "ops".into(),
        at: at(),
    })
}

#[test]
fn a_rerun_names_its_step_and_no_other_action_takes_one() {
    let events = plan(BulkAction::Rerun, Some("process")).unwrap();
    let mut b = Bulk::default();
    for e in events {
        b.apply(e);
    }
    assert_eq!(b.action(), Some(BulkAction::Rerun));
    assert_eq!(b.from_step(), Some("process"));
    for missing in [None, Some(""), Some("  ")] {
        let refused = plan(BulkAction::Rerun, missing).unwrap_err();
        assert!(refused.to_string().contains("from_step"), "{refused}");
    }
    for action in [
        BulkAction::Cancel,
        BulkAction::Pause,
        BulkAction::Resume,
        BulkAction::Retry,
    ] {
        assert!(plan(action, None).is_ok());
        let refused = plan(action, Some("process")).unwrap_err();
        assert!(
            refused.to_string().contains("only a rerun"),
            "{action:?}: {refused}"
        );
    }
}

#[test]
fn a_planned_rerun_keeps_its_step_on_the_wire_and_older_plans_read_without_one() {
    let event = plan(BulkAction::Rerun, Some("process")).unwrap().remove(0);
    let wire = serde_json::to_value(&event).unwrap();
    assert_eq!(wire["bulk.planned"]["action"], "rerun");
    assert_eq!(wire["bulk.planned"]["from_step"], "process");
    assert_eq!(serde_json::from_value::<BulkEvent>(wire).unwrap(), event);
    // A plan recorded before reruns existed has no `from_step`.
    let older = serde_json::json!({"bulk.planned": {
        "bulk_id": Uuid::from_u128(3), "action": "cancel", "filter": {},
        "reason": "cleanup", "total": 0, "by": "ops", "at": at(),
    }});
    let BulkEvent::Planned { from_step, .. } = serde_json::from_value(older).unwrap() else {
        panic!("a plan");
    };
    assert_eq!(from_step, None);
    assert_eq!("rerun".parse::<BulkAction>(), Ok(BulkAction::Rerun));
    assert!(
        "hold".parse::<BulkAction>().is_err(),
        "hold is never asked for"
    );
}
