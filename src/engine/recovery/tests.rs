use super::*;

fn policy(backoff: Backoff, base: f64, cap: Option<f64>, jitter: Option<f64>) -> RetryPolicy {
    RetryPolicy {
        max_attempts: 10,
        backoff,
        base_seconds: Some(base),
        max_seconds: cap,
        jitter,
    }
}

#[test]
fn backoff_grows_by_kind_and_stops_at_the_cap() {
    let exp = policy(Backoff::Exponential, 2.0, Some(20.0), None);
    let lin = policy(Backoff::Linear, 2.0, Some(20.0), None);
    let con = policy(Backoff::Constant, 2.0, Some(20.0), None);
    let delays = |p: &RetryPolicy| (1..=6).map(|n| backoff_ms(p, n, 0.5)).collect::<Vec<_>>();
    assert_eq!(
        delays(&exp),
        vec![2_000, 4_000, 8_000, 16_000, 20_000, 20_000]
    );
    assert_eq!(
        delays(&lin),
        vec![2_000, 4_000, 6_000, 8_000, 10_000, 12_000]
    );
    assert_eq!(delays(&con), vec![2_000; 6]);
    // Huge attempt numbers do not overflow.
    assert_eq!(backoff_ms(&exp, u32::MAX, 0.5), 20_000);
}

#[test]
fn jitter_moves_the_delay_within_its_fraction_and_under_the_cap() {
    let p = policy(Backoff::Constant, 10.0, Some(100.0), Some(0.2));
    assert_eq!(backoff_ms(&p, 1, 0.0), 8_000);
    assert_eq!(backoff_ms(&p, 1, 0.5), 10_000);
    assert_eq!(backoff_ms(&p, 1, 0.999_999), 12_000);
    let capped = policy(Backoff::Constant, 10.0, Some(10.0), Some(0.2));
    assert_eq!(backoff_ms(&capped, 1, 0.999), 10_000, "never past the cap");
}

#[test]
fn defaults_are_one_second_and_five_minutes() {
    let p = RetryPolicy {
        max_attempts: 30,
        backoff: Backoff::Exponential,
        base_seconds: None,
        max_seconds: None,
        jitter: None,
    };
    assert_eq!(backoff_ms(&p, 1, 0.3), 1_000);
    assert_eq!(backoff_ms(&p, 20, 0.3), 300_000);
}
