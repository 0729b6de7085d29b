use super::*;
use crate::clock::ManualMonotonic;

fn breakers(failures: u32) -> (Breakers, Arc<ManualMonotonic>) {
    let clock = Arc::new(ManualMonotonic::new());
    let config = BreakerConfig {
        failures,
        open_for: Duration::from_secs(30),
    };
    (Breakers::new(config, clock.clone()), clock)
}

fn fail(b: &Breakers, key: &str) {
    b.acquire(key).expect("closed").record(Outcome::Failure);
}

#[test]
fn opens_after_consecutive_failures_and_fails_fast() {
    let (b, clock) = breakers(3);
    fail(&b, "k");
    fail(&b, "k");
    assert_eq!(
        b.state("k"),
        BreakerState::Closed {
            consecutive_failures: 2
        }
    );
    fail(&b, "k");
    assert!(matches!(b.state("k"), BreakerState::Open { .. }));
    let err = b.acquire("k").err().expect("open");
    let text = err.to_string();
    assert!(text.contains("circuit breaker `k` is open"), "{text}");
    assert!(text.contains("3 consecutive failures"), "{text}");
    assert!(text.contains("until "), "{text}");
    // Still open just before the time is up.
    clock.advance(Duration::from_secs(29));
    assert!(b.acquire("k").is_err());
    // Other keys are unaffected.
    b.acquire("other")
        .expect("other key")
        .record(Outcome::Success);
}

#[test]
fn a_success_resets_the_count() {
    let (b, _clock) = breakers(3);
    fail(&b, "k");
    fail(&b, "k");
    b.acquire("k").expect("closed").record(Outcome::Success);
    fail(&b, "k");
    fail(&b, "k");
    assert_eq!(
        b.state("k"),
        BreakerState::Closed {
            consecutive_failures: 2
        }
    );
}

#[test]
fn half_open_lets_one_trial_through_and_its_success_closes() {
    let (b, clock) = breakers(2);
    fail(&b, "k");
    fail(&b, "k");
    clock.advance(Duration::from_secs(30));
    assert_eq!(
        b.state("k"),
        BreakerState::HalfOpen {
            trial_in_flight: false
        }
    );
    let trial = b.acquire("k").expect("trial allowed");
    // A second caller while the trial runs fails fast.
    let err = b.acquire("k").err().expect("trial running");
    assert!(matches!(err, BreakerOpen::TrialRunning { .. }), "{err}");
    trial.record(Outcome::Success);
    assert_eq!(
        b.state("k"),
        BreakerState::Closed {
            consecutive_failures: 0
        }
    );
    b.acquire("k")
        .expect("closed again")
        .record(Outcome::Success);
}

#[test]
fn a_failed_trial_opens_again_for_the_full_period() {
    let (b, clock) = breakers(2);
    fail(&b, "k");
    fail(&b, "k");
    clock.advance(Duration::from_secs(31));
    b.acquire("k").expect("trial").record(Outcome::Failure);
    assert!(matches!(b.state("k"), BreakerState::Open { .. }));
    clock.advance(Duration::from_secs(29));
    assert!(b.acquire("k").is_err(), "reopened for a full open_for");
    clock.advance(Duration::from_secs(1));
    assert!(b.acquire("k").is_ok(), "half-open again");
}

#[test]
fn a_cancelled_trial_frees_the_slot() {
    let (b, clock) = breakers(1);
    fail(&b, "k");
    clock.advance(Duration::from_secs(30));
    drop(b.acquire("k").expect("trial"));
    assert_eq!(
        b.state("k"),
        BreakerState::HalfOpen {
            trial_in_flight: false
        }
    );
    assert!(b.acquire("k").is_ok(), "another trial may go");
}

#[test]
fn a_trial_that_ends_after_the_breaker_closed_counts_as_an_ordinary_call() {
    let (b, clock) = breakers(2);
    // A slow call, let through while the breaker was still closed.
    let slow = b.acquire("k").expect("closed");
    fail(&b, "k");
    fail(&b, "k");
    clock.advance(Duration::from_secs(30));
    let trial = b.acquire("k").expect("trial");
    // The slow call succeeds: the dependency answers, the breaker closes.
    slow.record(Outcome::Success);
    assert_eq!(
        b.state("k"),
        BreakerState::Closed {
            consecutive_failures: 0
        }
    );
    // The trial's failure is one failure of a closed breaker, not a failed trial.
    trial.record(Outcome::Failure);
    assert_eq!(
        b.state("k"),
        BreakerState::Closed {
            consecutive_failures: 1
        }
    );
}

#[test]
fn a_stale_trial_does_not_free_the_slot_of_the_current_one() {
    let (b, clock) = breakers(1);
    let slow = b.acquire("k").expect("closed");
    fail(&b, "k");
    clock.advance(Duration::from_secs(30));
    let stale = b.acquire("k").expect("trial");
    slow.record(Outcome::Success);
    fail(&b, "k");
    clock.advance(Duration::from_secs(30));
    let _current = b.acquire("k").expect("a new trial");
    // The stale trial is cancelled: the current trial still holds the slot.
    drop(stale);
    let err = b.acquire("k").err().expect("trial running");
    assert!(matches!(err, BreakerOpen::TrialRunning { .. }), "{err}");
}

#[test]
fn zero_failures_turns_breakers_off() {
    let (b, _clock) = breakers(0);
    for _ in 0..10 {
        fail(&b, "k");
    }
    assert!(b.acquire("k").is_ok());
}

#[test]
fn what_counts_as_a_failure() {
    assert_eq!(Outcome::of_class(ErrorClass::Validation), Outcome::Success);
    assert_eq!(Outcome::of_class(ErrorClass::Budget), Outcome::Neutral);
    for class in [
        ErrorClass::Network,
        ErrorClass::RateLimit,
        ErrorClass::Authentication,
        ErrorClass::Dependency,
        ErrorClass::Timeout,
        ErrorClass::Unknown,
    ] {
        assert_eq!(Outcome::of_class(class), Outcome::Failure, "{class}");
    }
}
