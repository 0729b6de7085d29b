//! The built-in tools, usable by `tool` steps without a declaration
//! ([`crate::workflow::BUILTIN_TOOLS`]). They touch nothing outside awl, so they are
//! what examples and tests of the executor use, and they have no circuit breaker.
//!
//! | tool | inputs | output |
//! |---|---|---|
//! | `noop` | anything | the inputs, as an object |
//! | `echo` | `message` (required, any value but null) | `{message}` |
//! | `sleep` | `seconds` (a number, 0 to `max_sleep`) | `{slept_ms}`; `timeout` if the attempt's timeout is shorter |
//! | `fail` | `class` (an error class, default `unknown`), `message` | always fails with them (to exercise error handling) |
//!
//! A missing, mistyped or unknown input is a `validation` failure naming it.

use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::domain::run::ErrorClass;
use crate::workflow::BUILTIN_TOOLS;

use super::{Attempt, RunnersConfig, StepFailure, StepSuccess};

pub(super) async fn run(
    config: &RunnersConfig,
    a: &Attempt<'_>,
    tool: &str,
    inputs: &Map<String, Value>,
) -> Result<StepSuccess, StepFailure> {
    match tool {
        "noop" => Ok(StepSuccess::output(Value::Object(inputs.clone()))),
        "echo" => {
            only(tool, inputs, &["message"])?;
            match inputs.get("message") {
                None | Some(Value::Null) => Err(StepFailure::validation(
                    "tool `echo` needs the input `message`",
                )),
                Some(message) => Ok(StepSuccess::output(json!({ "message": message }))),
            }
        }
        "sleep" => {
            only(tool, inputs, &["seconds"])?;
            let duration = sleep_duration(inputs.get("seconds"), config.max_sleep)?;
            if let Some(limit) = a.timeout
                && limit < duration
            {
                tokio::time::sleep(limit).await;
                return Err(StepFailure::new(
                    ErrorClass::Timeout,
                    format!("tool `sleep` for {duration:?} timed out after {limit:?}"),
                ));
            }
            tokio::time::sleep(duration).await;
            Ok(StepSuccess::output(
                json!({ "slept_ms": u64::try_from(duration.as_millis()).unwrap_or(u64::MAX) }),
            ))
        }
        "fail" => {
            only(tool, inputs, &["class", "message"])?;
            let class = match inputs.get("class") {
                None | Some(Value::Null) => ErrorClass::Unknown,
                Some(Value::String(name)) => name.parse::<ErrorClass>().map_err(|e| {
                    StepFailure::validation(format!("tool `fail`: input `class`: {e}"))
                })?,
                Some(other) => {
                    return Err(StepFailure::validation(format!(
                        "tool `fail`: input `class` must be a string, not {}",
                        kind(other)
                    )));
                }
            };
            let message = match inputs.get("message") {
                None | Some(Value::Null) => "failed on purpose (tool `fail`)".to_string(),
                Some(Value::String(m)) => m.clone(),
                Some(other) => other.to_string(),
            };
            Err(StepFailure::new(class, message))
        }
        other => Err(StepFailure::validation(format!(
            "unknown built-in tool `{other}` (built-in tools: {})",
            BUILTIN_TOOLS.join(", ")
        ))),
    }
}

/// Refuse inputs the tool does not take (a typo would otherwise be silently ignored).
fn only(tool: &str, inputs: &Map<String, Value>, allowed: &[&str]) -> Result<(), StepFailure> {
    match inputs.keys().find(|k| !allowed.contains(&k.as_str())) {
        None => Ok(()),
        Some(unknown) => Err(StepFailure::validation(format!(
            "tool `{tool}` has no input `{unknown}` (it takes: {})",
            allowed.join(", ")
        ))),
    }
}

fn sleep_duration(seconds: Option<&Value>, max: Duration) -> Result<Duration, StepFailure> {
    let Some(value) = seconds else {
        return Err(StepFailure::validation(
            "tool `sleep` needs the input `seconds`",
        ));
    };
    let Some(secs) = value.as_f64() else {
        return Err(StepFailure::validation(format!(
            "tool `sleep`: input `seconds` must be a number, not {}",
            kind(value)
        )));
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(StepFailure::validation(format!(
            "tool `sleep`: input `seconds` must be 0 or more, not {secs}"
        )));
    }
    if secs > max.as_secs_f64() {
        return Err(StepFailure::validation(format!(
            "tool `sleep`: input `seconds` is {secs}, over the limit of {} s",
            max.as_secs_f64()
        )));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests;
