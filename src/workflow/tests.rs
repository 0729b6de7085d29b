//! Whole files through `validate::check`: what a user sees for each kind of mistake.

use std::path::Path;

use serde_json::json;

use super::model::{Backoff, OnError, StepKind};
use super::validate::check;
use super::yaml::Position;

fn problems(source: &str) -> Vec<String> {
    match check(Path::new("wf.awl.yaml"), source) {
        Ok(_) => Vec::new(),
        Err(d) => d.iter().map(ToString::to_string).collect(),
    }
}

const GOOD: &str = r#"
name: deploy
version: "1.2.0"
description: Build, approve, ship.
inputs:
  repo: {type: string, required: true}
  count: {type: integer, default: 3}
timeout_seconds: 600
cost_budget_usd: 2.5
error_handlers:
  - {class: rate_limit, action: retry_with_backoff, max_attempts: 5}
tools:
  - name: greet
    type: shell
    command: [echo, hello]
steps:
  - id: build
    type: shell
    command: [cargo, build, --release]
    retry: {max_attempts: 3, backoff: linear, base_seconds: 2}
    on_error: continue
    compensate:
      id: clean
      type: shell
      script: rm -rf "$1"
      args: [target]
  - id: hello
    tool: greet
  - id: approve
    type: gate
    message: Ship it?
    approvers: [ops]
    timeout_seconds: 3600
    on_reject: fail
  - id: fan
    type: parallel
    wait_for: all
    branches:
      - name: a
        steps: [{id: a1, tool: noop}]
      - name: b
        steps: [{id: b1, tool: echo, inputs: {message: hi}}]
  - id: pick
    type: conditional
    condition: "true"
    if_true: [{id: yes_step, tool: noop}]
    if_false: [{id: no_step, tool: noop}]
on_failure:
  - id: tell
    type: notify
    message: failed
outputs:
  built: true
"#;

#[test]
fn a_good_file_becomes_a_workflow() {
    let checked = check(Path::new("wf.awl.yaml"), GOOD).unwrap_or_else(|d| panic!("{d}"));
    let wf = &checked.workflow;
    assert_eq!(wf.name, "deploy");
    assert_eq!(wf.steps.len(), 5);
    assert_eq!(wf.steps[0].common.on_error, Some(OnError::Continue));
    assert_eq!(
        wf.steps[0].common.retry.as_ref().map(|r| r.backoff),
        Some(Backoff::Linear)
    );
    assert!(matches!(wf.steps[1].kind, StepKind::Tool(ref t) if t.tool == "greet"));
    assert_eq!(wf.steps[3].children().len(), 2);
    assert_eq!(
        checked.json["steps"][1]["type"],
        json!("tool"),
        "a step with `tool` and no `type` is a tool step"
    );
    assert_eq!(
        checked.source_map.value("/steps/2/id"),
        Position {
            line: 29,
            column: 9
        }
    );
}

#[test]
fn unknown_fields_are_named_with_a_suggestion() {
    let p = problems(
        "name: a\nversion: \"1.0.0\"\nsteps:\n  - id: s\n    type: shell\n    comand: [ls]\n",
    );
    assert_eq!(
        p,
        vec![
            "wf.awl.yaml:4:5: steps[0]: a shell step needs exactly one of `command` (a list: program and arguments) or `script`",
            "wf.awl.yaml:6:5: steps[0].comand: unknown field `comand` (did you mean `command`?)",
        ]
    );
}

#[test]
fn unknown_step_types_list_the_known_ones() {
    let p = problems("name: a\nversion: \"1.0.0\"\nsteps:\n  - id: s\n    type: shel\n");
    assert_eq!(
        p,
        vec![
            "wf.awl.yaml:5:11: steps[0].type: unknown step type `shel` (expected one of `tool`, \
             `shell`, `http`, `agent`, `gate`, `conditional`, `parallel`, `database`, `notify`, \
             `workflow`)"
        ]
    );
}

#[test]
fn every_problem_is_reported_at_once() {
    let p = problems(
        r#"name: a
version: 1.0
colour: red
steps:
  - id: build
    type: shell
    command: [make]
    retry: {max_attempts: 0, backoff: sometimes}
  - id: build
    type: http
  - id: bad id
    tool: hammer
  - type: gate
"#,
    );
    let expected = [
        "wf.awl.yaml:2:10: version: expected a string, got a number with a fraction",
        "wf.awl.yaml:3:1: colour: unknown field `colour`",
        "wf.awl.yaml:8:27: steps[0].retry.max_attempts: 0 is less than the minimum of 1",
        "wf.awl.yaml:8:39: steps[0].retry.backoff: `sometimes` is not one of `exponential`, `linear`, `constant`",
        "wf.awl.yaml:9:5: steps[1]: missing field `url`",
        "wf.awl.yaml:9:9: steps[1].id: duplicate step id `build` (first used on line 5)",
        "wf.awl.yaml:11:9: steps[2].id: `bad id` is not a valid step id",
        "wf.awl.yaml:12:11: steps[2].tool: unknown tool `hammer`",
        "wf.awl.yaml:13:5: steps[3]: missing field `id`",
        "wf.awl.yaml:13:5: steps[3]: missing field `message`",
    ];
    for want in expected {
        assert!(
            p.iter().any(|got| got.starts_with(want)),
            "missing {want:?} in:\n{}",
            p.join("\n")
        );
    }
    assert_eq!(p.len(), expected.len(), "{}", p.join("\n"));
}

#[test]
fn a_step_without_type_or_tool_says_what_it_needs() {
    let p = problems(
        "name: a\nversion: \"1.0.0\"\nsteps:\n  - id: s\n    command: [ls]\n  - name: no id\n",
    );
    let needs = "a step needs a `type` (one of tool, shell, http, agent, gate, conditional, \
                 parallel, database, notify, workflow), or `tool` for a tool step";
    assert_eq!(
        p,
        vec![
            format!("wf.awl.yaml:4:5: steps[0]: {needs}"),
            "wf.awl.yaml:5:5: steps[0].command: unknown field `command` (expected one of \
             `compensate`, `description`, `error_handlers`, `id`, `if`, `inputs`, `name`, \
             `on_error`, `rate_limit`, `retry`, `timeout_seconds`, `tool`, `type`)"
                .to_string(),
            "wf.awl.yaml:6:5: steps[1]: missing field `id`".to_string(),
            format!("wf.awl.yaml:6:5: steps[1]: {needs}"),
        ]
    );
}

#[test]
fn templates_in_script_or_sql_text_are_refused() {
    let p = problems(
        r#"name: a
version: "1.0.0"
steps:
  - id: s
    type: shell
    script: echo ${{ inputs.name }}
  - id: q
    type: database
    connection: main
    query: "SELECT * FROM t WHERE name = '${{ inputs.name }}'"
  - id: t
    type: shell
    script: |
      echo "$1"
      echo "$inputs.name" $$steps.x \$steps.y ${inputs}.z
  - id: u
    type: database
    connection: main
    query: "SELECT $1, $steps.s.outputs"
    params: [1]
"#,
    );
    assert_eq!(
        p,
        vec![
            "wf.awl.yaml:6:18: steps[0].script: templates are not allowed in `script` text: \
             pass values as `args` (\"$1\", \"$2\"...) or `env` instead",
            "wf.awl.yaml:10:43: steps[1].query: templates are not allowed in `query` text: \
             pass values as bind parameters in `params` ($1, $2... / ?1, ?2...) instead",
            "wf.awl.yaml:15:13: steps[2].script: `$inputs.` references are not rendered in \
             `script` text: pass values as `args` (\"$1\", \"$2\"...) or `env` instead \
             (a shell variable followed by `.` is written `${name}.`)",
            "wf.awl.yaml:19:24: steps[3].query: `$steps.` references are not rendered in \
             `query` text: pass values as bind parameters in `params` ($1, $2... / ?1, ?2...) \
             instead",
        ]
    );
    let p = problems(
        r#"name: a
version: "1.0.0"
steps:
  - id: t
    type: shell
    script: echo $$steps.x \$steps.y ${inputs}.z $HOME.x
"#,
    );
    assert_eq!(p, Vec::<String>::new());
}

#[test]
fn handlers_name_existing_tools() {
    let p = problems(
        r#"name: a
version: "1.0.0"
error_handlers:
  - {class: network, action: fallback}
steps:
  - id: s
    tool: echo
    error_handlers:
      - {class: any, action: fallback, fallback_tool: hammer}
"#,
    );
    assert_eq!(
        p,
        vec![
            "wf.awl.yaml:4:5: error_handlers[0]: the `fallback` action needs `fallback_tool`",
            "wf.awl.yaml:9:55: steps[0].error_handlers[0].fallback_tool: unknown tool `hammer` (known: echo, fail, noop, sleep)",
        ]
    );
}

#[test]
fn malformed_yaml_is_one_problem_with_a_place() {
    let p = problems("name: a\nsteps: [\n");
    assert_eq!(
        p,
        vec!["wf.awl.yaml:2:8: not valid YAML: unclosed bracket '['"]
    );
}

#[test]
fn a_nul_character_is_a_problem_where_it_is() {
    let p = problems(
        r#"name: a
version: "1.0.0"
steps:
  - id: first
    tool: echo
    inputs:
      message: "one\0two"
"#,
    );
    assert_eq!(
        p,
        vec![
            "wf.awl.yaml:7:16: steps[0].inputs.message: holds a NUL character (\\0), which \
             awl cannot record: remove it"
        ]
    );
}

#[test]
fn references_must_name_inputs_and_earlier_steps() {
    let p = problems(
        r#"name: a
version: "1.0.0"
inputs:
  repo: {type: string, required: true}
steps:
  - id: first
    tool: echo
    inputs:
      message: "${{ prev.output }}"
  - id: build
    type: shell
    command: [make, "${{ inputs.rpo }}", "${{ steps.build.outputs.x }}"]
  - id: ship
    tool: echo
    if: "$deploy.status == 'succeeded'"
    inputs:
      message: "${{ steps.later.outputs.url }} to $inputs.repo"
  - id: later
    tool: noop
outputs:
  url: "${{ steps.later.outputs.url }}"
  what: "${{ steps.nowhere.outputs }}"
"#,
    );
    let expected = [
        "wf.awl.yaml:9:16: steps[0].inputs.message: `prev` is used, but no step runs before this one",
        "wf.awl.yaml:12:21: steps[1].command[1]: unknown input `rpo` (declared: repo)",
        "wf.awl.yaml:12:42: steps[1].command[2]: step `build` refers to itself",
        "wf.awl.yaml:15:9: steps[2].if: unknown step `deploy`",
        "wf.awl.yaml:17:16: steps[2].inputs.message: refers to step `later`, which has not run at this point",
        "wf.awl.yaml:22:9: outputs.what: unknown step `nowhere`",
    ];
    for want in expected {
        assert!(
            p.iter().any(|got| got.starts_with(want)),
            "missing {want:?} in:\n{}",
            p.join("\n")
        );
    }
    assert_eq!(p.len(), expected.len(), "{}", p.join("\n"));
}

#[test]
fn bad_expressions_are_reported_where_they_go_wrong() {
    let p = problems(
        r#"name: a
version: "1.0.0"
steps:
  - id: a
    tool: noop
    if: "true && )"
  - id: b
    tool: echo
    inputs:
      message: "hello ${{ steps.a.outputs. }}"
  - id: c
    type: conditional
    condition: ${{ 1 + }}
    if_true: [{id: d, tool: noop}]
"#,
    );
    assert_eq!(
        p,
        vec![
            "wf.awl.yaml:6:18: steps[0].if: unexpected token ')'",
            "wf.awl.yaml:10:43: steps[1].inputs.message: cannot parse '.'",
            "wf.awl.yaml:13:23: steps[2].condition: unexpected end of expression",
        ]
    );
}

/// An expression error points at its character in the file, whatever the YAML
/// style of the string it is in.
#[test]
fn expression_errors_are_placed_in_every_style_of_string() {
    let p = problems(
        r#"name: a
version: "1.0.0"
steps:
  - id: a
    tool: echo
    inputs:
      block: |
        first line ok
        second ${{ ) }}
      folded: >
        first line
        second ${{ ) }}
      plain: first
        then ${{ ) }}
      escapes: "a\tb\u00e9 ${{ ) }}"
      quotes: 'it''s ${{ ) }}'
      wide: {é: "é", b: "é ${{ ) }}"}
      quote_in_block: |2-
          'x' ${{ ) }}
      continued: "abc \
        def ${{ ) }}"
      more_indented: > # a comment
        a
          b ${{ ) }}
      anchored: &an "${{ ) }}"
      aliased: *an
"#,
    );
    assert_eq!(
        p,
        vec![
            "wf.awl.yaml:9:20: steps[0].inputs.block: unexpected token ')'",
            "wf.awl.yaml:12:20: steps[0].inputs.folded: unexpected token ')'",
            "wf.awl.yaml:14:18: steps[0].inputs.plain: unexpected token ')'",
            "wf.awl.yaml:15:32: steps[0].inputs.escapes: unexpected token ')'",
            "wf.awl.yaml:16:26: steps[0].inputs.quotes: unexpected token ')'",
            "wf.awl.yaml:17:32: steps[0].inputs.wide.b: unexpected token ')'",
            "wf.awl.yaml:19:19: steps[0].inputs.quote_in_block: unexpected token ')'",
            "wf.awl.yaml:21:17: steps[0].inputs.continued: unexpected token ')'",
            "wf.awl.yaml:24:17: steps[0].inputs.more_indented: unexpected token ')'",
            "wf.awl.yaml:25:26: steps[0].inputs.anchored: unexpected token ')'",
            // An alias is reported where it is used.
            "wf.awl.yaml:26:16: steps[0].inputs.aliased: unexpected token ')'",
        ]
    );
}

#[test]
fn compensations_and_hooks_may_use_every_step() {
    let p = problems(
        r#"name: a
version: "1.0.0"
steps:
  - id: create
    tool: echo
    inputs: {message: made}
    compensate:
      id: destroy
      tool: echo
      inputs: {message: "${{ steps.create.outputs.message }} ${{ steps.last.status }}"}
  - id: last
    tool: noop
on_failure:
  - id: tell
    type: notify
    message: "failed at ${{ steps.last.status }}"
"#,
    );
    assert!(p.is_empty(), "{}", p.join("\n"));
}

#[test]
fn only_steps_get_the_default_tool_type() {
    let checked = check(
        Path::new("wf.awl.yaml"),
        r#"name: a
version: "1.0.0"
steps:
  - id: a
    tool: echo
    inputs:
      payload: {id: 1, tool: hammer}
    compensate: {id: undo, tool: noop}
outputs:
  o: {id: x, tool: y}
"#,
    )
    .unwrap_or_else(|d| panic!("{d}"));
    assert_eq!(
        checked.json,
        json!({
            "name": "a", "version": "1.0.0",
            "steps": [{
                "id": "a", "type": "tool", "tool": "echo",
                "inputs": {"payload": {"id": 1, "tool": "hammer"}},
                "compensate": {"id": "undo", "type": "tool", "tool": "noop"}
            }],
            "outputs": {"o": {"id": "x", "tool": "y"}}
        })
    );
}

#[test]
fn a_declared_tool_without_a_type_is_a_problem_where_it_is() {
    let p = problems(
        r#"name: a
version: "1.0.0"
tools:
  - name: notype
    command: [x]
steps:
  - id: a
    tool: notype
"#,
    );
    assert_eq!(p, vec!["wf.awl.yaml:4:5: tools[0]: missing field `type`"]);
}

#[test]
fn a_declared_tool_of_another_type_is_one_problem() {
    let p = problems(
        r#"name: a
version: "1.0.0"
tools:
  - name: mine
    type: agent
    prompt: hi
steps:
  - id: a
    tool: mine
"#,
    );
    assert_eq!(
        p,
        vec![
            "wf.awl.yaml:5:11: tools[0].type: `agent` is not one of `shell`, `http`, `database`, `notify`"
        ]
    );
}

#[test]
fn positions_in_a_file_with_crlf_line_ends() {
    let p = problems(
        "name: a\r\nversion: \"1.0.0\"\r\nsteps:\r\n  - id: a\r\n    tool: echo\r\n    inputs:\r\n      x: |\r\n        ok\r\n        no ${{ ) }}\r\n",
    );
    assert_eq!(
        p,
        vec!["wf.awl.yaml:9:16: steps[0].inputs.x: unexpected token ')'"]
    );
}

#[test]
fn a_compensation_is_one_performed_step() {
    let p = problems(
        r#"name: a
version: "1.0.0"
steps:
  - id: a
    tool: noop
    compensate:
      id: undo_a
      type: conditional
      condition: "true"
      if_true: [{id: deep, tool: noop}]
  - id: b
    tool: noop
    compensate:
      id: undo_b
      tool: noop
      if: "true"
      retry: {max_attempts: 2}
      on_error: continue
      error_handlers: [{class: any, action: abort}]
      compensate: {id: undo_undo_b, type: gate, message: sure?}
  - id: c
    tool: noop
    compensate: {id: undo_c, type: shell, command: [echo], timeout_seconds: 5}
"#,
    );
    assert_eq!(
        p,
        vec![
            "wf.awl.yaml:8:13: steps[0].compensate.type: a compensation cannot be a `conditional` step: it must be one of tool, shell, http, database, notify",
            "wf.awl.yaml:16:7: steps[1].compensate.if: `if` does not apply to a compensation: it runs once, as it is",
            "wf.awl.yaml:17:7: steps[1].compensate.retry: `retry` does not apply to a compensation: it runs once, as it is",
            "wf.awl.yaml:18:7: steps[1].compensate.on_error: `on_error` does not apply to a compensation: it runs once, as it is",
            "wf.awl.yaml:19:7: steps[1].compensate.error_handlers: `error_handlers` does not apply to a compensation: it runs once, as it is",
            "wf.awl.yaml:20:7: steps[1].compensate.compensate: `compensate` does not apply to a compensation: it runs once, as it is",
            "wf.awl.yaml:20:43: steps[1].compensate.compensate.type: a compensation cannot be a `gate` step: it must be one of tool, shell, http, database, notify",
        ]
    );
}

#[test]
fn an_input_default_has_the_input_type() {
    let p = problems(
        r#"name: a
version: "1.0.0"
inputs:
  count: {type: integer, default: "three"}
  name: {default: 7}
  ok: {type: number, default: 2}
  anything: {type: any, default: [1]}
tools:
  - name: t
    type: shell
    command: [echo, "${{ inputs.flag }}"]
    inputs:
      flag: {type: boolean, default: "yes"}
steps:
  - id: a
    tool: t
"#,
    );
    assert_eq!(
        p,
        vec![
            "wf.awl.yaml:4:35: inputs.count.default: the default does not have the input's type: expected integer, got \"three\"",
            "wf.awl.yaml:5:19: inputs.name.default: the default does not have the input's type: expected string, got 7",
            "wf.awl.yaml:13:38: tools[0].inputs.flag.default: the default does not have the input's type: expected boolean, got \"yes\"",
        ]
    );
}

#[test]
fn templates_are_refused_where_they_would_not_be_rendered() {
    let p = problems(
        r#"name: a
version: "1.0.0"
inputs:
  who: {type: string}
tools:
  - name: q
    type: database
    connection: "${{ inputs.db }}"
    query: select 1
steps:
  - id: s
    type: shell
    shell: "$inputs.who"
    script: echo hi
  - id: ask
    type: agent
    prompt: "Review for ${{ inputs.who }}"
    capabilities: [rust, "${{ inputs.who }}"]
    agent_hint: $inputs.who
  - id: ok
    type: gate
    message: "Ship it, ${{ inputs.who }}?"
    approvers: ["${{ inputs.who }}", ops]
    error_handlers:
      - {class: any, action: escalate, approvers: ["$inputs.who"]}
  - id: child
    type: workflow
    workflow: "${{ inputs.who }}"
"#,
    );
    let field = |f: &str| {
        format!("`{f}` is used as written: templates and `$` references are not rendered in it")
    };
    assert_eq!(
        p,
        vec![
            format!(
                "wf.awl.yaml:8:17: tools[0].connection: {}",
                field("connection")
            ),
            format!("wf.awl.yaml:13:12: steps[0].shell: {}", field("shell")),
            format!(
                "wf.awl.yaml:18:26: steps[1].capabilities[1]: {}",
                field("capabilities")
            ),
            format!(
                "wf.awl.yaml:19:17: steps[1].agent_hint: {}",
                field("agent_hint")
            ),
            format!(
                "wf.awl.yaml:23:17: steps[2].approvers[0]: {}",
                field("approvers")
            ),
            format!(
                "wf.awl.yaml:25:52: steps[2].error_handlers[0].approvers[0]: {}",
                field("approvers")
            ),
            format!(
                "wf.awl.yaml:28:15: steps[3].workflow: {}",
                field("workflow")
            ),
        ]
    );
}

#[test]
fn step_pointers_reach_every_step() {
    let json = json!({"steps": [
        {"id": "a", "compensate": {"id": "undo_a"}},
        {"id": "fork", "type": "parallel", "branches": [
            {"name": "x", "steps": [{"id": "x1", "compensate": {"id": "undo_x1"}}]}
        ]},
        {"id": "pick", "type": "conditional", "if_true": [{"id": "t"}], "if_false": [{"id": "f"}]}
    ], "on_success": [{"id": "ok"}], "on_failure": [{"id": "bad", "type": "conditional", "if_true": [{"id": "bad_t"}]}]});
    assert_eq!(
        super::step_pointers(&json),
        vec![
            "/steps/0",
            "/steps/1",
            "/steps/1/branches/0/steps/0",
            "/steps/2",
            "/steps/2/if_true/0",
            "/steps/2/if_false/0",
            "/on_success/0",
            "/on_failure/0",
            "/on_failure/0/if_true/0",
            "/steps/0/compensate",
            "/steps/1/branches/0/steps/0/compensate",
        ]
    );
    assert!(super::names_a_file("./child.awl.yaml"));
    assert!(super::names_a_file("sub/child"));
    assert!(!super::names_a_file("deploy-service"));
}

#[test]
fn a_step_cannot_use_the_step_it_is_in() {
    let p = problems(
        r#"name: a
version: "1.0.0"
steps:
  - id: pick
    type: conditional
    condition: "true"
    if_true:
      - id: inner
        tool: echo
        inputs: {message: "${{ steps.pick.outputs.branch }}"}
  - id: fork
    type: parallel
    branches:
      - name: x
        steps:
          - id: x1
            tool: noop
            if: "steps.fork.status == 'running'"
          - id: x2
            tool: noop
            if: "steps.y1.status == 'succeeded'"
      - name: y
        steps: [{id: y1, tool: noop}]
"#,
    );
    assert_eq!(
        p,
        vec![
            "wf.awl.yaml:10:27: steps[0].if_true[0].inputs.message: refers to step `pick`, which contains this one: it has not finished while this step runs",
            "wf.awl.yaml:18:17: steps[1].branches[0].steps[0].if: refers to step `fork`, which contains this one: it has not finished while this step runs",
            "wf.awl.yaml:21:17: steps[1].branches[0].steps[1].if: refers to step `y1`, which has not run at this point (it comes later, or in another branch)",
        ]
    );
}

#[test]
fn whole_numbers_are_written_without_a_fraction() {
    let p = problems(
        r#"name: a
version: "1.0.0"
timeout_seconds: 10.0
cost_budget_usd: 2.0
steps:
  - id: a
    tool: noop
    retry: {max_attempts: 1e1, base_seconds: 1.0}
  - id: b
    type: shell
    command: [x]
    success_exit_codes: [0, 1.0]
outputs:
  ratio: 10.0
"#,
    );
    assert_eq!(
        p,
        vec![
            "wf.awl.yaml:3:18: timeout_seconds: expected a whole number, got 10.0: write it without a fraction",
            "wf.awl.yaml:8:27: steps[0].retry.max_attempts: expected a whole number, got 10.0: write it without a fraction",
            "wf.awl.yaml:12:29: steps[1].success_exit_codes[1]: expected a whole number, got 1.0: write it without a fraction",
        ]
    );
}

#[test]
fn a_declared_tool_sees_only_its_inputs() {
    let p = problems(
        r#"name: a
version: "1.0.0"
inputs:
  repo: {type: string}
tools:
  - name: t
    type: shell
    command: [echo, "${{ inputs.msg }}", "${{ inputs.repo }}", "${{ steps.a.outputs }}", "$prev.output"]
    inputs:
      msg: {type: string}
steps:
  - id: a
    tool: t
"#,
    );
    let sees = "a declared tool sees only its own `inputs`: pass what it needs as an input of \
                the tool step";
    assert_eq!(
        p,
        vec![
            "wf.awl.yaml:8:42: tools[0].command[2]: unknown input `repo` (declared: msg)"
                .to_string(),
            format!("wf.awl.yaml:8:64: tools[0].command[3]: refers to step `a`: {sees}"),
            format!("wf.awl.yaml:8:90: tools[0].command[4]: `prev` is used: {sees}"),
        ]
    );
}

#[test]
fn secret_and_personal_inputs_are_checked() {
    let base = |inputs: &str, subject: &str| {
        format!(
            "name: p\nversion: \"1.0.0\"\n{subject}inputs:\n{inputs}steps:\n  - id: a\n    type: tool\n    tool: noop\n"
        )
    };
    let ok = base(
        "  id: { type: string }\n  key: { type: string, secret: true }\n  mail: { type: string, personal: true }\n",
        "subject: \"customer:${{ inputs.id }}\"\n",
    );
    assert_eq!(problems(&ok), Vec::<String>::new());

    let no_subject = problems(&base("  mail: { type: string, personal: true }\n", ""));
    assert!(
        no_subject
            .iter()
            .any(|p| p.contains("inputs.mail.personal") && p.contains("needs a `subject:`")),
        "{no_subject:?}"
    );
    let both = problems(&base(
        "  id: { type: string }\n  x: { type: string, secret: true, personal: true }\n",
        "subject: \"${{ inputs.id }}\"\n",
    ));
    assert!(
        both.iter()
            .any(|p| p.contains("either `secret` or `personal`")),
        "{both:?}"
    );
    let bad_subject = problems(&base(
        "  key: { type: string, secret: true }\n  mail: { type: string, personal: true }\n",
        "subject: \"${{ inputs.key }}-${{ steps.a.output }}-${{ inputs.nope }}\"\n",
    ));
    for wanted in [
        "is secret and cannot name a subject",
        "inputs only",
        "`inputs.nope` is not a declared input",
    ] {
        assert!(
            bad_subject
                .iter()
                .any(|p| p.contains("subject") && p.contains(wanted)),
            "{wanted}: {bad_subject:?}"
        );
    }
}

#[test]
fn schedules_are_checked_where_they_are_written() {
    let p = problems(
        r#"name: a
version: "1.0.0"
inputs:
  region: {type: string, required: true}
steps:
  - {id: a, tool: noop}
schedules:
  - name: nightly
    cron: "0 25 * * *"
    timezone: Mars/Olympus
    inputs: {region: 7, zone: eu}
  - every: 15 minutes
  - name: nightly
    every: 1h
    cron: "0 * * * *"
"#,
    );
    let said = p.join("\n");
    for expected in [
        "wf.awl.yaml:9:11: schedules[0].cron:",
        "wf.awl.yaml:10:15: schedules[0].timezone: unknown time zone \"Mars/Olympus\"",
        "schedules[0].inputs.region: input \"region\": expected string, got 7",
        "schedules[0].inputs.zone: input \"zone\" is not declared in `inputs`",
        "schedules[1].every: interval \"15 minutes\"",
        "schedules[1]: a file with several schedules names each (`name:`)",
        "schedules[2].name: schedule name \"nightly\" is used twice",
        "schedules[2].every: give `cron` or `every`, not both",
    ] {
        assert!(said.contains(expected), "missing {expected:?} in:\n{said}");
    }
    // A good one passes, and reads into the model.
    let good = check(
        Path::new("wf.awl.yaml"),
        r#"name: a
version: "1.0.0"
steps:
  - {id: a, tool: noop}
schedules:
  - {cron: "0 9 * * MON-FRI", timezone: Europe/Paris, overlap: queue, jitter_seconds: 30}
"#,
    )
    .expect("a good schedule");
    assert_eq!(good.workflow.schedules.len(), 1);
    assert_eq!(
        good.workflow.schedules[0].overlap,
        super::schedule::OverlapPolicy::Queue
    );
}

#[test]
fn flow_control_is_checked_where_it_is_written() {
    let p = problems(
        r#"name: a
version: "1.0.0"
priority: 5000
inputs:
  customer: {type: string}
concurrency: {key: inputs.client}
debounce: {key: "steps.a.output", window_seconds: 60}
steps:
  - {id: a, tool: noop}
"#,
    );
    let said = p.join("\n");
    for expected in [
        "priority",
        "concurrency.key: `key` needs `per_key`",
        "concurrency.key: unknown input `client` (declared: customer)",
        "debounce.key: a key is computed when the run starts: it may read inputs only",
    ] {
        assert!(said.contains(expected), "missing {expected:?} in:\n{said}");
    }
    let zero = problems(
        r#"name: a
version: "1.0.0"
concurrency: {limit: 0, per_key: 1}
steps:
  - {id: a, tool: noop}
"#,
    )
    .join("\n");
    for expected in ["concurrency.limit", "`per_key` needs `key`"] {
        assert!(zero.contains(expected), "missing {expected:?} in:\n{zero}");
    }
    let good = check(
        Path::new("wf.awl.yaml"),
        r#"name: a
version: "1.0.0"
priority: -10
inputs:
  customer: {type: string}
concurrency: {limit: 10, key: inputs.customer, per_key: 2}
debounce: {key: "inputs.customer + ':sync'", window_seconds: 30}
steps:
  - {id: a, tool: noop}
"#,
    )
    .expect("good flow control");
    assert_eq!(good.workflow.priority, Some(-10));
    let concurrency = good.workflow.concurrency.expect("concurrency");
    assert_eq!(
        (concurrency.limit, concurrency.per_key),
        (Some(10), Some(2))
    );
    assert_eq!(good.workflow.debounce.expect("debounce").window_seconds, 30);
}

#[test]
fn hooks_are_checked_where_they_are_written() {
    let said = problems(
        r#"name: a
version: "1.0.0"
steps:
  - {id: a, tool: noop}
hooks:
  - name: orders
    secret_env: ORDERS_SECRET
    inputs: {order: "${{ inputs.payload.id }}"}
  - name: orders
    secret_env: " "
"#,
    )
    .join("\n");
    for expected in [
        "hooks[0].inputs.order: unknown input `payload` (declared: body, headers)",
        "hooks[1].name: hook name \"orders\" is used twice",
        "hooks[1].secret_env: name the environment variable",
    ] {
        assert!(said.contains(expected), "missing {expected:?} in:\n{said}");
    }
}

#[test]
fn rate_limits_are_checked_where_they_are_written() {
    let said = problems(
        r#"name: a
version: "1.0.0"
inputs:
  customer: {type: string}
rate_limits:
  - {name: github, per_second: 0}
  - {name: github, per_second: 5, burst: 0, key: inputs.client, tools: [nope]}
steps:
  - {id: a, tool: noop, rate_limit: gitlab}
  - id: g
    type: gate
    message: ok?
    rate_limit: github
  - id: b
    tool: noop
    rate_limit: github
    compensate: {id: undo, tool: noop, rate_limit: github}
"#,
    )
    .join("\n");
    for expected in [
        "rate_limits[0].per_second: `per_second` must be more than 0",
        "rate_limits[1].name: rate limit name \"github\" is used twice",
        "rate_limits[1].burst: `burst` must be at least 1",
        "rate_limits[1].key: unknown input `client` (declared: customer)",
        "rate_limits[1].tools[0]: unknown tool",
        "steps[0].rate_limit: rate limit \"gitlab\" is not declared here (declared: github)",
        "steps[1].rate_limit: a `gate` step cannot be rate-limited",
        "steps[2].compensate.rate_limit: a compensation is not rate-limited",
    ] {
        assert!(said.contains(expected), "missing {expected:?} in:\n{said}");
    }
    let good = check(
        Path::new("wf.awl.yaml"),
        r#"name: a
version: "1.0.0"
inputs:
  customer: {type: string}
rate_limits:
  - {name: crm, per_second: 0.5, burst: 3, key: inputs.customer, tools: [echo]}
steps:
  - {id: a, tool: noop, rate_limit: crm}
"#,
    )
    .expect("good rate limits");
    let limit = &good.workflow.rate_limits[0];
    assert_eq!((limit.per_second, limit.burst()), (0.5, 3));
    assert_eq!(
        good.workflow.steps[0].common.rate_limit.as_deref(),
        Some("crm")
    );
}

/// A registry as the workflow checks see it: one tool of the tools directory
/// (`word_count`) and one MCP tool (`py__add`).
fn registry() -> super::KnownTools {
    let word_count: super::model::ToolDefinition = serde_json::from_value(json!({
        "name": "word_count",
        "type": "shell",
        "inputs": {"text": {"type": "string", "required": true}},
        "command": ["wc", "-w"],
        "stdin": "${{ inputs.text }}",
    }))
    .unwrap();
    let mut known = super::KnownTools::default();
    known
        .declared
        .insert("word_count".into(), std::sync::Arc::new(word_count));
    known.external.insert("py__add".into());
    known
}

const USES_THE_REGISTRY: &str = r#"name: a
version: "1.0.0"
error_handlers:
  - {class: timeout, action: fallback, fallback_tool: word_count}
steps:
  - id: count
    tool: word_count
    inputs: {text: a b c}
  - id: sum
    type: tool
    tool: py__add
    inputs: {a: 1, b: 2}
    error_handlers:
      - {class: unknown, action: fallback, fallback_tool: py__add}
"#;

#[test]
fn registry_tools_are_named_only_when_the_registry_knows_them() {
    let file = Path::new("wf.awl.yaml");
    let checked = super::validate::check_with(file, USES_THE_REGISTRY, &registry())
        .unwrap_or_else(|d| panic!("{d}"));
    assert_eq!(
        super::tools_named(&checked.workflow),
        ["py__add", "word_count"].map(String::from).into()
    );
    // Checking copies nothing into the file: registration does.
    assert!(checked.workflow.tools.is_empty());

    // Without the registry, every name is refused where it is, with what is known.
    let said: Vec<String> = check(file, USES_THE_REGISTRY)
        .expect_err("unknown tools")
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        said,
        [
            "wf.awl.yaml:4:55: error_handlers[0].fallback_tool: unknown tool `word_count` (known: echo, fail, noop, sleep)",
            "wf.awl.yaml:7:11: steps[0].tool: unknown tool `word_count` (known: echo, fail, noop, sleep)",
            "wf.awl.yaml:11:11: steps[1].tool: unknown tool `py__add` (known: echo, fail, noop, sleep)",
            "wf.awl.yaml:14:59: steps[1].error_handlers[0].fallback_tool: unknown tool `py__add` (known: echo, fail, noop, sleep)",
        ]
    );

    // A name the registry does not know either is refused, the registry's listed.
    let typo = USES_THE_REGISTRY.replace(
        "type: tool\n    tool: py__add",
        "type: tool\n    tool: py__sub",
    );
    let said: Vec<String> = super::validate::check_with(file, &typo, &registry())
        .expect_err("an unknown tool")
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        said,
        [
            "wf.awl.yaml:11:11: steps[1].tool: unknown tool `py__sub` (known: echo, fail, noop, py__add, sleep, word_count)"
        ]
    );
}

#[test]
fn a_file_may_declare_a_tool_of_a_registry_name_and_its_own_is_the_one() {
    let source = r#"name: a
version: "1.0.0"
tools:
  - {name: word_count, type: shell, command: [echo, mine]}
  - {name: echo, type: shell, command: [echo]}
steps:
  - {id: count, tool: word_count}
"#;
    let said: Vec<String> =
        super::validate::check_with(Path::new("wf.awl.yaml"), source, &registry())
            .expect_err("a built-in's name is still taken")
            .iter()
            .map(ToString::to_string)
            .collect();
    assert_eq!(
        said,
        ["wf.awl.yaml:5:12: tools[1].name: `echo` is a built-in tool; choose another name"]
    );
    let own = source.replace("  - {name: echo, type: shell, command: [echo]}\n", "");
    let checked = super::validate::check_with(Path::new("wf.awl.yaml"), &own, &registry())
        .unwrap_or_else(|d| panic!("{d}"));
    assert_eq!(checked.workflow.tools.len(), 1);
    assert!(matches!(
        &checked.workflow.tools[0].kind,
        StepKind::Shell(s) if s.command.as_deref() == Some(&["echo".to_string(), "mine".to_string()][..])
    ));
}
