//! A mined pattern as a workflow file: one step per call, in order; an argument that
//! took the same value in every successful execution is written as that constant, one
//! whose value came from an earlier call's output (in every execution) as a template
//! over that step's output, and one that varied as an input of the workflow.
//!
//! A call of a tool awl performs itself (a built-in) is a `tool` step; a call a
//! workflow step made (shell, http, database, a sub-workflow) is that kind of step
//! again; any other is an `agent` step asking an agent that has the tool (capability `tool:NAME`) to call it
//! with those arguments, so the learned workflow runs wherever such an agent pulls
//! work. Arguments missing from some executions are left out (they were optional).
//!
//! The file is YAML (block style, strings quoted as JSON strings) and is checked by the
//! same validation as `awl validate` before it is proposed.

use std::fmt::Write as _;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::domain::learning::{Pattern, list_item, signature};
use crate::workflow::BUILTIN_TOOLS;

/// The name of the workflow learned from `pattern` in `scope`: readable, and unique to
/// the scope and sequence.
pub fn workflow_name(scope: &str, tools: &[String]) -> String {
    let mut slug = String::new();
    for tool in tools {
        if !slug.is_empty() {
            slug.push('-');
        }
        slug.push_str(&slugify(tool, '-'));
    }
    let slug: String = slug.chars().take(40).collect();
    let slug = slug.trim_end_matches('-');
    let digest = Sha256::digest(format!("{scope}\n{}", signature(tools)).as_bytes());
    let short = hex::encode(&digest[..4]);
    format!("learned-{slug}-{short}")
}

fn slugify(text: &str, sep: char) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with(sep) && !out.is_empty() {
            out.push(sep);
        }
    }
    let out = out.trim_end_matches(sep).to_string();
    if out.is_empty() { "x".into() } else { out }
}

/// The definition (as JSON) of the workflow learned from `pattern`.
pub fn definition(name: &str, version: &str, scope: &str, pattern: &Pattern) -> Map<String, Value> {
    let ids: Vec<String> = pattern
        .tools
        .iter()
        .enumerate()
        .map(|(i, tool)| format!("s{}_{}", i + 1, slugify(tool, '_')))
        .collect();
    let mut inputs = Map::new();
    let mut steps = Vec::new();
    for (i, tool) in pattern.tools.iter().enumerate() {
        let mut args = Map::new();
        let empty = Default::default();
        for (key, stat) in pattern.args.get(i).unwrap_or(&empty) {
            if !stat.always {
                continue;
            }
            let value = if let Some(flow) = pattern.steady_flow(i, key) {
                Value::String(format!(
                    "${{{{ steps.{}.outputs{} }}}}",
                    ids[flow.from],
                    cel_path(&flow.path)
                ))
            } else if stat.constant {
                stat.value.clone()
            } else {
                let input = unique(&mut inputs, &format!("{}_{}", ids[i], slugify(key, '_')));
                inputs.insert(input.clone(), input_spec(tool, key, &stat.examples));
                Value::String(format!("${{{{ inputs.{input} }}}}"))
            };
            args.insert(key.clone(), value);
        }
        steps.push(step(&ids[i], tool, args));
    }
    let mut out = Map::new();
    out.insert("name".into(), json!(name));
    out.insert("version".into(), json!(version));
    out.insert(
        "description".into(),
        // No counts here: they grow with every execution, and a file that changed with
        // them would be proposed anew each time (the counts are the proposal's evidence).
        json!(format!(
            "Learned from repeated successful runs of {} in {scope}.",
            signature(&pattern.tools),
        )),
    );
    if !inputs.is_empty() {
        out.insert("inputs".into(), Value::Object(inputs));
    }
    out.insert("steps".into(), Value::Array(steps));
    out
}

fn unique(taken: &mut Map<String, Value>, wanted: &str) -> String {
    let mut name = wanted.to_string();
    let mut n = 2;
    while taken.contains_key(&name) {
        name = format!("{wanted}_{n}");
        n += 1;
    }
    name
}

fn input_spec(tool: &str, key: &str, examples: &[Value]) -> Value {
    let kind =
        match examples.first() {
            Some(Value::Number(n)) if examples.iter().all(|e| e.as_i64().is_some()) => {
                if n.is_i64() { "integer" } else { "number" }
            }
            Some(Value::Number(_)) => "number",
            Some(Value::Bool(_)) => "boolean",
            Some(Value::Array(_)) => "array",
            Some(Value::Object(_)) => "object",
            _ => "string",
        };
    let shown: Vec<String> = examples.iter().take(3).map(Value::to_string).collect();
    json!({
        "type": kind,
        "required": true,
        "description": format!("`{key}` of {tool}; it varied (e.g. {})", shown.join(", ")),
    })
}

/// `hits.0.id` as `.hits[0].id`.
fn cel_path(path: &str) -> String {
    let mut out = String::new();
    for part in path.split('.').filter(|p| !p.is_empty()) {
        if part.chars().all(|c| c.is_ascii_digit()) {
            let _ = write!(out, "[{part}]");
        } else {
            let _ = write!(out, ".{part}");
        }
    }
    out
}

fn step(id: &str, tool: &str, args: Map<String, Value>) -> Value {
    if let Some(native) = native_step(id, tool, &args) {
        return native;
    }
    if BUILTIN_TOOLS.contains(&tool) {
        let mut step = Map::new();
        step.insert("id".into(), json!(id));
        step.insert("tool".into(), json!(tool));
        if !args.is_empty() {
            step.insert("inputs".into(), Value::Object(args));
        }
        return Value::Object(step);
    }
    let mut prompt =
        format!("Call the tool `{tool}` once and answer with what it returned, as JSON.");
    if !args.is_empty() {
        prompt.push_str(" Its arguments:");
        for (key, value) in &args {
            let shown = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let _ = write!(prompt, "\n- {key}: {shown}");
        }
    }
    json!({
        "id": id,
        "type": "agent",
        "prompt": prompt,
        "capabilities": [format!("tool:{tool}")],
    })
}

/// A call a workflow step made (`shell`, `http`, `database`, `workflow:NAME`) as that
/// same kind of step, its list arguments put back together from their items.
fn native_step(id: &str, tool: &str, args: &Map<String, Value>) -> Option<Value> {
    let mut step = Map::new();
    step.insert("id".into(), json!(id));
    let args = with_lists(args);
    if let Some(workflow) = tool.strip_prefix("workflow:") {
        step.insert("type".into(), json!("workflow"));
        step.insert("workflow".into(), json!(workflow));
        if !args.is_empty() {
            step.insert("inputs".into(), Value::Object(args));
        }
        return Some(Value::Object(step));
    }
    let fields: &[&str] = match tool {
        "shell" => &["command", "script", "args", "working_dir"],
        "http" => &["method", "url", "body"],
        "database" => &["connection", "query", "params"],
        _ => return None,
    };
    step.insert("type".into(), json!(tool));
    for (key, value) in args {
        if fields.contains(&key.as_str()) {
            step.insert(key, value);
        }
    }
    Some(Value::Object(step))
}

/// Arguments with `name[i]` items gathered into the list `name`, in item order.
fn with_lists(args: &Map<String, Value>) -> Map<String, Value> {
    let mut lists: std::collections::BTreeMap<String, Vec<(usize, Value)>> = Default::default();
    let mut out = Map::new();
    for (key, value) in args {
        match list_item(key) {
            Some((name, i)) => lists
                .entry(name.to_string())
                .or_default()
                .push((i, value.clone())),
            None => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    for (name, mut items) in lists {
        items.sort_by_key(|(i, _)| *i);
        out.insert(
            name,
            Value::Array(items.into_iter().map(|(_, v)| v).collect()),
        );
    }
    out
}

/// The workflow as a YAML file, with a header saying where it came from.
pub fn to_yaml(definition: &Value, header: &[String]) -> String {
    let mut out = String::new();
    for line in header {
        let _ = writeln!(out, "# {line}");
    }
    if let Value::Object(map) = definition {
        // The usual order of a workflow file.
        let order = ["name", "version", "description", "inputs", "steps"];
        let mut keys: Vec<&String> = map.keys().collect();
        let rank = |k: &str| order.iter().position(|o| *o == k).unwrap_or(order.len());
        keys.sort_by_key(|k| (rank(k), (*k).clone()));
        for key in keys {
            emit_entry(&mut out, 0, key, &map[key.as_str()]);
        }
    }
    out
}

fn emit_entry(out: &mut String, indent: usize, key: &str, value: &Value) {
    let pad = " ".repeat(indent);
    match value {
        Value::Object(map) if !map.is_empty() => {
            let _ = writeln!(out, "{pad}{}:", yaml_key(key));
            for (k, v) in map {
                emit_entry(out, indent + 2, k, v);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            let _ = writeln!(out, "{pad}{}:", yaml_key(key));
            for item in items {
                emit_item(out, indent + 2, item);
            }
        }
        scalar => {
            let _ = writeln!(out, "{pad}{}: {}", yaml_key(key), yaml_scalar(scalar));
        }
    }
}

fn emit_item(out: &mut String, indent: usize, value: &Value) {
    let pad = " ".repeat(indent);
    match value {
        Value::Object(map) if !map.is_empty() => {
            let mut first = true;
            for (k, v) in map {
                if first {
                    // `- key: ...` then the rest aligned under the key.
                    let mut entry = String::new();
                    emit_entry(&mut entry, indent + 2, k, v);
                    out.push_str(&pad);
                    out.push_str("- ");
                    out.push_str(&entry[indent + 2..]);
                    first = false;
                } else {
                    emit_entry(out, indent + 2, k, v);
                }
            }
        }
        Value::Array(items) if !items.is_empty() => {
            let _ = writeln!(out, "{pad}-");
            for item in items {
                emit_item(out, indent + 2, item);
            }
        }
        scalar => {
            let _ = writeln!(out, "{pad}- {}", yaml_scalar(scalar));
        }
    }
}

fn yaml_key(key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && !key.starts_with('-');
    if plain {
        key.to_string()
    } else {
        Value::String(key.to_string()).to_string()
    }
}

/// A scalar (or an empty collection) in flow style: JSON's form is valid YAML.
fn yaml_scalar(value: &Value) -> String {
    value.to_string()
}
