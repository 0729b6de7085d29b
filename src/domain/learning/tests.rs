use std::collections::BTreeMap;

use chrono::{Duration, TimeZone, Utc};
use serde_json::json;

use super::*;

fn t(seconds: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 25, 9, 0, 0).unwrap() + Duration::seconds(seconds)
}

fn call(tool: &str, args: Value, output: Option<Value>, ok: bool, at: i64) -> Call {
    Call::new(tool, args, output, ok, 100, t(at))
}

/// Feed `calls` of one session through a tail into patterns keyed by signature.
fn mine(patterns: &mut BTreeMap<String, Pattern>, session: &str, calls: Vec<Call>) {
    let config = MiningConfig::default();
    let mut tail = Tail::default();
    for c in calls {
        for occurrence in tail.push(c, &config) {
            let key = signature(&occurrence.tools());
            match patterns.get_mut(&key) {
                Some(p) => {
                    p.add(&occurrence, session);
                }
                None => {
                    patterns.insert(key, Pattern::first(&occurrence, session));
                }
            }
        }
    }
}

fn ticket_session(n: i64, base: i64) -> Vec<Call> {
    let id = format!("T-{}", 100 + n);
    vec![
        call(
            "search",
            json!({"query": format!("bug {n}"), "limit": 5}),
            Some(json!({"hits": [{"id": id.clone()}]})),
            true,
            base,
        ),
        call(
            "read",
            json!({"id": id.clone()}),
            Some(json!({"text": "..."})),
            true,
            base + 10,
        ),
        call(
            "label",
            json!({"id": id, "label": "triaged"}),
            None,
            true,
            base + 20,
        ),
    ]
}

#[test]
fn three_calls_in_the_window_make_one_sequence_and_a_fourth_makes_longer_ones() {
    let config = MiningConfig::default();
    let mut tail = Tail::default();
    assert!(
        tail.push(call("a", json!({}), None, true, 0), &config)
            .is_empty()
    );
    assert!(
        tail.push(call("b", json!({}), None, true, 1), &config)
            .is_empty()
    );
    let third = tail.push(call("c", json!({}), None, true, 2), &config);
    assert_eq!(third.len(), 1);
    assert_eq!(third[0].tools(), ["a", "b", "c"]);
    let fourth = tail.push(call("d", json!({}), None, true, 3), &config);
    let tools: Vec<Vec<String>> = fourth.iter().map(Occurrence::tools).collect();
    assert_eq!(tools, [vec!["b", "c", "d"], vec!["a", "b", "c", "d"]]);
}

#[test]
fn calls_spread_past_the_window_make_no_sequence() {
    let config = MiningConfig::default();
    let mut tail = Tail::default();
    tail.push(call("a", json!({}), None, true, 0), &config);
    tail.push(call("b", json!({}), None, true, 200), &config);
    let third = tail.push(call("c", json!({}), None, true, 301), &config);
    assert!(third.is_empty(), "a..c spans 301 s: {third:?}");
    assert_eq!(tail.calls.len(), 2, "a fell out of the window");
    let inside = tail.push(call("d", json!({}), None, true, 310), &config);
    assert_eq!(inside[0].tools(), ["b", "c", "d"]);
}

#[test]
fn a_tail_keeps_no_more_calls_than_the_longest_sequence() {
    let config = MiningConfig::default();
    let mut tail = Tail::default();
    for i in 0..30 {
        tail.push(call(&format!("t{i}"), json!({}), None, true, i), &config);
    }
    assert_eq!(tail.calls.len(), config.max_length);
}

#[test]
fn repeated_sessions_give_the_sequence_its_successes_constants_inputs_and_flows() {
    let mut patterns = BTreeMap::new();
    for n in 0..4 {
        mine(
            &mut patterns,
            &format!("task:{n}"),
            ticket_session(n, n * 1000),
        );
    }
    let p = &patterns["search > read > label"];
    assert_eq!((p.executions, p.successes, p.sessions), (4, 4, 4));
    assert_eq!(p.confidence(), 1.0);
    assert_eq!(p.evidence, ["task:0", "task:1", "task:2", "task:3"]);
    assert!(!p.args[0]["query"].constant, "the query varies");
    assert!(p.args[0]["limit"].constant, "the limit stays 5");
    assert!(p.args[2]["label"].constant);
    let read_id = p.steady_flow(1, "id").expect("read's id comes from search");
    assert_eq!((read_id.from, read_id.path.as_str()), (0, "hits.0.id"));
    let label_id = p.steady_flow(2, "id").expect("label's id too");
    assert_eq!(label_id.from, 0, "from the nearest output that holds it");
    assert_eq!(p.mean_span_ms(), 20_100);
}

#[test]
fn a_failed_call_counts_an_execution_but_no_success() {
    let mut patterns = BTreeMap::new();
    for n in 0..3 {
        mine(
            &mut patterns,
            &format!("ok:{n}"),
            ticket_session(n, n * 1000),
        );
    }
    let mut failing = ticket_session(9, 9000);
    failing[2].success = false;
    failing[0].args.remove("limit");
    mine(&mut patterns, "bad", failing);
    let p = &patterns["search > read > label"];
    assert_eq!((p.executions, p.successes), (4, 3));
    assert_eq!(p.confidence(), 0.75);
    assert!(!p.evidence.contains(&"bad".to_string()));
    assert!(
        p.args[0]["limit"].always && p.args[0]["limit"].constant,
        "a failed run's missing arguments teach nothing"
    );
}

#[test]
fn an_argument_missing_from_one_success_is_not_always_there() {
    let mut patterns = BTreeMap::new();
    mine(&mut patterns, "s1", ticket_session(1, 0));
    let mut without = ticket_session(2, 1000);
    without[0].args.remove("limit");
    mine(&mut patterns, "s2", without);
    mine(&mut patterns, "s3", ticket_session(3, 2000));
    let p = &patterns["search > read > label"];
    assert!(!p.args[0]["limit"].always);
    assert!(p.args[0]["query"].always);
}

#[test]
fn details_settle_while_counters_go_on() {
    // Sessions that repeat the same values: after the first success only the
    // counters change, so the projection writes the details once.
    let config = MiningConfig::default();
    let mut pattern: Option<Pattern> = None;
    let mut changed = Vec::new();
    for n in 0..30 {
        let mut tail = Tail::default();
        let mut session = ticket_session(n % 3, n * 1000);
        // Examples fill with three distinct values, then nothing new is seen.
        session[0]
            .args
            .insert("query".into(), json!(format!("q{}", n % 3)));
        for c in session {
            for o in tail.push(c, &config) {
                match &mut pattern {
                    Some(p) => changed.push(p.add(&o, &format!("task:{n}"))),
                    None => pattern = Some(Pattern::first(&o, &format!("task:{n}"))),
                }
            }
        }
    }
    let p = pattern.expect("a pattern");
    assert_eq!((p.executions, p.successes, p.sessions), (30, 30, 30));
    assert_eq!(p.evidence.len(), super::pattern::MAX_EVIDENCE);
    assert_eq!(p.evidence[0], "task:0", "the first sessions are kept");
    assert!(
        changed[..19].iter().all(|c| *c),
        "evidence filling is a change"
    );
    assert!(
        changed[19..].iter().all(|c| !*c),
        "after that nothing but counters changed: {changed:?}"
    );
    let sessions = p.evidence_sessions();
    assert_eq!(
        sessions.last().map(String::as_str),
        Some("task:29"),
        "and the latest"
    );
    assert_eq!(sessions.len(), super::pattern::MAX_EVIDENCE + 1);
}

#[test]
fn a_flow_seen_only_sometimes_is_not_steady() {
    let mut patterns = BTreeMap::new();
    mine(&mut patterns, "s1", ticket_session(1, 0));
    let mut other = ticket_session(2, 1000);
    other[1].args.insert("id".into(), json!("typed-by-hand"));
    mine(&mut patterns, "s2", other);
    let p = &patterns["search > read > label"];
    assert!(p.steady_flow(1, "id").is_none());
    assert!(p.steady_flow(2, "id").is_some());
}

#[test]
fn flows_ignore_values_that_match_by_chance() {
    let calls = vec![
        call(
            "a",
            json!({}),
            Some(json!({"ok": true, "n": 1, "s": "x"})),
            true,
            0,
        ),
        call("b", json!({"flag": true, "n": 1, "s": "x"}), None, true, 1),
    ];
    assert!(flows_between(&calls).is_empty());
}

#[test]
fn closed_patterns_leave_out_parts_of_longer_ones_and_weak_ones() {
    let mut patterns = BTreeMap::new();
    for n in 0..3 {
        let mut calls = ticket_session(n, n * 1000);
        calls.push(call("close", json!({}), None, true, n * 1000 + 30));
        mine(&mut patterns, &format!("s{n}"), calls);
    }
    // A weaker sequence, seen once.
    mine(
        &mut patterns,
        "once",
        vec![
            call("x", json!({}), None, true, 5000),
            call("y", json!({}), None, true, 5001),
            call("z", json!({}), None, true, 5002),
        ],
    );
    let all: Vec<Pattern> = patterns.values().cloned().collect();
    let chosen = closed(&all, 3, 0.8);
    let names: Vec<String> = chosen.iter().map(|p| signature(&p.tools)).collect();
    assert_eq!(names, ["search > read > label > close"]);
    assert!(closed(&all, 4, 0.8).is_empty(), "support below the minimum");
}

#[test]
fn a_context_matches_a_workflow_its_calls_begin_or_its_prompt_names() {
    let tools: Vec<String> = ["search", "read", "label"].map(String::from).to_vec();
    let begun = match_context(
        &tools,
        &Context {
            tools: vec!["login".into(), "search".into(), "read".into()],
            ..Context::default()
        },
    )
    .expect("search, read begin it");
    assert!((begun.score - 2.0 / 3.0).abs() < 1e-9);
    assert_eq!(
        begun.why,
        "your last 2 calls (search, read) begin this sequence; it goes on with label"
    );
    assert!(
        match_context(
            &tools,
            &Context {
                tools: vec!["read".into()],
                ..Context::default()
            }
        )
        .is_none(),
        "read does not begin it"
    );
    let named = match_context(
        &tools,
        &Context {
            prompt: Some("Search the tracker, then label what you find".into()),
            ..Context::default()
        },
    )
    .expect("the prompt names two tools");
    assert!((named.score - 2.0 / 3.0).abs() < 1e-9);
    assert!(named.why.contains("search, label"), "{}", named.why);
    assert!(match_context(&tools, &Context::default()).is_none());
}

#[test]
fn a_call_keeps_object_arguments_and_small_outputs_only() {
    let c = Call::new(
        "t",
        json!("plain"),
        Some(json!("x".repeat(5000))),
        true,
        1,
        t(0),
    );
    assert_eq!(
        c.args,
        Map::from_iter([("value".to_string(), json!("plain"))])
    );
    assert_eq!(c.output, None);
    let small = Call::new(
        "t",
        json!({"b": 1, "a": 2}),
        Some(json!({"ok": 1})),
        true,
        1,
        t(0),
    );
    assert_eq!(small.shape(), ["a", "b"]);
    assert!(small.output.is_some());
}

#[test]
fn a_definitions_tools_are_read_in_the_order_written_branches_included() {
    let definition = json!({"steps": [
        {"id": "a", "tool": "search"},
        {"id": "p", "type": "parallel", "branches": [
            {"name": "x", "steps": [{"id": "b", "type": "shell", "command": ["true"]}]},
            {"name": "y", "steps": [{"id": "c", "type": "workflow", "workflow": "child"}]}
        ]},
        {"id": "g", "type": "gate", "prompt": "ok?"},
        {"id": "d", "type": "http", "url": "http://x"},
        {"id": "c", "type": "conditional", "condition": "true",
         "if_true": [{"id": "e", "type": "database", "connection": "main", "query": "SELECT 1"}],
         "if_false": [{"id": "f", "tool": "notify_ops"}]}
    ]});
    assert_eq!(
        tools_of(&definition),
        [
            "search",
            "shell",
            "workflow:child",
            "http",
            "database",
            "notify_ops"
        ]
    );
}

#[test]
fn a_steps_call_is_seen_item_by_item() {
    let at = chrono::Utc::now();
    let call = Call::from_step(
        "shell",
        json!({"command": ["wc", "-l", "a.txt"], "working_dir": "/tmp"}),
        None,
        true,
        3,
        at,
    );
    assert_eq!(
        call.shape(),
        ["command[0]", "command[1]", "command[2]", "working_dir"]
    );
    assert_eq!(call.args["command[2]"], "a.txt");
    assert_eq!(
        crate::domain::learning::list_item("command[2]"),
        Some(("command", 2))
    );
    assert_eq!(crate::domain::learning::list_item("command"), None);
}

/// The flows of every sequence a push returns, found once for the whole tail, are
/// those found in each sequence alone: the nearest earlier call inside the sequence,
/// and none where the nearest one overall lies before it.
#[test]
fn flows_found_once_per_tail_are_each_sequences_own() {
    let config = MiningConfig::default();
    let mut tail = Tail::default();
    // Each call's output holds an id that a later call takes (some skip a call), and
    // one id is given by two calls (the nearer one wins).
    let ids = [
        "AAA-1", "BBB-2", "AAA-1", "CCC-3", "DDD-4", "BBB-2", "EEE-5", "CCC-3",
    ];
    let mut checked = 0;
    for (i, id) in ids.iter().enumerate() {
        let takes = if i >= 2 { ids[i - 2] } else { "none" };
        let c = call(
            &format!("t{i}"),
            json!({"id": takes, "n": i, "whole": {"x": id}}),
            Some(json!({"made": {"id": id}, "list": [id]})),
            true,
            i64::try_from(i).unwrap_or(0),
        );
        for occurrence in tail.push(c, &config) {
            let alone = flows_between(&occurrence.calls);
            assert_eq!(occurrence.flows(), alone, "{:?}", occurrence.tools());
            checked += usize::from(!alone.is_empty());
        }
    }
    assert!(checked > 10, "sequences with flows checked: {checked}");
    let lone = Occurrence::new(tail.calls.clone());
    assert_eq!(lone.flows(), flows_between(&tail.calls));
}
