//! A run's inputs, checked against the workflow's declaration: required ones present,
//! defaults filled in, types right, nothing undeclared. Values given as text (`awl run
//! --var count=3`) are read as the declared type.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::diagnostics::{Diagnostic, Diagnostics};
use super::model::{InputSpec, InputType};
use super::validate::CheckedWorkflow;
use super::yaml::escape;

/// How the given values arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Given {
    /// JSON values (API, sub-workflow): types must match.
    Json,
    /// Text from the command line: read as the declared type.
    Text,
}

/// One problem with the inputs; `pointer` is where the input is declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputProblem {
    pub pointer: String,
    pub message: String,
}

/// The inputs a run starts with, or every problem with them.
pub fn resolve(
    declared: &BTreeMap<String, InputSpec>,
    given: Map<String, Value>,
    how: Given,
) -> Result<Map<String, Value>, Vec<InputProblem>> {
    let mut problems = Vec::new();
    let mut resolved = Map::new();
    let given_names: Vec<String> = given.keys().cloned().collect();
    for (name, value) in given {
        let Some(spec) = declared.get(&name) else {
            let known: Vec<&str> = declared.keys().map(String::as_str).collect();
            problems.push(InputProblem {
                pointer: "/inputs".into(),
                message: if known.is_empty() {
                    format!("unknown input `{name}`: this workflow takes no inputs")
                } else {
                    format!("unknown input `{name}` (declared: {})", known.join(", "))
                },
            });
            continue;
        };
        let pointer = format!("/inputs/{}", escape(&name));
        match read(spec.kind, value, how) {
            Ok(v) => {
                resolved.insert(name, v);
            }
            Err(message) => problems.push(InputProblem {
                pointer,
                message: format!("input `{name}`: {message}"),
            }),
        }
    }
    for (name, spec) in declared {
        if given_names.contains(name) {
            continue;
        }
        match &spec.default {
            Some(default) => {
                resolved.insert(name.clone(), default.clone());
            }
            None if spec.required => problems.push(InputProblem {
                pointer: format!("/inputs/{}", escape(name)),
                message: format!("input `{name}` is required (give it with --var {name}=VALUE)"),
            }),
            None => {}
        }
    }
    if problems.is_empty() {
        Ok(resolved)
    } else {
        Err(problems)
    }
}

/// [`resolve`] for a checked file, with problems as diagnostics at the declarations.
pub fn resolve_for(
    checked: &CheckedWorkflow,
    file: &std::path::Path,
    given: Map<String, Value>,
    how: Given,
) -> Result<Map<String, Value>, Diagnostics> {
    resolve(&checked.workflow.inputs, given, how).map_err(|problems| {
        Diagnostics(
            problems
                .into_iter()
                .map(|p| Diagnostic {
                    file: file.to_path_buf(),
                    position: checked.source_map.key(&p.pointer),
                    field: super::diagnostics::field_path(&p.pointer),
                    message: p.message,
                })
                .collect(),
        )
        .sorted()
    })
}

fn read(kind: InputType, value: Value, how: Given) -> Result<Value, String> {
    let value = match (how, value) {
        (Given::Text, Value::String(text)) => from_text(kind, &text)?,
        (_, value) => value,
    };
    fits(kind, &value)?;
    Ok(value)
}

/// Whether `value` has the type `kind`; the error says what was expected and got.
pub(crate) fn fits(kind: InputType, value: &Value) -> Result<(), String> {
    let fits = match kind {
        InputType::String => value.is_string(),
        InputType::Integer => value.is_i64() || value.is_u64(),
        InputType::Number => value.is_number(),
        InputType::Boolean => value.is_boolean(),
        InputType::Object => value.is_object(),
        InputType::Array => value.is_array(),
        InputType::Any => true,
    };
    if fits {
        Ok(())
    } else {
        Err(format!("expected {}, got {value}", kind.as_str()))
    }
}

fn from_text(kind: InputType, text: &str) -> Result<Value, String> {
    let bad = |what: &str| format!("{text:?} is not {what}");
    Ok(match kind {
        InputType::String => Value::String(text.to_string()),
        InputType::Integer => Value::from(
            text.trim()
                .parse::<i64>()
                .map_err(|_| bad("a whole number"))?,
        ),
        InputType::Number => {
            let n: f64 = text.trim().parse().map_err(|_| bad("a number"))?;
            serde_json::Number::from_f64(n)
                .map(Value::Number)
                .ok_or_else(|| bad("a finite number"))?
        }
        InputType::Boolean => match text.trim() {
            "true" | "yes" | "1" => Value::Bool(true),
            "false" | "no" | "0" => Value::Bool(false),
            _ => return Err(bad("true or false")),
        },
        InputType::Object | InputType::Array => {
            serde_json::from_str(text).map_err(|e| format!("{text:?} is not JSON: {e}"))?
        }
        InputType::Any => {
            serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
        }
    })
}

#[cfg(test)]
mod tests;
