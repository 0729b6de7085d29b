//! The JSON Schema of workflow files, generated from the types in `model.rs`.
//!
//! awl validates every file against this schema (so the published schema is exactly
//! what awl accepts), and editors can use the committed copy,
//! `workflows/awl-workflow.schema.json`, to check files as they are written (a test
//! fails when that copy is stale; `awl schema` prints the current one).
//!
//! Steps are a tagged union on `type`. A derived `oneOf` would make every mistake in a
//! step read "not valid under any of the schemas"; instead each step type is an
//! `if {type: T} then {...}` branch, so a mistake is reported against the one type the
//! step has, and an unknown type is one `enum` error. A step without `type` but with
//! `tool` is a `tool` step (the older dialect of awl's seeds).

use std::borrow::Cow;

use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::{Map, Value, json};

use super::model::{
    AgentStep, ConditionalStep, DatabaseStep, GateStep, HttpStep, NotifyStep, ParallelStep,
    ShellStep, Step, StepCommon, StepKind, SubWorkflowStep, TOOL_KINDS, ToolDefinition, ToolHeader,
    ToolStep, Workflow,
};

/// The schema's identifier.
pub const SCHEMA_ID: &str = "https://awl.example/schemas/awl-workflow.schema.json";

/// The complete schema of a workflow file.
pub fn workflow_schema() -> Value {
    let generator = SchemaGenerator::new(SchemaSettings::draft2020_12());
    let mut schema = generator.into_root_schema_for::<Workflow>().to_value();
    strip_null(&mut schema);
    enums_of_constants(&mut schema);
    if let Value::Object(root) = &mut schema {
        root.insert("$id".into(), Value::String(SCHEMA_ID.into()));
    }
    schema
}

/// Optional fields are left out, not set to null: drop the `null` schemars adds to
/// every `Option` (an `anyOf` with `{"type": "null"}`, or `"null"` in a type list), so
/// a mistake in an optional field is reported against its one real type.
fn strip_null(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            if let Some(Value::Array(types)) = map.get_mut("type") {
                types.retain(|t| t != "null");
                if types.len() == 1 {
                    let only = types.remove(0);
                    map.insert("type".into(), only);
                }
            }
            if let Some(Value::Array(branches)) = map.get_mut("anyOf") {
                branches.retain(|b| b != &json!({ "type": "null" }));
                if branches.len() == 1 {
                    let only = branches.remove(0);
                    map.remove("anyOf");
                    if let Value::Object(inner) = only {
                        for (k, v) in inner {
                            map.entry(k).or_insert(v);
                        }
                    }
                }
            }
            map.values_mut().for_each(strip_null);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_null),
        _ => {}
    }
}

/// schemars writes an enum with documented variants as a `oneOf` of constants, whose
/// errors read "not valid under any of the schemas". Make it one `enum` of strings
/// (with the variants' docs folded into the description), whose error lists the
/// choices. A `oneOf` of anything else is left as it is.
fn enums_of_constants(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            let constants: Option<Vec<(Value, Option<String>)>> = match map.get("oneOf") {
                Some(Value::Array(branches)) if !branches.is_empty() => branches
                    .iter()
                    .map(|b| {
                        if let Some(Value::Array(values)) = b.get("enum") {
                            return Some(values.iter().map(|v| (v.clone(), None)).collect());
                        }
                        let c = b.get("const")?.clone();
                        let doc = b
                            .get("description")
                            .and_then(Value::as_str)
                            .map(String::from);
                        Some(vec![(c, doc)])
                    })
                    .collect::<Option<Vec<Vec<_>>>>()
                    .map(|groups| groups.into_iter().flatten().collect()),
                _ => None,
            };
            // Only string constants: the `enum` is given `"type": "string"`.
            if let Some(constants) =
                constants.filter(|c| c.iter().all(|(value, _)| value.is_string()))
            {
                map.remove("oneOf");
                let docs: Vec<String> = constants
                    .iter()
                    .filter_map(|(c, d)| {
                        d.as_ref()
                            .map(|d| format!("`{}`: {d}", c.as_str().unwrap_or_default()))
                    })
                    .collect();
                if !docs.is_empty() {
                    let lead = map
                        .get("description")
                        .and_then(Value::as_str)
                        .map(String::from);
                    let text = lead.into_iter().chain(docs).collect::<Vec<_>>().join("\n");
                    map.insert("description".into(), Value::String(text));
                }
                map.insert("type".into(), Value::String("string".into()));
                map.insert(
                    "enum".into(),
                    Value::Array(constants.into_iter().map(|(c, _)| c).collect()),
                );
            }
            map.values_mut().for_each(enums_of_constants);
        }
        Value::Array(items) => items.iter_mut().for_each(enums_of_constants),
        _ => {}
    }
}

/// The schema, as committed: pretty JSON with a final newline.
pub fn workflow_schema_text() -> String {
    let mut text = serde_json::to_string_pretty(&workflow_schema()).unwrap_or_default();
    text.push('\n');
    text
}

fn variant_schemas(generator: &mut SchemaGenerator, names: &[&str]) -> Vec<(String, Schema)> {
    names
        .iter()
        .map(|name| {
            let schema = match *name {
                "tool" => ToolStep::json_schema(generator),
                "shell" => ShellStep::json_schema(generator),
                "http" => HttpStep::json_schema(generator),
                "agent" => AgentStep::json_schema(generator),
                "gate" => GateStep::json_schema(generator),
                "conditional" => ConditionalStep::json_schema(generator),
                "parallel" => ParallelStep::json_schema(generator),
                "database" => DatabaseStep::json_schema(generator),
                "notify" => NotifyStep::json_schema(generator),
                _ => SubWorkflowStep::json_schema(generator),
            };
            (name.to_string(), schema)
        })
        .collect()
}

fn object_part<'a>(schema: &'a Schema, key: &str) -> Option<&'a Value> {
    schema.as_object().and_then(|o| o.get(key))
}

fn properties(schema: &Schema) -> Map<String, Value> {
    match object_part(schema, "properties") {
        Some(Value::Object(p)) => p.clone(),
        _ => Map::new(),
    }
}

fn required(schema: &Schema) -> Vec<Value> {
    match object_part(schema, "required") {
        Some(Value::Array(r)) => r.clone(),
        _ => Vec::new(),
    }
}

/// A tagged union: the `common` fields plus, per `type`, that variant's fields, with
/// no others allowed. `default_type` is the type of an object without `type`.
fn tagged_union(
    description: &str,
    common: &Schema,
    variants: Vec<(String, Schema)>,
    default_type: Option<&str>,
) -> Schema {
    let common_properties = properties(common);
    let common_required = required(common);
    let names: Vec<Value> = variants
        .iter()
        .map(|(n, _)| Value::String(n.clone()))
        .collect();
    let type_property = json!({
        "description": "What the step does.",
        "enum": names,
    });
    let mut branches = Vec::new();
    for (name, schema) in &variants {
        let mut all = common_properties.clone();
        all.insert("type".into(), json!({ "const": name }));
        all.extend(properties(schema));
        let mut all_required = common_required.clone();
        all_required.extend(required(schema));
        let is_this = json!({ "properties": { "type": { "const": name } }, "required": ["type"] });
        let condition = if default_type == Some(name.as_str()) {
            json!({ "anyOf": [is_this, { "not": { "required": ["type"] } }] })
        } else {
            is_this
        };
        branches.push(json!({
            "if": condition,
            "then": {
                "properties": all,
                "required": all_required,
                "additionalProperties": false,
            },
        }));
    }
    let mut top = common_properties;
    top.insert("type".into(), type_property);
    // Without a default, an object with no `type` would match no branch and so be
    // checked for nothing but the common fields.
    let mut common_required = common_required;
    if default_type.is_none() {
        common_required.push(json!("type"));
    }
    Schema::from(
        json!({
            "description": description,
            "type": "object",
            "properties": top,
            "required": common_required,
            "allOf": branches,
        })
        .as_object()
        .cloned()
        .unwrap_or_default(),
    )
}

impl JsonSchema for Step {
    fn schema_name() -> Cow<'static, str> {
        "Step".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let common = StepCommon::json_schema(generator);
        let variants = variant_schemas(generator, &StepKind::TYPES);
        tagged_union(
            "One step. `type` selects what it does; a step with `tool` and no `type` is a \
             `tool` step.",
            &common,
            variants,
            Some("tool"),
        )
    }
}

impl JsonSchema for ToolDefinition {
    fn schema_name() -> Cow<'static, str> {
        "ToolDefinition".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let header = ToolHeader::json_schema(generator);
        let variants = variant_schemas(generator, &TOOL_KINDS);
        tagged_union(
            "A tool declared in this file: a reusable step body. Its templates read the \
             calling step's `inputs` as `inputs`.",
            &header,
            variants,
            None,
        )
    }
}

#[cfg(test)]
mod tests;
