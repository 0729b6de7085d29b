use super::*;
use crate::runners::shell::Captured;

#[test]
fn statuses_are_classified() {
    assert_eq!(classify_status(200, &[]), None);
    assert_eq!(classify_status(204, &[]), None);
    assert_eq!(classify_status(299, &[]), None);
    assert_eq!(classify_status(429, &[]), Some(ErrorClass::RateLimit));
    assert_eq!(classify_status(401, &[]), Some(ErrorClass::Authentication));
    assert_eq!(classify_status(403, &[]), Some(ErrorClass::Authentication));
    assert_eq!(classify_status(500, &[]), Some(ErrorClass::Dependency));
    assert_eq!(classify_status(503, &[]), Some(ErrorClass::Dependency));
    assert_eq!(classify_status(404, &[]), Some(ErrorClass::Validation));
    assert_eq!(classify_status(302, &[]), Some(ErrorClass::Validation));
    // expect_status replaces "any 2xx".
    assert_eq!(classify_status(404, &[404]), None);
    assert_eq!(classify_status(200, &[201]), Some(ErrorClass::Validation));
    assert_eq!(classify_status(503, &[201]), Some(ErrorClass::Dependency));
}

#[test]
fn messages_name_the_request_without_credentials_or_query() {
    let req = Request {
        method: Method::POST,
        target: Arc::new(Target::parse("http://u:p@127.0.0.1:8080/a?b#c").expect("a target")),
        headers: HeaderMap::new(),
        body: None,
        cap: 10,
        expect: Vec::new(),
    };
    assert_eq!(Shown::of(&req).to_string(), "POST http://127.0.0.1:8080/a");
    assert_eq!(req.breaker_key(), "http:127.0.0.1:8080");
}

#[test]
fn bad_headers_are_validation_failures() {
    let client = HttpClient::from_env(Duration::from_secs(1)).expect("a client");
    let step = HttpStep {
        method: HttpMethod::Get,
        url: "http://x".into(),
        headers: [("bad name".to_string(), "v".to_string())].into(),
        body: None,
        expect_status: vec![],
        max_response_bytes: None,
    };
    assert_eq!(
        prepare(&client, &step, 1).unwrap_err().class,
        ErrorClass::Validation
    );
    let step = HttpStep {
        headers: [("x-ok".to_string(), "line\nbreak".to_string())].into(),
        ..step
    };
    assert_eq!(
        prepare(&client, &step, 1).unwrap_err().class,
        ErrorClass::Validation
    );
}

#[test]
fn webhook_body_suits_slack_and_discord() {
    let step = NotifyStep {
        message: "deployed".into(),
        url: None,
        chat: None,
        mentions: vec!["alice".into(), "@bob".into()],
    };
    let body = webhook_body(&step);
    assert_eq!(body["text"], "@alice @bob deployed");
    assert_eq!(body["content"], body["text"]);
    assert_eq!(
        notify_record(&step, None),
        json!({"message": "deployed", "mentions": ["alice", "@bob"], "delivered": false})
    );
    assert_eq!(notify_record(&step, Some((204, true)))["delivered"], true);
}

#[test]
fn truncated_bodies_stay_text() {
    let answer = Answer {
        status: 200,
        reason: "OK",
        headers: Map::new(),
        body: Captured {
            kept: b"{\"a\":".to_vec(),
            truncated: true,
        },
    };
    let out = answer.into_output();
    assert_eq!(out["body"], "{\"a\":");
    assert_eq!(out["truncated"], true);
}
