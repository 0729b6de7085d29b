use super::*;
use serde_json::json;

fn spec(kind: InputType, required: bool, default: Option<Value>) -> InputSpec {
    InputSpec {
        kind,
        required,
        default,
        description: None,
        secret: false,
        personal: false,
    }
}

fn declared() -> BTreeMap<String, InputSpec> {
    BTreeMap::from([
        ("repo".to_string(), spec(InputType::String, true, None)),
        (
            "count".to_string(),
            spec(InputType::Integer, false, Some(json!(3))),
        ),
        ("dry_run".to_string(), spec(InputType::Boolean, false, None)),
        ("labels".to_string(), spec(InputType::Array, false, None)),
    ])
}

fn given(pairs: &[(&str, Value)]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

#[test]
fn text_is_read_as_the_declared_type_and_defaults_fill_in() {
    let out = resolve(
        &declared(),
        given(&[
            ("repo", json!("org/app")),
            ("dry_run", json!("true")),
            ("labels", json!("[\"a\", \"b\"]")),
        ]),
        Given::Text,
    )
    .unwrap();
    assert_eq!(
        Value::Object(out),
        json!({"repo": "org/app", "count": 3, "dry_run": true, "labels": ["a", "b"]})
    );
}

#[test]
fn every_problem_is_reported() {
    let problems = resolve(
        &declared(),
        given(&[("count", json!("three")), ("colour", json!("red"))]),
        Given::Text,
    )
    .unwrap_err();
    let messages: Vec<&str> = problems.iter().map(|p| p.message.as_str()).collect();
    assert_eq!(
        messages,
        vec![
            "unknown input `colour` (declared: count, dry_run, labels, repo)",
            "input `count`: \"three\" is not a whole number",
            "input `repo` is required (give it with --var repo=VALUE)",
        ]
    );
    assert_eq!(problems[2].pointer, "/inputs/repo");
}

#[test]
fn json_values_must_have_the_declared_type() {
    let problems = resolve(
        &declared(),
        given(&[("repo", json!(42)), ("count", json!("4"))]),
        Given::Json,
    )
    .unwrap_err();
    let messages: Vec<&str> = problems.iter().map(|p| p.message.as_str()).collect();
    assert_eq!(
        messages,
        vec![
            "input `count`: expected integer, got \"4\"",
            "input `repo`: expected string, got 42"
        ]
    );
}
