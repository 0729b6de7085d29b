//! A run's flow control: its priority and the concurrency slots it must take (the
//! workflow's `concurrency`, its key evaluated over the inputs), decided when it
//! starts; the key a debounced start is known by; and the rate buckets each attempt
//! of a step takes a token of. Pure: the same definition and inputs give the same
//! slots and buckets on every server.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::domain::rate::RateBucket;
use crate::domain::run::{Flow, FlowSlot};
use crate::expr::{Expression, Scope};
use crate::workflow::flow::MAX_PRIORITY;
use crate::workflow::model::{Step, StepKind, Workflow};

/// Key values longer than this are named by their SHA-256 in scope names.
const MAX_KEY_TEXT: usize = 128;

/// The scope of the slots a whole workflow's runs share.
pub fn workflow_scope(workflow: &str) -> String {
    format!("workflow:{workflow}")
}

/// The scope of the slots the runs with one value of a workflow's key share.
fn key_scope(workflow: &str, value: &str) -> String {
    format!("{}{KEY_SCOPE}{value}", workflow_scope(workflow))
}

/// What separates a workflow's scope from its key's value in a key scope (a
/// workflow's name has no `:`).
const KEY_SCOPE: &str = ":key:";

/// Of a run's slots, the scope of its key (whose holdings weigh its fair share).
pub fn key_slot(slots: &[FlowSlot]) -> Option<&FlowSlot> {
    slots.iter().find(|s| s.scope.contains(KEY_SCOPE))
}

/// The flow a run of `definition` with `inputs` starts under (`priority` given by the
/// start, else the workflow's). Slots come in the order they are taken: the
/// workflow's, then its key's (a scope sorts before its keys' scopes).
pub fn flow(
    definition: &Workflow,
    inputs: &Map<String, Value>,
    priority: Option<i32>,
) -> Result<Flow, String> {
    let priority = priority.or(definition.priority).unwrap_or(0);
    if priority.abs() > MAX_PRIORITY {
        return Err(format!(
            "priority {priority} is out of range (-{MAX_PRIORITY} to {MAX_PRIORITY})"
        ));
    }
    let mut slots = Vec::new();
    if let Some(spec) = &definition.concurrency {
        let scope = workflow_scope(&definition.name);
        if let Some(limit) = spec.limit {
            slots.push(FlowSlot {
                scope: scope.clone(),
                limit,
            });
        }
        if let (Some(key), Some(per_key)) = (&spec.key, spec.per_key) {
            let value = key_value(key, inputs).map_err(|e| format!("concurrency key: {e}"))?;
            slots.push(FlowSlot {
                scope: key_scope(&definition.name, &value),
                limit: per_key,
            });
        }
    }
    Ok(Flow { priority, slots })
}

/// The text of `source` evaluated over `inputs`: a string as it is, anything else as
/// JSON; a long value by its SHA-256.
pub fn key_value(source: &str, inputs: &Map<String, Value>) -> Result<String, String> {
    let scope = Scope {
        inputs: inputs.clone(),
        ..Scope::default()
    };
    let value = Expression::parse(source)
        .map_err(|e| format!("`{source}`: {e}"))?
        .evaluate(&scope)
        .map_err(|e| format!("`{source}`: {e}"))?;
    let text = match value {
        Value::String(s) => s,
        other => other.to_string(),
    };
    if text.len() > MAX_KEY_TEXT {
        return Ok(format!("sha256:{:x}", Sha256::digest(text.as_bytes())));
    }
    Ok(text)
}

/// The scope of a rate limit's bucket, or of one value of its key.
fn rate_scope(name: &str, value: Option<&str>) -> String {
    match value {
        Some(value) => format!("rate:{name}{KEY_SCOPE}{value}"),
        None => format!("rate:{name}"),
    }
}

/// The rate buckets an attempt of `step` takes a token of: the limit it names
/// (`rate_limit:`) and every limit listing its tool, each key evaluated over the
/// run's inputs. Sorted by scope, each once (the order the store locks them in).
pub fn rate_buckets(
    definition: &Workflow,
    step: &Step,
    inputs: &Map<String, Value>,
) -> Result<Vec<RateBucket>, String> {
    let tool = match &step.kind {
        StepKind::Tool(t) => Some(t.tool.as_str()),
        _ => None,
    };
    let mut buckets = Vec::new();
    for limit in &definition.rate_limits {
        let named = step.common.rate_limit.as_deref() == Some(limit.name.as_str());
        let by_tool = tool.is_some_and(|t| limit.tools.iter().any(|l| l == t));
        if !(named || by_tool) {
            continue;
        }
        let value = limit
            .key
            .as_deref()
            .map(|key| key_value(key, inputs))
            .transpose()
            .map_err(|e| format!("rate limit {} key: {e}", limit.name))?;
        buckets.push(RateBucket {
            scope: rate_scope(&limit.name, value.as_deref()),
            per_second: limit.per_second,
            burst: limit.burst(),
        });
    }
    buckets.sort_by(|a, b| a.scope.cmp(&b.scope));
    buckets.dedup_by(|a, b| a.scope == b.scope);
    Ok(buckets)
}
