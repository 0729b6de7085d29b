//! The tools' input schemas: written out for the built-ins, derived from a declared
//! tool's `inputs` (each input's type, description and default; `required` ones
//! required; nothing undeclared).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::domain::run::ErrorClass;
use crate::workflow::model::{InputSpec, InputType, ToolDefinition};

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
        validator: Arc::new(validator),
    }
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
