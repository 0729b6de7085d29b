use super::*;
use serde_json::json;

fn v1_to_v2(mut v: Value) -> Result<Value, String> {
    let name = v["name"].take();
    Ok(json!({ "full_name": name }))
}

fn v2_to_v3(v: Value) -> Result<Value, String> {
    match v.get("full_name") {
        Some(Value::String(s)) => Ok(json!({ "full_name": s, "nickname": null })),
        _ => Err("full_name is missing".into()),
    }
}

fn chain() -> Upcasters {
    Upcasters::new(vec![
        Upcaster {
            event_type: "person.named",
            from_version: 1,
            upcast: v1_to_v2,
        },
        Upcaster {
            event_type: "person.named",
            from_version: 2,
            upcast: v2_to_v3,
        },
    ])
}

#[test]
fn applies_the_whole_chain() {
    let (version, payload) = chain()
        .upcast("person.named", 1, json!({"name": "Ada"}))
        .unwrap();
    assert_eq!(version, 3);
    assert_eq!(payload, json!({"full_name": "Ada", "nickname": null}));
}

#[test]
fn leaves_current_and_unknown_events_alone() {
    let p = json!({"x": 1});
    assert_eq!(
        chain().upcast("person.named", 3, p.clone()).unwrap(),
        (3, p.clone())
    );
    assert_eq!(chain().upcast("other", 1, p.clone()).unwrap(), (1, p));
}

#[test]
fn a_failing_step_names_the_event_and_version() {
    let err = chain()
        .upcast("person.named", 2, json!({"oops": true}))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "cannot upcast person.named from schema version 2: full_name is missing"
    );
}
