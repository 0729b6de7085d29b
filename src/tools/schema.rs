//! The tools' input schemas: written out for the built-ins, derived from a declared
//! tool's `inputs` (each input's type, description and default; `required` ones
//! required; nothing undeclared), or as an MCP server lists them.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::domain::run::ErrorClass;
use crate::workflow::model::{InputSpec, InputType, McpServerSpec, ToolDefinition};

use super::{DEFAULT_TIMEOUT, Source, Tool};

pub(super) fn builtins() -> Vec<Tool> {
    let classes: Vec<&str> = ErrorClass::ALL.iter().map(|c| c.as_str()).collect();
    vec![
        builtin(
            "noop",
            "Does nothing and returns its arguments.",
            json!({"type": "object"}),
        ),
        builtin(
            "echo",
            "Returns the message it is given.",
            object(
                json!({"message": {"description": "Any value but null."}}),
                &["message"],
            ),
        ),
        builtin(
            "sleep",
            "Waits for a number of seconds.",
            object(
                json!({"seconds": {"type": "number", "minimum": 0, "description": "How long to wait."}}),
                &["seconds"],
            ),
        ),
        builtin(
            "fail",
            "Always fails, with the error class and message given (to exercise error handling).",
            object(
                json!({
                    "class": {"type": "string", "enum": classes},
                    "message": {"type": "string"},
                }),
                &[],
            ),
        ),
    ]
}

fn builtin(name: &str, description: &str, input_schema: Value) -> Tool {
    tool(
        name,
        description,
        input_schema,
        DEFAULT_TIMEOUT,
        0.0,
        None,
        Source::Builtin,
    )
}

/// A declared tool as the registry keeps it.
pub(super) fn declared(file: &Path, definition: ToolDefinition) -> Tool {
    let header = &definition.header;
    let input_schema = of_inputs(&header.inputs);
    let timeout = header
        .timeout_seconds
        .map_or(DEFAULT_TIMEOUT, Duration::from_secs);
    tool(
        &header.name.clone(),
        &header.description.clone().unwrap_or_default(),
        input_schema,
        timeout,
        header.cost_usd.unwrap_or(0.0),
        Some(Arc::new(definition)),
        Source::Declared {
            file: file.to_path_buf(),
        },
    )
}

fn tool(
    name: &str,
    description: &str,
    input_schema: Value,
    timeout: Duration,
    cost_usd: f64,
    definition: Option<Arc<ToolDefinition>>,
    source: Source,
) -> Tool {
    // The schemas here are awl's own (built-ins) or built from checked input
    // declarations: one that does not compile is a bug.
    let validator = jsonschema::validator_for(&input_schema)
        .unwrap_or_else(|e| panic!("the input schema of tool `{name}` does not compile: {e}"));
    Tool {
        name: name.to_string(),
        description: description.to_string(),
        input_schema,
        timeout,
        cost_usd,
        source,
        definition,
        remote_name: None,
        validator: Arc::new(validator),
    }
}

/// A tool listed by MCP server `server` (`spec`), registered as `name`, or why it
/// cannot be (its input schema does not compile: the server's, not awl's).
pub(super) fn mcp(
    spec: &McpServerSpec,
    name: String,
    listed: &rmcp::model::Tool,
) -> Result<Tool, String> {
    let input_schema = Value::Object((*listed.input_schema).clone());
    let validator = jsonschema::validator_for(&input_schema)
        .map_err(|e| format!("its input schema does not compile: {e}"))?;
    let description = listed
        .description
        .as_deref()
        .or(listed.title.as_deref())
        .unwrap_or_default();
    Ok(Tool {
        name,
        description: description.to_string(),
        input_schema,
        timeout: Duration::from_secs(spec.timeout_seconds),
        cost_usd: spec.cost_usd,
        source: Source::Mcp {
            server: spec.name.clone(),
        },
        definition: None,
        remote_name: Some(listed.name.to_string()),
        validator: Arc::new(validator),
    })
}

fn object(properties: Value, required: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

/// The JSON Schema of a declared tool's `inputs`.
pub(super) fn of_inputs(inputs: &std::collections::BTreeMap<String, InputSpec>) -> Value {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for (name, spec) in inputs {
        let mut property = Map::new();
        if let Some(kind) = json_type(spec.kind) {
            property.insert("type".into(), json!(kind));
        }
        if let Some(description) = &spec.description {
            property.insert("description".into(), json!(description));
        }
        if let Some(default) = &spec.default {
            property.insert("default".into(), default.clone());
        }
        if spec.required && spec.default.is_none() {
            required.push(name.as_str());
        }
        properties.insert(name.clone(), Value::Object(property));
    }
    object(Value::Object(properties), &required)
}

fn json_type(kind: InputType) -> Option<&'static str> {
    match kind {
        InputType::String => Some("string"),
        InputType::Integer => Some("integer"),
        InputType::Number => Some("number"),
        InputType::Boolean => Some("boolean"),
        InputType::Object => Some("object"),
        InputType::Array => Some("array"),
        InputType::Any => None,
    }
}
