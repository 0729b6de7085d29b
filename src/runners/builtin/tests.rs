use std::path::Path;

use super::*;
use crate::domain::ids::RunId;

fn attempt(timeout: Option<Duration>) -> Attempt<'static> {
    Attempt {
        run_id: RunId::new(),
        step_id: "s",
        attempt: 1,
        idempotency_key: "k",
        timeout,
        base_dir: Path::new("/"),
        mask: &crate::vault::mask::NO_SECRETS,
    }
}

fn inputs(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

async fn call(tool: &str, v: Value) -> Result<StepSuccess, StepFailure> {
    run(&RunnersConfig::default(), &attempt(None), tool, &inputs(v)).await
}

#[tokio::test]
async fn every_listed_builtin_is_implemented() {
    for tool in BUILTIN_TOOLS {
        let result = call(tool, json!({})).await;
        if let Err(f) = &result {
            assert!(
                !f.message.contains("unknown built-in tool"),
                "{tool}: {}",
                f.message
            );
        }
    }
}

#[tokio::test]
async fn noop_and_echo() {
    let out = call("noop", json!({"a": 1, "b": [true]}))
        .await
        .expect("noop");
    assert_eq!(out.output, json!({"a": 1, "b": [true]}));
    let out = call("echo", json!({"message": "hi"})).await.expect("echo");
    assert_eq!(out.output, json!({"message": "hi"}));
    let err = call("echo", json!({})).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::Validation);
    assert!(err.message.contains("`message`"), "{}", err.message);
    let err = call("echo", json!({"message": "x", "mesage": "y"}))
        .await
        .unwrap_err();
    assert!(err.message.contains("`mesage`"), "{}", err.message);
}

#[tokio::test]
async fn sleep_checks_its_input_and_honours_the_timeout() {
    let out = call("sleep", json!({"seconds": 0.02}))
        .await
        .expect("sleep");
    assert_eq!(out.output, json!({"slept_ms": 20}));
    for bad in [
        json!({}),
        json!({"seconds": "1"}),
        json!({"seconds": -1}),
        json!({"seconds": 301}),
    ] {
        let err = call("sleep", bad.clone()).await.unwrap_err();
        assert_eq!(err.class, ErrorClass::Validation, "{bad}");
        assert!(err.message.contains("`seconds`"), "{}", err.message);
    }
    let err = run(
        &RunnersConfig::default(),
        &attempt(Some(Duration::from_millis(20))),
        "sleep",
        &inputs(json!({"seconds": 300})),
    )
    .await
    .unwrap_err();
    assert_eq!(err.class, ErrorClass::Timeout);
}

#[tokio::test]
async fn fail_fails_with_the_class_asked_for() {
    let err = call("fail", json!({})).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::Unknown);
    let err = call(
        "fail",
        json!({"class": "rate_limit", "message": "slow down"}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.class, ErrorClass::RateLimit);
    assert_eq!(err.message, "slow down");
    let err = call("fail", json!({"class": "nope"})).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::Validation);
    assert!(err.message.contains("`class`"), "{}", err.message);
}

#[tokio::test]
async fn unknown_tools_are_refused() {
    let err = call("rm", json!({})).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::Validation);
    assert!(
        err.message.contains("echo, fail, noop, sleep"),
        "{}",
        err.message
    );
}
