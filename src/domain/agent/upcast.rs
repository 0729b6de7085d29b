//! `agent.registered` version 1 -> version 2.
//!
//! Version 1 was written by an earlier agent registry:
//!
//! ```json
//! {"agent_id": "a1", "capabilities": "rust, python", "repo": "org/app",
//!  "branch": "main", "registered_at": "2024-05-01T10:00:00Z"}
//! ```
//!
//! Capabilities were one comma-separated string, the workspace was two flat optional
//! fields and the time was `registered_at`. Version 2 is the shape of
//! [`AgentEvent::Registered`](super::AgentEvent::Registered):
//!
//! ```json
//! {"agent_id": "a1", "capabilities": ["python", "rust"],
//!  "workspace": {"repository": "org/app", "branch": "main"}, "at": "2024-05-01T10:00:00Z"}
//! ```
//!
//! A missing or empty `repo` means no workspace (a `branch` without a repository
//! cannot be placed anywhere, so it is dropped); an empty `branch` means none.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Map, Value};

use crate::domain::ids::AgentId;
use crate::domain::workspace::Capabilities;
use crate::log::Upcaster;

/// Registered in [`crate::domain::upcasters::all`].
pub const REGISTERED_V1_TO_V2: Upcaster = Upcaster {
    event_type: "agent.registered",
    from_version: 1,
    upcast: registered_v1_to_v2,
};

fn registered_v1_to_v2(v1: Value) -> Result<Value, String> {
    let Value::Object(fields) = v1 else {
        return Err(format!("the payload is not a JSON object: {v1}"));
    };
    let agent_id = required_string(&fields, "agent_id")?;
    AgentId::try_from(agent_id).map_err(|e| format!("agent_id: {e}"))?;
    let capabilities = required_string(&fields, "capabilities")?;
    let registered_at = required_string(&fields, "registered_at")?;
    let at = DateTime::parse_from_rfc3339(registered_at)
        .map_err(|e| format!("registered_at {registered_at:?} is not an RFC 3339 time: {e}"))?
        .with_timezone(&Utc);
    let repo = optional_string(&fields, "repo")?;
    let branch = optional_string(&fields, "branch")?;

    let capabilities: Vec<Value> = Capabilities::new(capabilities.split(','))
        .iter()
        .map(|c| Value::String(c.to_string()))
        .collect();
    let workspace = match repo {
        None => Value::Null,
        Some(repository) => {
            let mut workspace = Map::new();
            workspace.insert("repository".into(), Value::String(repository.into()));
            if let Some(branch) = branch {
                workspace.insert("branch".into(), Value::String(branch.into()));
            }
            Value::Object(workspace)
        }
    };

    let mut v2 = Map::new();
    v2.insert("agent_id".into(), Value::String(agent_id.into()));
    v2.insert("capabilities".into(), Value::Array(capabilities));
    v2.insert("workspace".into(), workspace);
    v2.insert(
        "at".into(),
        Value::String(at.to_rfc3339_opts(SecondsFormat::AutoSi, true)),
    );
    Ok(Value::Object(v2))
}

fn required_string<'a>(fields: &'a Map<String, Value>, name: &str) -> Result<&'a str, String> {
    match fields.get(name) {
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(format!("{name} must be a string, found {other}")),
        None => Err(format!("{name} is missing")),
    }
}

/// A string field that may be absent, null or empty (all meaning "none").
fn optional_string<'a>(
    fields: &'a Map<String, Value>,
    name: &str,
) -> Result<Option<&'a str>, String> {
    match fields.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(format!("{name} must be a string or null, found {other}")),
    }
}
