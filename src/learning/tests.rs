use std::path::Path;

use chrono::{Duration, TimeZone, Utc};
use serde_json::{Value, json};

use crate::domain::learning::{Call, MiningConfig, Pattern, Tail};

use super::generate::{definition, to_yaml, workflow_name};

/// The pattern of `sessions` runs of echo (a message that varies) → noop (given the
/// echoed message) → an agent's `label` tool (a constant label).
fn pattern(sessions: usize) -> Pattern {
    let config = MiningConfig::default();
    let mut found: Option<Pattern> = None;
    for n in 0..sessions {
        let base =
            Utc.with_ymd_and_hms(2026, 11, 25, 9, 0, 0).unwrap() + Duration::minutes(10 * n as i64);
        let message = format!("ticket-{n}");
        let calls = [
            Call::new(
                "echo",
                json!({"message": message}),
                Some(json!({"message": message})),
                true,
                5,
                base,
            ),
            Call::new(
                "noop",
                json!({"ticket": message}),
                Some(json!({"ticket": message})),
                true,
                5,
                base + Duration::seconds(1),
            ),
            Call::new(
                "label",
                json!({"ticket": message, "label": "triaged"}),
                None,
                true,
                5,
                base + Duration::seconds(2),
            ),
        ];
        let mut tail = Tail::default();
        for c in calls {
            for o in tail.push(c, &config) {
                match &mut found {
                    Some(p) => {
                        p.add(&o, &format!("task:{n}"));
                    }
                    None => found = Some(Pattern::first(&o, &format!("task:{n}"))),
                }
            }
        }
    }
    found.expect("a pattern")
}

#[test]
fn a_learned_file_passes_awl_validate_with_inputs_constants_and_flows() {
    let p = pattern(3);
    let name = workflow_name("team:alpha", &p.tools);
    assert!(name.starts_with("learned-echo-noop-label-"), "{name}");
    let def = Value::Object(definition(&name, "1.0.0", "team:alpha", &p));
    let file = to_yaml(&def, &["a header".to_string()]);
    let checked = crate::workflow::validate::check(Path::new("learned.awl.yaml"), &file)
        .unwrap_or_else(|d| panic!("{d}\n---\n{file}"));
    assert_eq!(checked.json["inputs"], def["inputs"], "the YAML reads back");
    assert_eq!(
        checked.json["steps"][2], def["steps"][2],
        "the YAML reads back"
    );
    assert_eq!(
        checked.json["steps"][0]["type"], "tool",
        "as validation completes it"
    );
    let steps = def["steps"].as_array().unwrap();
    assert_eq!(steps[0]["tool"], "echo");
    assert_eq!(
        steps[0]["inputs"]["message"],
        "${{ inputs.s1_echo_message }}"
    );
    assert_eq!(def["inputs"]["s1_echo_message"]["type"], "string");
    assert_eq!(
        steps[1]["inputs"]["ticket"], "${{ steps.s1_echo.outputs.message }}",
        "the echoed message flows into noop"
    );
    assert_eq!(steps[2]["type"], "agent", "label is no tool of awl's");
    assert_eq!(steps[2]["capabilities"], json!(["tool:label"]));
    let prompt = steps[2]["prompt"].as_str().unwrap();
    assert!(prompt.contains("- label: triaged"), "{prompt}");
    assert!(
        prompt.contains("- ticket: ${{ steps.s2_noop.outputs.ticket }}"),
        "{prompt}"
    );
}

#[test]
fn names_are_readable_and_differ_by_scope() {
    let tools: Vec<String> = ["Search Code", "read_file", "x"].map(String::from).to_vec();
    let a = workflow_name("team:a", &tools);
    let b = workflow_name("team:b", &tools);
    assert!(a.starts_with("learned-search-code-read-file-x-"), "{a}");
    assert_ne!(a, b);
    crate::domain::ids::WorkflowName::try_from(a.as_str()).expect("a valid name");
}

#[test]
fn the_file_does_not_change_as_executions_add_up() {
    // Counts grow with every execution; a file that changed with them would be
    // proposed anew (superseding the last) each time the learner looked.
    let scope = "team:alpha";
    let few = pattern(4);
    let more = pattern(9);
    assert_ne!(few.successes, more.successes);
    let name = workflow_name(scope, &few.tools);
    assert_eq!(
        definition(&name, "1.0.0", scope, &few),
        definition(&name, "1.0.0", scope, &more)
    );
}

/// The pattern of `sessions` runs whose steps fetched an item over http, counted its
/// lines with a shell command (the item's id varying) and handed it to a sub-workflow.
fn step_pattern(sessions: usize) -> Pattern {
    let config = MiningConfig::default();
    let mut found: Option<Pattern> = None;
    for n in 0..sessions {
        let base =
            Utc.with_ymd_and_hms(2026, 11, 25, 9, 0, 0).unwrap() + Duration::minutes(10 * n as i64);
        let id = format!("item-{n}");
        let calls = [
            Call::from_step(
                "http",
                json!({"method": "GET", "url": format!("http://svc.test/items/{id}")}),
                Some(json!({"status": 200, "body": {"path": format!("/data/{id}")}})),
                true,
                5,
                base,
            ),
            Call::from_step(
                "shell",
                json!({"command": ["wc", "-l", format!("/data/{id}")]}),
                Some(json!({"stdout": "3", "exit_code": 0})),
                true,
                5,
                base + Duration::seconds(1),
            ),
            Call::from_step(
                "workflow:archive",
                json!({"ids": [id.clone()], "dry_run": false}),
                None,
                true,
                5,
                base + Duration::seconds(2),
            ),
        ];
        let mut tail = Tail::default();
        for c in calls {
            for o in tail.push(c, &config) {
                match &mut found {
                    Some(p) => {
                        p.add(&o, &format!("run:{n}"));
                    }
                    None => found = Some(Pattern::first(&o, &format!("run:{n}"))),
                }
            }
        }
    }
    found.expect("a pattern")
}

#[test]
fn calls_of_workflow_steps_are_learned_back_as_those_steps() {
    let p = step_pattern(3);
    assert_eq!(p.tools, ["http", "shell", "workflow:archive"]);
    let name = workflow_name("team:alpha", &p.tools);
    let def = Value::Object(definition(&name, "1.0.0", "team:alpha", &p));
    let file = to_yaml(&def, &[]);
    crate::workflow::validate::check(Path::new("learned.awl.yaml"), &file)
        .unwrap_or_else(|d| panic!("{d}\n---\n{file}"));
    let steps = def["steps"].as_array().unwrap();
    assert_eq!(steps[0]["type"], "http");
    assert_eq!(steps[0]["method"], "GET", "a constant stays a constant");
    assert_eq!(steps[0]["url"], "${{ inputs.s1_http_url }}");
    assert_eq!(steps[1]["type"], "shell");
    assert_eq!(
        steps[1]["command"],
        json!(["wc", "-l", "${{ steps.s1_http.outputs.body.path }}"]),
        "one item of the list varied, and it came from the first call's output"
    );
    assert_eq!(steps[2]["type"], "workflow");
    assert_eq!(steps[2]["workflow"], "archive");
    assert_eq!(
        steps[2]["inputs"],
        json!({"dry_run": false, "ids": ["${{ inputs.s3_workflow_archive_ids_0 }}"]})
    );
}

#[test]
fn a_draft_and_its_checked_file_are_known_by_one_key() {
    // A restarted learner knows the proposed files by the key of each proposal's
    // checked file; a round computes the key of its draft. Were they to differ, every
    // draft would be looked up and validated again after a start.
    let scope = "team:alpha";
    // The first gives its built-in tool steps no `type`, which validation adds.
    for (p, completed) in [(pattern(3), true), (step_pattern(3), false)] {
        let name = workflow_name(scope, &p.tools);
        let draft = Value::Object(definition(&name, "1.0.0", scope, &p));
        let proposed = Value::Object(definition(&name, "3.0.0", scope, &p));
        let checked =
            crate::workflow::validate::check(Path::new("x.awl.yaml"), &to_yaml(&proposed, &[]))
                .unwrap_or_else(|d| panic!("{d}"));
        assert_eq!(
            checked.json != proposed,
            completed,
            "validation completes the file"
        );
        assert_eq!(
            super::file_key(scope, &p.tools, &draft),
            super::file_key(scope, &p.tools, &checked.json),
            "{:?}",
            p.tools
        );
        assert_ne!(
            super::file_key("team:beta", &p.tools, &draft),
            super::file_key(scope, &p.tools, &draft),
            "scopes differ"
        );
    }
}
