//! Rate limits at work: an attempt takes a token of each of its buckets before it is
//! performed, and an attempt whose token is further off than a short wait is not
//! performed but recorded as throttled until its token's time.
//!
//! The token is reserved in the database (`EventStore::reserve_rate`), shared by
//! every worker. A wait of up to [`WAIT_IN_PLACE`] is slept through by the task that
//! performs the attempt; a longer one ends the attempt's turn: the worker records
//! `run.step_throttled` (decided by the run aggregate, like an outcome) and the run
//! sleeps until then, when the same attempt starts again holding its reserved token
//! (the engine takes no second one). A throttle is not a failure: no retry is
//! counted and no error handler runs.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use crate::domain::Decide;
use crate::domain::ids::StepId;
use crate::domain::rate::RateBucket;
use crate::domain::run::{ErrorClass, Run, RunCommand, RunEvent, RunStatus, StepState};
use crate::engine::Failure;
use crate::store::EventStore;

/// A wait for a token up to this long is slept through rather than recorded.
pub(super) const WAIT_IN_PLACE: Duration = Duration::from_millis(1_000);

/// An attempt held back by a rate limit, as its task reports it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Throttled {
    pub step_id: StepId,
    pub attempt: u32,
    /// The bucket that set the time.
    pub limit: String,
    pub until: DateTime<Utc>,
}

/// What taking the tokens came to.
pub(super) enum Token {
    /// Go now (after sleeping through a short wait).
    Go,
    /// Reserved for later: record the throttle.
    Later { limit: String, until: DateTime<Utc> },
    /// The reservation could not be made: the attempt fails with this.
    Failed(Failure),
}

/// Take one token of each of `buckets` for an attempt asking at `now`.
pub(super) async fn take(store: &EventStore, buckets: &[RateBucket], now: DateTime<Utc>) -> Token {
    let reservation = match store.reserve_rate(buckets, now).await {
        Ok(r) => r,
        Err(e) => {
            return Token::Failed(Failure {
                class: ErrorClass::Dependency,
                message: format!("no rate-limit token could be reserved: {e}"),
            });
        }
    };
    let wait = (reservation.go - now).to_std().unwrap_or_default();
    if wait.is_zero() {
        return Token::Go;
    }
    if wait <= WAIT_IN_PLACE {
        tokio::time::sleep(wait).await;
        return Token::Go;
    }
    Token::Later {
        limit: buckets
            .get(reservation.by)
            .map(|b| b.scope.clone())
            .unwrap_or_default(),
        until: reservation.go,
    }
}

/// The events that record `throttles` on `run` at `now`, applied to it: for the
/// attempts still running (a run cancelled or an attempt timed out meanwhile has
/// nothing to hold back). A token whose time has already come by now is recorded a
/// moment after `now`: later is always safe for a limit.
pub(super) fn record(run: &mut Run, throttles: &[Throttled], now: DateTime<Utc>) -> Vec<RunEvent> {
    let mut events = Vec::new();
    for t in throttles {
        let running = matches!(
            run.step(&t.step_id),
            Some(StepState::Running { attempt, .. }) if *attempt == t.attempt
        );
        if !running || !run.status().is_some_and(RunStatus::is_active) {
            continue;
        }
        let command = RunCommand::ThrottleStep {
            step_id: t.step_id.clone(),
            attempt: t.attempt,
            limit: t.limit.clone(),
            until: t.until.max(now + TimeDelta::milliseconds(1)),
            at: now,
        };
        match run.decide(command) {
            Ok(decided) => {
                for event in decided {
                    cqrs_es::Aggregate::apply(run, event.clone());
                    events.push(event);
                }
            }
            Err(e) => tracing::warn!(step = %t.step_id, error = %e, "cannot record a throttle"),
        }
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ids::{RunId, WorkflowName};
    use serde_json::json;

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::UNIX_EPOCH + TimeDelta::milliseconds(ms)
    }

    fn running() -> Run {
        let mut run = Run::default();
        let step = StepId::try_from("call").unwrap();
        for command in [
            RunCommand::Start {
                run_id: RunId::from_uuid(uuid::Uuid::from_u128(7)),
                workflow: WorkflowName::try_from("w").unwrap(),
                workflow_version: "1.0.0".into(),
                inputs: json!({}),
                budget_usd: None,
                timeout_at: None,
                parent: None,
                origin: None,
                flow: Default::default(),
                at: at(0),
            },
            RunCommand::ScheduleStep {
                step_id: step.clone(),
                due_at: at(0),
                at: at(0),
            },
            RunCommand::StartStep {
                step_id: step,
                attempt: 1,
                idempotency_key: "k".into(),
                timeout_at: None,
                call: None,
                at: at(0),
            },
        ] {
            for event in run.decide(command).unwrap() {
                cqrs_es::Aggregate::apply(&mut run, event);
            }
        }
        run
    }

    fn throttled(attempt: u32, until: i64) -> Throttled {
        Throttled {
            step_id: StepId::try_from("call").unwrap(),
            attempt,
            limit: "rate:api".into(),
            until: at(until),
        }
    }

    #[test]
    fn a_running_attempt_is_held_back_until_its_token() {
        let mut run = running();
        let events = record(&mut run, &[throttled(1, 5_000)], at(10));
        assert!(matches!(
            events.as_slice(),
            [RunEvent::StepThrottled { attempt: 1, until, .. }] if *until == at(5_000)
        ));
        assert!(run.waiting_reason().is_some_and(|r| r.contains("rate:api")));
    }

    #[test]
    fn a_token_already_due_is_recorded_a_moment_later() {
        let mut run = running();
        let events = record(&mut run, &[throttled(1, 5)], at(10));
        assert!(matches!(
            events.as_slice(),
            [RunEvent::StepThrottled { until, .. }] if *until == at(11)
        ));
    }

    #[test]
    fn a_stale_report_records_nothing() {
        let mut run = running();
        assert!(record(&mut run, &[throttled(2, 5_000)], at(10)).is_empty());
    }
}
