//! The rules of a workflow that a JSON Schema cannot say.
//!
//! They run on the JSON form of the file, even when the schema found problems, so a
//! user sees every problem at once; each rule looks only at the fields it needs and
//! passes over values of the wrong shape (the schema reports those).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::{Map, Value};

use crate::expr::{Expression, References, Template};

use super::diagnostics::Reporter;
use super::flow::{ConcurrencySpec, DebounceSpec, RateLimitSpec};
use super::inputs::fits;
use super::model::InputType;
use super::schedule::ScheduleSpec;
use super::yaml::escape;

/// One step found in the file, with what it may refer to.
#[derive(Debug, Clone)]
pub(crate) struct StepSite<'a> {
    pub pointer: String,
    pub id: Option<&'a str>,
    pub step: &'a Map<String, Value>,
    /// Steps that have finished (or were passed by) whenever this step runs.
    pub earlier: BTreeSet<String>,
    /// Whether some step runs before this one (`prev` is defined).
    pub has_prev: bool,
    /// Whether this is a step's `compensate`.
    pub compensation: bool,
}

/// Every step in the file, in document order.
pub(crate) fn steps(json: &Value) -> Vec<StepSite<'_>> {
    let mut found = Vec::new();
    let Some(root) = json.as_object() else {
        return found;
    };
    walk(
        root.get("steps"),
        "/steps",
        &BTreeSet::new(),
        false,
        &mut found,
    );
    let all: BTreeSet<String> = found
        .iter()
        .filter_map(|s| s.id.map(String::from))
        .collect();
    for hook in ["on_success", "on_failure"] {
        walk(root.get(hook), &format!("/{hook}"), &all, true, &mut found);
    }
    // Compensations run after the run failed: everything is "earlier".
    let mut compensations = Vec::new();
    for site in &found {
        if let Some(Value::Object(step)) = site.step.get("compensate") {
            compensate_sites(
                step,
                format!("{}/compensate", site.pointer),
                &all,
                &mut compensations,
            );
        }
    }
    found.extend(compensations);
    found
}

fn compensate_sites<'a>(
    step: &'a Map<String, Value>,
    pointer: String,
    all: &BTreeSet<String>,
    out: &mut Vec<StepSite<'a>>,
) {
    out.push(StepSite {
        pointer: pointer.clone(),
        id: step.get("id").and_then(Value::as_str),
        step,
        earlier: all.clone(),
        has_prev: true,
        compensation: true,
    });
    if let Some(Value::Object(inner)) = step.get("compensate") {
        compensate_sites(inner, format!("{pointer}/compensate"), all, out);
    }
}

/// Walk one list of steps; returns the ids defined in it (nested ones included).
fn walk<'a>(
    list: Option<&'a Value>,
    pointer: &str,
    before: &BTreeSet<String>,
    has_prev: bool,
    out: &mut Vec<StepSite<'a>>,
) -> BTreeSet<String> {
    let mut defined = BTreeSet::new();
    let Some(Value::Array(items)) = list else {
        return defined;
    };
    let mut earlier = before.clone();
    for (i, item) in items.iter().enumerate() {
        let Value::Object(step) = item else { continue };
        let here = format!("{pointer}/{i}");
        let id = step.get("id").and_then(Value::as_str);
        let prev = has_prev || i > 0;
        out.push(StepSite {
            pointer: here.clone(),
            id,
            step,
            earlier: earlier.clone(),
            has_prev: prev,
            compensation: false,
        });
        let mut nested = BTreeSet::new();
        for branch_list in ["if_true", "if_false"] {
            nested.extend(walk(
                step.get(branch_list),
                &format!("{here}/{branch_list}"),
                &earlier,
                prev,
                out,
            ));
        }
        if let Some(Value::Array(branches)) = step.get("branches") {
            for (b, branch) in branches.iter().enumerate() {
                nested.extend(walk(
                    branch.get("steps"),
                    &format!("{here}/branches/{b}/steps"),
                    &earlier,
                    prev,
                    out,
                ));
            }
        }
        if let Some(id) = id {
            nested.insert(id.to_string());
        }
        earlier.extend(nested.iter().cloned());
        defined.extend(nested);
    }
    defined
}

/// A NUL character (YAML's `"\\0"`) in a string or key: the log cannot store it, so a
/// run would stop at the first event that carries it.
fn no_nul(json: &Value, report: &mut Reporter<'_>) {
    if let Some(pointer) = crate::text::nul_in(json) {
        report.at_value(
            &pointer,
            "holds a NUL character (\\0), which awl cannot record: remove it",
        );
    }
}

/// Check every rule, reporting problems to `report`. Tools may be named if they are
/// `builtins`, declared in the file, or `registry` tools (the tools directory's and MCP
/// servers', handed in by the caller).
pub(crate) fn check(
    json: &Value,
    builtins: &[&str],
    registry: &BTreeSet<String>,
    file: &Path,
    report: &mut Reporter<'_>,
) {
    let sites = steps(json);
    unique_ids(&sites, report);
    let mut tools = declared_tools(json, builtins, report);
    tools.extend(registry.iter().cloned());
    let inputs: BTreeSet<String> = match json.get("inputs") {
        Some(Value::Object(declared)) => declared.keys().cloned().collect(),
        _ => BTreeSet::new(),
    };
    defaults_fit(json.get("inputs"), "/inputs", report);
    no_nul(json, report);
    data_protection(json, &inputs, report);
    let all_ids: BTreeSet<String> = sites
        .iter()
        .filter_map(|s| s.id.map(String::from))
        .collect();
    let mut places = BTreeMap::new();
    for site in &sites {
        if let Some(id) = site.id {
            places.entry(id).or_insert(site.pointer.as_str());
        }
    }
    let none = BTreeSet::new();
    for site in &sites {
        step_rules(site, &tools, file, report);
        let refs = Refs {
            inputs: &inputs,
            earlier: &site.earlier,
            all: &all_ids,
            own: site.id,
            here: Some(&site.pointer),
            places: &places,
            has_prev: site.has_prev,
            in_tool: false,
        };
        step_expressions(site, &refs, report);
    }
    if let Some(outputs) = json.get("outputs") {
        let refs = Refs {
            inputs: &inputs,
            earlier: &all_ids,
            all: &all_ids,
            own: None,
            here: None,
            places: &places,
            has_prev: true,
            in_tool: false,
        };
        templates_in(outputs, "/outputs", &refs, report);
    }
    if let Some(Value::Array(tools)) = json.get("tools") {
        for (i, tool) in tools.iter().enumerate() {
            let Value::Object(tool) = tool else { continue };
            let own_inputs: BTreeSet<String> = match tool.get("inputs") {
                Some(Value::Object(declared)) => declared.keys().cloned().collect(),
                _ => BTreeSet::new(),
            };
            defaults_fit(tool.get("inputs"), &format!("/tools/{i}/inputs"), report);
            let refs = Refs {
                inputs: &own_inputs,
                earlier: &none,
                all: &none,
                own: None,
                here: None,
                places: &BTreeMap::new(),
                has_prev: false,
                in_tool: true,
            };
            let header = ["name", "description", "inputs", "type", "script", "query"];
            let body = without(tool, &[&header[..], &AS_WRITTEN[..]].concat());
            templates_in(&body, &format!("/tools/{i}"), &refs, report);
            as_written(tool, &format!("/tools/{i}"), report);
        }
    }
    if let Some(Value::Array(handlers)) = json.get("error_handlers") {
        handlers_rules(handlers, "/error_handlers", &tools, report);
    }
    if let Some(Value::Array(schedules)) = json.get("schedules") {
        schedule_rules(schedules, json.get("inputs"), report);
    }
    let refs = Refs {
        inputs: &inputs,
        earlier: &none,
        all: &none,
        own: None,
        here: None,
        places: &BTreeMap::new(),
        has_prev: false,
        in_tool: false,
    };
    flow_rules(json, &refs, report);
    rate_limit_rules(json, &sites, &tools, &refs, report);
}

/// Rate limits: each named once, a rate in range, a key over the inputs, tools that
/// exist; a step's `rate_limit` names one of them, on a step awl performs (not a
/// compensation: it runs once, as the run fails, and is not held back).
fn rate_limit_rules(
    json: &Value,
    sites: &[StepSite<'_>],
    tools: &BTreeSet<String>,
    refs: &Refs<'_>,
    report: &mut Reporter<'_>,
) {
    let mut names = BTreeSet::new();
    if let Some(Value::Array(limits)) = json.get("rate_limits") {
        for (i, value) in limits.iter().enumerate() {
            let pointer = format!("/rate_limits/{i}");
            let Ok(spec) = serde_json::from_value::<RateLimitSpec>(value.clone()) else {
                continue;
            };
            if !names.insert(spec.name.clone()) {
                report.at_value(
                    &format!("{pointer}/name"),
                    format!("rate limit name {:?} is used twice", spec.name),
                );
            }
            for (field, message) in spec.problems() {
                report.at_value(&format!("{pointer}/{field}"), message);
            }
            if let Some(key) = &spec.key {
                key_expression(key, &format!("{pointer}/key"), refs, report);
            }
            for (t, tool) in spec.tools.iter().enumerate() {
                if !tools.contains(tool) {
                    report.at_value(&format!("{pointer}/tools/{t}"), unknown_tool(tool, tools));
                }
            }
        }
    }
    for site in sites {
        let Some(limit) = site.step.get("rate_limit") else {
            continue;
        };
        let at = format!("{}/rate_limit", site.pointer);
        let Value::String(name) = limit else {
            continue; // the schema's to report
        };
        if !names.contains(name) {
            let known: Vec<&str> = names.iter().map(String::as_str).collect();
            report.at_value(
                &at,
                if known.is_empty() {
                    format!("rate limit {name:?} is not declared: add it under `rate_limits:`")
                } else {
                    format!(
                        "rate limit {name:?} is not declared here (declared: {})",
                        known.join(", ")
                    )
                },
            );
        }
        let kind = site
            .step
            .get("type")
            .and_then(Value::as_str)
            .or_else(|| site.step.get("tool").map(|_| "tool"));
        if site.compensation {
            report.at_value(
                &at,
                "a compensation is not rate-limited: it runs once, as the run fails",
            );
        } else if let Some(kind) = kind
            && !PERFORMED.contains(&kind)
        {
            report.at_value(
                &at,
                format!(
                    "a `{kind}` step cannot be rate-limited: only steps awl performs itself ({})",
                    PERFORMED.join(", ")
                ),
            );
        }
    }
}

/// Concurrency and debounce: limits in range, and key expressions that parse and
/// read inputs only (they are evaluated when a run starts, before any step).
fn flow_rules(json: &Value, refs: &Refs<'_>, report: &mut Reporter<'_>) {
    if let Some(value) = json.get("concurrency")
        && let Ok(spec) = serde_json::from_value::<ConcurrencySpec>(value.clone())
    {
        for (field, message) in spec.problems() {
            let at = format!("/concurrency/{field}");
            if value.get(field).is_some() {
                report.at_value(&at, message);
            } else {
                report.at_value("/concurrency", message);
            }
        }
        if let Some(key) = &spec.key {
            key_expression(key, "/concurrency/key", refs, report);
        }
    }
    if let Some(value) = json.get("debounce")
        && let Ok(spec) = serde_json::from_value::<DebounceSpec>(value.clone())
    {
        key_expression(&spec.key, "/debounce/key", refs, report);
    }
    if let Some(Value::Array(hooks)) = json.get("hooks") {
        hook_rules(hooks, report);
    }
}

/// Each hook: a name of its own, a secret's variable, templates that parse and read
/// the delivery (`inputs.body`, `inputs.headers`) only.
fn hook_rules(hooks: &[Value], report: &mut Reporter<'_>) {
    let mut names = BTreeSet::new();
    let delivery: BTreeSet<String> = ["body", "headers"].map(String::from).into();
    let refs = Refs {
        inputs: &delivery,
        earlier: &BTreeSet::new(),
        all: &BTreeSet::new(),
        own: None,
        here: None,
        places: &BTreeMap::new(),
        has_prev: false,
        in_tool: false,
    };
    for (i, hook) in hooks.iter().enumerate() {
        let pointer = format!("/hooks/{i}");
        if let Some(Value::String(name)) = hook.get("name")
            && !names.insert(name.clone())
        {
            report.at_value(
                &format!("{pointer}/name"),
                format!("hook name {name:?} is used twice"),
            );
        }
        if let Some(Value::String(env)) = hook.get("secret_env")
            && env.trim().is_empty()
        {
            report.at_value(
                &format!("{pointer}/secret_env"),
                "name the environment variable that holds the secret",
            );
        }
        if let Some(mapping) = hook.get("inputs") {
            templates_in(mapping, &format!("{pointer}/inputs"), &refs, report);
        }
    }
}

fn key_expression(source: &str, pointer: &str, refs: &Refs<'_>, report: &mut Reporter<'_>) {
    match Expression::parse(source) {
        Ok(expression) => {
            let found = expression.references();
            if !found.steps.is_empty() || found.prev || !found.env.is_empty() {
                report.at_value(
                    pointer,
                    "a key is computed when the run starts: it may read inputs only",
                );
            } else {
                check_references(found, pointer, refs, report);
            }
        }
        Err(e) => report.at_value(pointer, format!("the key expression does not parse: {e}")),
    }
}

/// Each schedule: a timing that parses, limits in range, a name of its own when there
/// are several, and inputs the workflow declares (with the declared types).
fn schedule_rules(schedules: &[Value], declared: Option<&Value>, report: &mut Reporter<'_>) {
    let mut names = BTreeSet::new();
    for (i, schedule) in schedules.iter().enumerate() {
        let pointer = format!("/schedules/{i}");
        // A value of the wrong shape is the schema's to report.
        let Ok(spec) = serde_json::from_value::<ScheduleSpec>(schedule.clone()) else {
            continue;
        };
        for (field, message) in spec.problems() {
            let at = format!("{pointer}/{field}");
            if schedule.get(field).is_some() {
                report.at_value(&at, message);
            } else {
                report.at_value(&pointer, message);
            }
        }
        match &spec.name {
            None if schedules.len() > 1 => report.at_value(
                &pointer,
                "a file with several schedules names each (`name:`)",
            ),
            Some(name) if !names.insert(name.clone()) => report.at_value(
                &format!("{pointer}/name"),
                format!("schedule name {name:?} is used twice"),
            ),
            _ => {}
        }
        for (input, value) in &spec.inputs {
            let at = format!("{pointer}/inputs/{}", escape(input));
            match declared.and_then(|d| d.get(input)) {
                None => report.at_key(&at, format!("input {input:?} is not declared in `inputs`")),
                Some(Value::Object(spec)) => {
                    let kind = spec
                        .get("type")
                        .and_then(|t| serde_json::from_value::<InputType>(t.clone()).ok())
                        .unwrap_or_default();
                    if let Err(problem) = fits(kind, value) {
                        report.at_value(&at, format!("input {input:?}: {problem}"));
                    }
                }
                Some(_) => {}
            }
        }
    }
}

/// Secret and personal inputs: an input is one or the other, personal data needs a
/// `subject`, and the subject is made of inputs only (it is rendered when the run
/// starts, before any step), none of them secret.
fn data_protection(json: &Value, inputs: &BTreeSet<String>, report: &mut Reporter<'_>) {
    let declared = match json.get("inputs") {
        Some(Value::Object(declared)) => declared.clone(),
        _ => Map::new(),
    };
    let flag = |spec: &Value, name: &str| spec.get(name).and_then(Value::as_bool) == Some(true);
    let mut personal = None;
    for (name, spec) in &declared {
        if flag(spec, "secret") && flag(spec, "personal") {
            report.at_value(
                &format!("/inputs/{}/personal", escape(name)),
                "an input is either `secret` or `personal`, not both: a secret is never \
                 shown, personal data is shown until its subject is forgotten"
                    .to_string(),
            );
        }
        if flag(spec, "personal") && personal.is_none() {
            personal = Some(name.clone());
        }
    }
    let subject = json.get("subject");
    if let (Some(name), None) = (&personal, subject) {
        report.at_value(
            &format!("/inputs/{}/personal", escape(name)),
            format!(
                "input `{name}` is personal, so the workflow needs a `subject:` saying whose \
                 data it is (for example `subject: \"customer:${{{{ inputs.customer_id }}}}\"`)"
            ),
        );
    }
    let Some(Value::String(text)) = subject else {
        return;
    };
    let template = match Template::parse(text) {
        Ok(template) => template,
        Err(e) => return report.at_offset("/subject", text, e.offset, e.message),
    };
    let found = template.references();
    if !found.steps.is_empty() || found.any_step || found.prev || !found.env.is_empty() {
        report.at_value(
            "/subject",
            "the subject is rendered when the run starts, from its inputs only: it cannot \
             refer to steps, `prev` or `env`"
                .to_string(),
        );
    }
    for input in &found.inputs {
        if !inputs.contains(input) {
            report.at_value(
                "/subject",
                format!("`inputs.{input}` is not a declared input"),
            );
        } else if declared.get(input).is_some_and(|spec| flag(spec, "secret")) {
            report.at_value(
                "/subject",
                format!("`inputs.{input}` is secret and cannot name a subject"),
            );
        }
    }
}

/// Each declared input's `default` has the input's type (a run given no value gets it
/// as it is).
fn defaults_fit(declared: Option<&Value>, pointer: &str, report: &mut Reporter<'_>) {
    let Some(Value::Object(declared)) = declared else {
        return;
    };
    for (name, spec) in declared {
        let Some(default) = spec.get("default") else {
            continue;
        };
        let kind = match spec.get("type") {
            None => InputType::default(),
            Some(kind) => match serde_json::from_value::<InputType>(kind.clone()) {
                Ok(kind) => kind,
                // The schema reports an unknown type.
                Err(_) => continue,
            },
        };
        if let Err(problem) = fits(kind, default) {
            report.at_value(
                &format!("{pointer}/{}/default", escape(name)),
                format!("the default does not have the input's type: {problem}"),
            );
        }
    }
}

/// What the expressions of one place may refer to.
struct Refs<'a> {
    inputs: &'a BTreeSet<String>,
    earlier: &'a BTreeSet<String>,
    all: &'a BTreeSet<String>,
    own: Option<&'a str>,
    /// Where the step whose expressions these are is, when it is one.
    here: Option<&'a str>,
    /// Where each step is, by id.
    places: &'a BTreeMap<&'a str, &'a str>,
    has_prev: bool,
    /// A declared tool's body: it sees its own inputs and nothing of the run.
    in_tool: bool,
}

/// Fields of a step that are not templates: names, code, nested steps, policies.
const NOT_TEMPLATES: [&str; 14] = [
    "id",
    "type",
    "name",
    "description",
    "if",
    "condition",
    "script",
    "query",
    "compensate",
    "if_true",
    "if_false",
    "branches",
    "retry",
    "error_handlers",
];

fn step_expressions(site: &StepSite<'_>, refs: &Refs<'_>, report: &mut Reporter<'_>) {
    for field in ["if", "condition"] {
        if let Some(Value::String(text)) = site.step.get(field) {
            let pointer = format!("{}/{field}", site.pointer);
            match Expression::parse_condition(text) {
                Ok(expr) => check_references(expr.references(), &pointer, refs, report),
                Err(e) => report.at_offset(&pointer, text, e.offset, e.message),
            }
        }
    }
    let body = without(site.step, &[&NOT_TEMPLATES[..], &AS_WRITTEN[..]].concat());
    templates_in(&body, &site.pointer, refs, report);
    as_written(site.step, &site.pointer, report);
}

/// Fields the engine uses as they are written, never rendered: the interpreter, an
/// agent's capabilities and hint, approvers, a connection name, a sub-workflow. A
/// template there would reach the run as its own text.
const AS_WRITTEN: [&str; 6] = [
    "shell",
    "capabilities",
    "agent_hint",
    "approvers",
    "connection",
    "workflow",
];

/// Refuse templates and `$` references in the [`AS_WRITTEN`] fields of `object`.
fn as_written(object: &Map<String, Value>, pointer: &str, report: &mut Reporter<'_>) {
    for field in AS_WRITTEN {
        let at = format!("{pointer}/{field}");
        let texts: Vec<(String, &str)> = match object.get(field) {
            Some(Value::String(text)) => vec![(at, text.as_str())],
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .filter_map(|(i, item)| item.as_str().map(|text| (format!("{at}/{i}"), text)))
                .collect(),
            _ => Vec::new(),
        };
        for (at, text) in texts {
            if !Template::parse(text).is_ok_and(|t| t.is_literal()) {
                report.at_value(
                    &at,
                    format!(
                        "`{field}` is used as written: templates and `$` references are not \
                         rendered in it"
                    ),
                );
            }
        }
    }
}

fn without(object: &Map<String, Value>, fields: &[&str]) -> Value {
    Value::Object(
        object
            .iter()
            .filter(|(k, _)| !fields.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    )
}

/// Parse every string under `value` as a template and check what it refers to.
fn templates_in(value: &Value, pointer: &str, refs: &Refs<'_>, report: &mut Reporter<'_>) {
    match value {
        Value::String(text) => match Template::parse(text) {
            Ok(template) => check_references(&template.references(), pointer, refs, report),
            Err(e) => report.at_offset(pointer, text, e.offset, e.message),
        },
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                templates_in(item, &format!("{pointer}/{i}"), refs, report);
            }
        }
        Value::Object(map) => {
            for (k, v) in map {
                templates_in(v, &format!("{pointer}/{}", escape(k)), refs, report);
            }
        }
        _ => {}
    }
}

fn check_references(found: &References, pointer: &str, refs: &Refs<'_>, report: &mut Reporter<'_>) {
    for input in &found.inputs {
        if !refs.inputs.contains(input) {
            let declared = if refs.inputs.is_empty() {
                "none are declared".to_string()
            } else {
                format!(
                    "declared: {}",
                    refs.inputs.iter().cloned().collect::<Vec<_>>().join(", ")
                )
            };
            report.at_value(pointer, format!("unknown input `{input}` ({declared})"));
        }
    }
    let tool_sees = "a declared tool sees only its own `inputs`: pass what it needs as an \
                     input of the tool step";
    for step in &found.steps {
        if refs.earlier.contains(step) {
            continue;
        }
        let message = if refs.in_tool {
            format!("refers to step `{step}`: {tool_sees}")
        } else if refs.own == Some(step.as_str()) {
            format!(
                "step `{step}` refers to itself: a step can only use the outputs of steps that ran before it"
            )
        } else if let (Some(here), Some(there)) = (refs.here, refs.places.get(step.as_str()))
            && here.starts_with(&format!("{there}/"))
        {
            format!(
                "refers to step `{step}`, which contains this one: it has not finished while this step runs"
            )
        } else if refs.all.contains(step) {
            format!(
                "refers to step `{step}`, which has not run at this point (it comes later, or in another branch)"
            )
        } else {
            format!("unknown step `{step}`")
        };
        report.at_value(pointer, message);
    }
    if found.prev && refs.in_tool {
        report.at_value(pointer, format!("`prev` is used: {tool_sees}"));
    } else if found.prev && !refs.has_prev {
        report.at_value(pointer, "`prev` is used, but no step runs before this one");
    }
}

fn unique_ids(sites: &[StepSite<'_>], report: &mut Reporter<'_>) {
    let mut first: BTreeMap<&str, &str> = BTreeMap::new();
    for site in sites {
        let Some(id) = site.id else { continue };
        match first.get(id) {
            Some(at) => {
                let line = report.map.value(&format!("{at}/id")).line;
                report.at_value(
                    &format!("{}/id", site.pointer),
                    format!("duplicate step id `{id}` (first used on line {line})"),
                );
            }
            None => {
                first.insert(id, &site.pointer);
            }
        }
    }
}

/// The built-ins and the file's `tools:` (a file may declare a tool of the same name
/// as a registry tool: its own declaration is the one its steps call).
fn declared_tools(json: &Value, builtins: &[&str], report: &mut Reporter<'_>) -> BTreeSet<String> {
    let mut names: BTreeSet<String> = builtins.iter().map(|s| s.to_string()).collect();
    let Some(Value::Array(tools)) = json.get("tools") else {
        return names;
    };
    for (i, tool) in tools.iter().enumerate() {
        let Some(name) = tool.get("name").and_then(Value::as_str) else {
            continue;
        };
        let at = format!("/tools/{i}/name");
        if builtins.contains(&name) {
            report.at_value(
                &at,
                format!("`{name}` is a built-in tool; choose another name"),
            );
        } else if !names.insert(name.to_string()) {
            report.at_value(&at, format!("duplicate tool name `{name}`"));
        }
        if let Value::Object(body) = tool {
            no_templates_in_text(body, &format!("/tools/{i}"), report);
        }
    }
    names
}

fn step_rules(
    site: &StepSite<'_>,
    tools: &BTreeSet<String>,
    file: &Path,
    report: &mut Reporter<'_>,
) {
    let step = site.step;
    let at = |field: &str| format!("{}/{}", site.pointer, escape(field));
    let kind = step
        .get("type")
        .and_then(Value::as_str)
        .or_else(|| step.get("tool").map(|_| "tool"));
    match kind {
        Some("tool") => {
            if let Some(tool) = step.get("tool").and_then(Value::as_str)
                && !tools.contains(tool)
            {
                report.at_value(&at("tool"), unknown_tool(tool, tools));
            }
        }
        Some("shell") => {
            let command = step.contains_key("command");
            let script = step.contains_key("script");
            if command == script {
                report.at_value(
                    &site.pointer,
                    "a shell step needs exactly one of `command` (a list: program and \
                     arguments) or `script`",
                );
            }
            if step.contains_key("shell") && !script {
                report.at_value(&at("shell"), "`shell` only applies to a `script`");
            }
        }
        Some("workflow") => {
            if let Some(target) = step.get("workflow").and_then(Value::as_str)
                && super::names_a_file(target)
            {
                let base = file.parent().unwrap_or(Path::new("."));
                if !base.join(target).is_file() {
                    report.at_value(
                        &at("workflow"),
                        format!(
                            "no workflow file `{target}` next to this one (looked for {})",
                            base.join(target).display()
                        ),
                    );
                }
            }
        }
        Some("parallel") => {
            if let Some(Value::Array(branches)) = step.get("branches") {
                let mut seen = BTreeSet::new();
                for (b, branch) in branches.iter().enumerate() {
                    if let Some(name) = branch.get("name").and_then(Value::as_str)
                        && !seen.insert(name)
                    {
                        report.at_value(
                            &format!("{}/branches/{b}/name", site.pointer),
                            format!("duplicate branch name `{name}`"),
                        );
                    }
                }
            }
        }
        _ => {}
    }
    if site.compensation {
        compensation_rules(site, kind, report);
    }
    no_templates_in_text(step, &site.pointer, report);
    handler_rules(step, &site.pointer, tools, report);
}

/// The step types a worker performs: the only ones a compensation can be, and the
/// only ones a rate limit can hold back.
const PERFORMED: [&str; 5] = ["tool", "shell", "http", "database", "notify"];

/// A compensation is performed once, as it is, when the run fails: it cannot wait
/// for people or agents, nest steps, or be retried, guarded or compensated.
fn compensation_rules(site: &StepSite<'_>, kind: Option<&str>, report: &mut Reporter<'_>) {
    if let Some(kind) = kind
        && !PERFORMED.contains(&kind)
    {
        report.at_value(
            &format!("{}/type", site.pointer),
            format!(
                "a compensation cannot be a `{kind}` step: it must be one of {}",
                PERFORMED.join(", ")
            ),
        );
    }
    for field in ["if", "retry", "on_error", "error_handlers", "compensate"] {
        if site.step.contains_key(field) {
            report.at_key(
                &format!("{}/{field}", site.pointer),
                format!("`{field}` does not apply to a compensation: it runs once, as it is"),
            );
        }
    }
}

/// Script and SQL text are code: a value spliced into them could change what runs.
/// They are never rendered, so a template or a `$inputs.` / `$steps.` reference in
/// them is refused too: it would reach the shell or the database as its own text
/// (`$inputs.repo` is the shell variable `$inputs` followed by `.repo`).
fn no_templates_in_text(step: &Map<String, Value>, pointer: &str, report: &mut Reporter<'_>) {
    for (field, how) in [
        (
            "script",
            "pass values as `args` (\"$1\", \"$2\"...) or `env` instead",
        ),
        (
            "query",
            "pass values as bind parameters in `params` ($1, $2... / ?1, ?2...) instead",
        ),
    ] {
        let Some(text) = step.get(field).and_then(Value::as_str) else {
            continue;
        };
        let at = format!("{pointer}/{field}");
        if let Some(offset) = text.find("${{") {
            report.at_offset(
                &at,
                text,
                offset,
                format!("templates are not allowed in `{field}` text: {how}"),
            );
        } else if let Some((offset, root)) = shorthand_reference(text) {
            let shell = if field == "script" {
                " (a shell variable followed by `.` is written `${name}.`)"
            } else {
                ""
            };
            report.at_offset(
                &at,
                text,
                offset,
                format!("`{root}` references are not rendered in `{field}` text: {how}{shell}"),
            );
        }
    }
}

/// The first `$inputs.` or `$steps.` in `text` (not after a `$` or `\`), and which.
fn shorthand_reference(text: &str) -> Option<(usize, &'static str)> {
    let bytes = text.as_bytes();
    text.match_indices('$').find_map(|(i, _)| {
        if i > 0 && matches!(bytes[i - 1], b'$' | b'\\') {
            return None;
        }
        ["$inputs.", "$steps."]
            .into_iter()
            .find(|root| text[i..].starts_with(root))
            .map(|root| (i, root))
    })
}

fn handler_rules(
    step: &Map<String, Value>,
    pointer: &str,
    tools: &BTreeSet<String>,
    report: &mut Reporter<'_>,
) {
    let Some(Value::Array(handlers)) = step.get("error_handlers") else {
        return;
    };
    handlers_rules(
        handlers,
        &format!("{pointer}/error_handlers"),
        tools,
        report,
    );
}

/// Rules of a list of error handlers (a step's or the workflow's).
pub(crate) fn handlers_rules(
    handlers: &[Value],
    pointer: &str,
    tools: &BTreeSet<String>,
    report: &mut Reporter<'_>,
) {
    for (i, handler) in handlers.iter().enumerate() {
        let at = format!("{pointer}/{i}");
        if let Value::Object(handler) = handler {
            as_written(handler, &at, report);
        }
        let action = handler.get("action").and_then(Value::as_str);
        let needs = match action {
            Some("fallback") => Some("fallback_tool"),
            Some("refresh_auth") => Some("hook"),
            _ => None,
        };
        if let Some(field) = needs {
            match handler.get(field).and_then(Value::as_str) {
                None => report.at_value(
                    &at,
                    format!(
                        "the `{}` action needs `{field}`",
                        action.unwrap_or_default()
                    ),
                ),
                Some(tool) if !tools.contains(tool) => {
                    report.at_value(&format!("{at}/{field}"), unknown_tool(tool, tools))
                }
                Some(_) => {}
            }
        }
    }
}

fn unknown_tool(tool: &str, tools: &BTreeSet<String>) -> String {
    format!(
        "unknown tool `{tool}` (known: {})",
        tools.iter().cloned().collect::<Vec<_>>().join(", ")
    )
}

#[cfg(test)]
mod tests;
