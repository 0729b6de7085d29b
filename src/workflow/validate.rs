//! Checking a workflow file: every problem at once, each where it is.
//!
//! Two passes over the JSON form of the file, both of which always run:
//!
//! 1. the JSON Schema (`schema.rs`): unknown fields, unknown step types, missing and
//!    mistyped fields, out-of-range numbers;
//! 2. the rules a schema cannot say (`rules.rs`): unique step ids, references to inputs
//!    and steps that exist and run earlier, expressions that parse, no templates in
//!    script or SQL text or in fields used as written, tools and sub-workflow files
//!    that exist, defaults of the declared type, compensations that can be performed.
//!
//! Only a file with no problem at all is turned into a [`Workflow`].

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::OnceLock;

use jsonschema::error::ValidationErrorKind;
use schemars::SchemaGenerator;
use schemars::generate::SchemaSettings;
use serde_json::Value;

use super::diagnostics::{Diagnostic, Diagnostics, Reporter};
use super::model::{StepKind, ToolsFile, Workflow};
use super::schema::workflow_schema;
use super::yaml::{self, SourceMap};
use super::{KnownTools, builtin_tools, rules};

/// A workflow file that passed every check.
#[derive(Debug, Clone)]
pub struct CheckedWorkflow {
    pub workflow: Workflow,
    /// The file as JSON (what is registered in the log as the definition).
    pub json: Value,
    pub source_map: SourceMap,
}

/// Check `source` (the text of `file`) and return the workflow, or every problem. Its
/// `tool` steps and handlers may name the built-ins and the file's own tools.
pub fn check(file: &Path, source: &str) -> Result<CheckedWorkflow, Diagnostics> {
    check_with(file, source, &KnownTools::default())
}

/// [`check`], where `tool` steps and handlers may also name the tools of `known` (the
/// registry in use). Checking does not copy a directory tool into the file: that is
/// registration's (`crate::definitions`).
pub fn check_with(
    file: &Path,
    source: &str,
    known: &KnownTools,
) -> Result<CheckedWorkflow, Diagnostics> {
    let (mut json, map) = parse_yaml(file, source)?;
    let mut report = Reporter::new(file, source, &map);
    schema_problems(workflow_file(), &json, &mut report);
    rules::check(&json, &builtin_tools(), &known.names(), file, &mut report);
    if !report.found.is_empty() {
        return Err(Diagnostics(report.found).sorted());
    }
    default_step_types(&mut json);
    match serde_json::from_value::<Workflow>(json.clone()) {
        Ok(workflow) => Ok(CheckedWorkflow {
            workflow,
            json,
            source_map: map,
        }),
        // The schema admits only what the types accept; reaching this is a bug in awl,
        // reported as a problem rather than a panic.
        Err(e) => Err(Diagnostics(vec![Diagnostic {
            file: file.to_path_buf(),
            position: Default::default(),
            field: String::new(),
            message: format!("the file passed validation but could not be read: {e}"),
        }])),
    }
}

/// Check a tools file (`tools/*.yaml`: a `tools:` list of tool declarations, as in a
/// workflow file, and an `mcp_servers:` list) and return what it declares, or every
/// problem, each where it is.
pub fn check_tools(file: &Path, source: &str) -> Result<ToolsFile, Diagnostics> {
    let (json, map) = parse_yaml(file, source)?;
    let mut report = Reporter::new(file, source, &map);
    schema_problems(tools_file(), &json, &mut report);
    if report.found.is_empty() {
        rules::check(&json, &builtin_tools(), &BTreeSet::new(), file, &mut report);
        mcp_server_rules(&json, &mut report);
    }
    if !report.found.is_empty() {
        return Err(Diagnostics(report.found).sorted());
    }
    serde_json::from_value::<ToolsFile>(json).map_err(|e| {
        Diagnostics(vec![Diagnostic {
            file: file.to_path_buf(),
            position: Default::default(),
            field: String::new(),
            message: format!("the file passed validation but could not be read: {e}"),
        }])
    })
}

/// What the schema of `mcp_servers` cannot say: a server is either a process
/// (`command`, `env_from`) or an HTTP endpoint (`url`, `bearer_token_env`); names are
/// unique; a bearer token never travels in clear text beyond this machine.
fn mcp_server_rules(json: &Value, report: &mut Reporter<'_>) {
    let Some(Value::Array(servers)) = json.get("mcp_servers") else {
        return;
    };
    let mut seen = BTreeSet::new();
    for (i, server) in servers.iter().enumerate() {
        let at = format!("/mcp_servers/{i}");
        let has = |key: &str| server.get(key).is_some();
        if let Some(name) = server.get("name").and_then(Value::as_str)
            && !seen.insert(name.to_string())
        {
            report.at_value(
                &format!("{at}/name"),
                format!("MCP server `{name}` is declared twice in this file"),
            );
        }
        match (has("command"), has("url")) {
            (false, false) => report.at_value(
                &at,
                "an MCP server needs `command` (a process speaking MCP on stdio) or `url` \
                 (a streamable HTTP endpoint)",
            ),
            (true, true) => report.at_key(
                &format!("{at}/url"),
                "give `command` (stdio) or `url` (streamable HTTP), not both",
            ),
            _ => {}
        }
        if has("env_from") && !has("command") {
            report.at_key(
                &format!("{at}/env_from"),
                "`env_from` is for stdio servers (`command`); an HTTP server gets \
                 `bearer_token_env`",
            );
        }
        if has("bearer_token_env") && !has("url") {
            report.at_key(
                &format!("{at}/bearer_token_env"),
                "`bearer_token_env` is for HTTP servers (`url`); a stdio server gets \
                 `env_from`",
            );
        }
        if has("bearer_token_env")
            && let Some(url) = server.get("url").and_then(Value::as_str)
            && url.starts_with("http://")
            && !is_loopback(url)
        {
            report.at_value(
                &format!("{at}/url"),
                "a bearer token is sent over `https://` only (or to this machine: \
                 localhost, 127.0.0.1, [::1])",
            );
        }
    }
}

/// Whether an `http://` URL names this machine.
fn is_loopback(url: &str) -> bool {
    let rest = url.trim_start_matches("http://");
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit('@').next().unwrap_or_default();
    let host = if let Some(v6) = host.strip_prefix('[') {
        v6.split(']').next().unwrap_or_default()
    } else {
        host.split(':').next().unwrap_or_default()
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// A JSON Schema that YAML files of one kind are checked against, compiled once.
pub struct FileSchema {
    schema: Value,
    validator: jsonschema::Validator,
}

impl FileSchema {
    /// Compile `schema` (awl's own: a failure is a bug, and panics at start-up).
    pub fn new(mut schema: Value) -> Self {
        mark_integers(&mut schema);
        let validator = jsonschema::options()
            .with_keyword(WHOLE_NUMBER, |_, _, _| Ok(Box::new(WholeNumber)))
            .build(&schema)
            .unwrap_or_else(|e| panic!("awl's own schema does not compile: {e}"));
        Self { schema, validator }
    }
}

/// Check a YAML file of another kind than a workflow (an agent definition) against
/// `schema`: every problem where it is, then the file read as `T`, with its JSON and
/// positions for the rules a schema cannot say.
pub fn check_file<T: serde::de::DeserializeOwned>(
    file: &Path,
    source: &str,
    schema: &FileSchema,
) -> Result<(T, Value, SourceMap), Diagnostics> {
    let (json, map) = parse_yaml(file, source)?;
    let mut report = Reporter::new(file, source, &map);
    schema_problems(schema, &json, &mut report);
    if !report.found.is_empty() {
        return Err(Diagnostics(report.found).sorted());
    }
    match serde_json::from_value::<T>(json.clone()) {
        Ok(read) => Ok((read, json, map)),
        Err(e) => Err(Diagnostics(vec![Diagnostic {
            file: file.to_path_buf(),
            position: Default::default(),
            field: String::new(),
            message: format!("the file passed validation but could not be read: {e}"),
        }])),
    }
}

/// Where a problem found by a caller of [`check_file`] is: the value at `pointer`.
pub fn problem_at(
    file: &Path,
    source: &str,
    map: &SourceMap,
    pointer: &str,
    message: impl Into<String>,
) -> Diagnostic {
    let mut report = Reporter::new(file, source, map);
    report.at_value(pointer, message);
    report.found.remove(0)
}

/// The YAML of `file` as JSON with the position of every value, or where it is not
/// YAML.
fn parse_yaml(file: &Path, source: &str) -> Result<(Value, SourceMap), Diagnostics> {
    yaml::parse(source).map_err(|e| {
        Diagnostics(vec![Diagnostic {
            file: file.to_path_buf(),
            position: e.position.unwrap_or_default(),
            field: String::new(),
            message: format!("not valid YAML: {}", e.message),
        }])
    })
}

fn workflow_file() -> &'static FileSchema {
    static SCHEMA: OnceLock<FileSchema> = OnceLock::new();
    SCHEMA.get_or_init(|| FileSchema::new(workflow_schema()))
}

/// The schema of a tools file, generated from [`ToolsFile`]. The definitions it
/// shares with workflow files (a tool declaration and everything in it) are taken
/// from the workflow schema as awl publishes it, so the messages and field
/// suggestions are the same in both.
fn tools_file() -> &'static FileSchema {
    static SCHEMA: OnceLock<FileSchema> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let workflow = workflow_schema();
        let generator = SchemaGenerator::new(SchemaSettings::draft2020_12());
        let mut schema = generator.into_root_schema_for::<ToolsFile>().to_value();
        if let (Some(Value::Object(defs)), Some(Value::Object(shared))) =
            (schema.get_mut("$defs"), workflow.get("$defs"))
        {
            for (name, definition) in shared {
                defs.insert(name.clone(), definition.clone());
            }
        }
        FileSchema::new(schema)
    })
}

/// A keyword of awl's own copy of the schema (not the published one): the number is
/// written without a fraction. JSON Schema counts `10.0` as an integer, but the
/// field's Rust type does not take it, so without this a file with
/// `timeout_seconds: 10.0` passed every check and then could not be read.
const WHOLE_NUMBER: &str = "x-awl-whole-number";

struct WholeNumber;

impl<'i> jsonschema::Keyword<'i> for WholeNumber {
    fn validate(&self, instance: &'i Value) -> Result<(), jsonschema::ValidationError<'i>> {
        if self.is_valid(instance) {
            Ok(())
        } else {
            Err(jsonschema::ValidationError::custom(format!(
                "expected a whole number, got {instance}: write it without a fraction"
            )))
        }
    }

    fn is_valid(&self, instance: &'i Value) -> bool {
        !matches!(instance, Value::Number(n) if n.is_f64())
    }
}

/// Add [`WHOLE_NUMBER`] beside every `"type": "integer"`.
fn mark_integers(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            if map.get("type") == Some(&Value::String("integer".into())) {
                map.insert(WHOLE_NUMBER.into(), Value::Bool(true));
            }
            map.values_mut().for_each(mark_integers);
        }
        Value::Array(items) => items.iter_mut().for_each(mark_integers),
        _ => {}
    }
}

/// Translate every schema error into a diagnostic at the right place.
fn schema_problems(schema: &FileSchema, json: &Value, report: &mut Reporter<'_>) {
    for error in schema.validator.iter_errors(json) {
        let pointer = error.instance_path().as_str().to_string();
        let instance = json.pointer(&pointer).unwrap_or(&Value::Null);
        match error.kind() {
            ValidationErrorKind::AdditionalProperties { unexpected } => {
                let allowed = allowed_fields(&schema.schema, error.schema_path().as_str());
                for name in unexpected {
                    let child = format!("{pointer}/{}", yaml::escape(name));
                    report.at_key(&child, unknown_field(name, &allowed));
                }
            }
            ValidationErrorKind::Required { property } => {
                let name = property.as_str().unwrap_or_default();
                // A step with neither `type` nor `tool` is taken for a tool step
                // missing its `tool`: say what it lacks instead.
                let message =
                    if name == "tool" && is_step(&pointer) && instance.get("type").is_none() {
                        format!(
                            "a step needs a `type` (one of {}), or `tool` for a tool step",
                            StepKind::TYPES.join(", ")
                        )
                    } else {
                        format!("missing field `{name}`")
                    };
                report.at_value(&pointer, message);
            }
            ValidationErrorKind::Enum { options } => {
                let choices = options
                    .as_array()
                    .map(|a| a.iter().map(show).collect::<Vec<_>>().join(", "))
                    .unwrap_or_default();
                let message = if pointer.ends_with("/type") && is_step(parent(&pointer)) {
                    format!(
                        "unknown step type {} (expected one of {choices})",
                        show(instance)
                    )
                } else {
                    format!("{} is not one of {choices}", show(instance))
                };
                report.at_value(&pointer, message);
            }
            ValidationErrorKind::Type { kind } => {
                report.at_value(
                    &pointer,
                    format!(
                        "expected {}, got {}",
                        expected_type(kind),
                        type_of(instance)
                    ),
                );
            }
            ValidationErrorKind::Pattern { pattern } => {
                let message = if pointer.ends_with("/id") {
                    format!(
                        "{} is not a valid step id: use letters, digits, `_` and `-`, \
                         starting with a letter or `_` (at most 64)",
                        show(instance)
                    )
                } else {
                    format!("{} does not match the pattern {pattern}", show(instance))
                };
                report.at_value(&pointer, message);
            }
            ValidationErrorKind::Custom { message, .. } => report.at_value(&pointer, message),
            _ => report.at_value(&pointer, error.to_string()),
        }
    }
}

/// The fields allowed where an `additionalProperties` error was raised: the
/// `properties` beside it in the schema.
fn allowed_fields(schema: &Value, schema_path: &str) -> Vec<String> {
    let parent = schema_path
        .strip_suffix("/additionalProperties")
        .unwrap_or(schema_path);
    schema
        .pointer(&format!("{parent}/properties"))
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

fn unknown_field(name: &str, allowed: &[String]) -> String {
    let closest = allowed
        .iter()
        .map(|a| (edit_distance(name, a), a))
        .filter(|(d, a)| *d <= 2.max(a.len() / 3))
        .min_by_key(|(d, _)| *d);
    match closest {
        Some((_, a)) => format!("unknown field `{name}` (did you mean `{a}`?)"),
        None if allowed.is_empty() => format!("unknown field `{name}`"),
        None => format!(
            "unknown field `{name}` (expected one of {})",
            allowed
                .iter()
                .map(|a| format!("`{a}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Levenshtein distance, for "did you mean" (strsim is only a dependency of clap
/// here; two rows of a table are not worth a direct dependency).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb {
                prev
            } else {
                1 + prev.min(row[j]).min(row[j + 1])
            };
            prev = cur;
        }
    }
    row[b.len()]
}

/// Whether `pointer` is a step: an item of a list of steps.
fn is_step(pointer: &str) -> bool {
    if pointer.ends_with("/compensate") {
        return true;
    }
    let Some((list, index)) = pointer.rsplit_once('/') else {
        return false;
    };
    if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
        return false;
    }
    let list_name = list.rsplit('/').next().unwrap_or_default();
    matches!(
        list_name,
        "steps" | "if_true" | "if_false" | "on_success" | "on_failure"
    )
}

fn parent(pointer: &str) -> &str {
    pointer.rsplit_once('/').map_or("", |(p, _)| p)
}

fn show(value: &Value) -> String {
    match value {
        Value::String(s) => format!("`{s}`"),
        other => other.to_string(),
    }
}

fn expected_type(kind: &jsonschema::error::TypeKind) -> String {
    match kind {
        jsonschema::error::TypeKind::Single(t) => article(&t.to_string()),
        jsonschema::error::TypeKind::Multiple(ts) => {
            let names: Vec<String> = ts
                .iter()
                .filter(|t| t.to_string() != "null")
                .map(|t| article(&t.to_string()))
                .collect();
            names.join(" or ")
        }
    }
}

fn article(t: &str) -> String {
    match t {
        "object" => "a mapping".into(),
        "array" => "a list".into(),
        "integer" => "a whole number".into(),
        "null" => "nothing".into(),
        other => format!("a {other}"),
    }
}

fn type_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a number with a fraction",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// A step with `tool` and no `type` is a tool step (the older dialect): say so in
/// the JSON before it becomes a [`Workflow`]. Only steps: a tool's `inputs`, an HTTP
/// body or the outputs may hold any mapping, and are data.
pub(crate) fn default_step_types(json: &mut Value) {
    for pointer in super::step_pointers(json) {
        if let Some(Value::Object(step)) = json.pointer_mut(&pointer)
            && step.contains_key("tool")
            && !step.contains_key("type")
        {
            step.insert("type".into(), Value::String("tool".into()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distances() {
        assert_eq!(edit_distance("comand", "command"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("retry", "retry"), 0);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("héllo", "hello"), 1, "characters, not bytes");
    }

    #[test]
    fn steps_are_recognised_by_their_place() {
        assert!(is_step("/steps/0"));
        assert!(is_step("/steps/3/if_true/1"));
        assert!(is_step("/steps/1/branches/0/steps/2"));
        assert!(is_step("/on_failure/0"));
        assert!(is_step("/steps/2/compensate"));
        assert!(!is_step("/steps"));
        assert!(!is_step("/steps/0/retry"));
        assert!(!is_step("/inputs/steps"));
    }
}
