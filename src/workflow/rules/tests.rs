use super::*;
use serde_json::json;

fn ids_and_earlier(json: &Value) -> Vec<(String, Vec<String>, bool)> {
    steps(json)
        .into_iter()
        .map(|s| {
            (
                s.id.unwrap_or("?").to_string(),
                s.earlier.into_iter().collect(),
                s.has_prev,
            )
        })
        .collect()
}

#[test]
fn each_step_sees_what_ran_before_it() {
    let wf = json!({"steps": [
        {"id": "a"},
        {"id": "fork", "type": "parallel", "branches": [
            {"name": "x", "steps": [{"id": "x1"}, {"id": "x2"}]},
            {"name": "y", "steps": [{"id": "y1"}]}
        ]},
        {"id": "choose", "type": "conditional", "if_true": [{"id": "t1"}], "if_false": [{"id": "f1"}]},
        {"id": "last", "compensate": {"id": "undo_last"}}
    ], "on_failure": [{"id": "hook"}]});
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert_eq!(
        ids_and_earlier(&wf),
        vec![
            ("a".into(), s(&[]), false),
            ("fork".into(), s(&["a"]), true),
            ("x1".into(), s(&["a"]), true),
            ("x2".into(), s(&["a", "x1"]), true),
            ("y1".into(), s(&["a"]), true),
            ("choose".into(), s(&["a", "fork", "x1", "x2", "y1"]), true),
            ("t1".into(), s(&["a", "fork", "x1", "x2", "y1"]), true),
            ("f1".into(), s(&["a", "fork", "x1", "x2", "y1"]), true),
            (
                "last".into(),
                s(&["a", "choose", "f1", "fork", "t1", "x1", "x2", "y1"]),
                true
            ),
            (
                "hook".into(),
                s(&["a", "choose", "f1", "fork", "last", "t1", "x1", "x2", "y1"]),
                true
            ),
            (
                "undo_last".into(),
                s(&["a", "choose", "f1", "fork", "last", "t1", "x1", "x2", "y1"]),
                true
            ),
        ]
    );
}
