use super::*;

/// The committed copy is what editors read: it must be the schema awl uses.
#[test]
fn the_committed_schema_is_current() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/workflows/awl-workflow.schema.json"
    );
    let current = workflow_schema_text();
    if std::env::var_os("AWL_UPDATE_SCHEMA").is_some() {
        std::fs::write(path, &current).expect("write the schema");
    }
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == current,
        "{path} is stale: run `AWL_UPDATE_SCHEMA=1 cargo test --lib schema` \
         (or `cargo run -- schema > workflows/awl-workflow.schema.json`) and commit it"
    );
}

#[test]
fn the_schema_is_a_valid_draft_2020_12_schema() {
    let schema = workflow_schema();
    jsonschema::draft202012::meta::validate(&schema).expect("a valid schema");
    assert!(jsonschema::validator_for(&schema).is_ok());
}

/// An `anyOf` or `oneOf` error says only "not valid under any of the schemas";
/// the schema has none outside the `if` of the step union, whose errors are never
/// reported, so every problem is reported against one definite schema.
#[test]
fn no_alternatives_outside_the_union_conditions() {
    fn walk(value: &Value, path: &str, found: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    if key == "if" && path.ends_with(|c: char| c.is_ascii_digit()) {
                        continue;
                    }
                    if key == "anyOf" || key == "oneOf" {
                        found.push(format!("{path}/{key}"));
                    }
                    walk(child, &format!("{path}/{key}"), found);
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    walk(item, &format!("{path}/{i}"), found);
                }
            }
            _ => {}
        }
    }
    let mut found = Vec::new();
    walk(&workflow_schema(), "", &mut found);
    assert_eq!(found, Vec::<String>::new());
}

#[test]
fn documented_enums_become_one_enum_with_their_docs() {
    let schema = workflow_schema();
    let backoff = &schema["$defs"]["Backoff"];
    assert_eq!(
        backoff,
        &json!({
            "type": "string",
            "enum": ["exponential", "linear", "constant"],
            "description": "`exponential`: base, 2 x base, 4 x base...\n\
                            `linear`: base, 2 x base, 3 x base...\n\
                            `constant`: base every time.",
        })
    );
    let mut mixed = json!({"oneOf": [{"const": "a"}, {"const": 1}]});
    enums_of_constants(&mut mixed);
    assert_eq!(mixed, json!({"oneOf": [{"const": "a"}, {"const": 1}]}));
}

#[test]
fn optional_fields_are_not_nullable() {
    let text = workflow_schema_text();
    assert!(!text.contains("\"null\""), "no null types left");
}

#[test]
fn steps_are_a_union_on_type() {
    let schema = workflow_schema();
    let step = &schema["$defs"]["Step"];
    let types: Vec<&str> = step["properties"]["type"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(types, StepKind::TYPES);
    let shell = &step["allOf"][1]["then"];
    assert_eq!(shell["additionalProperties"], false);
    assert!(shell["properties"]["script"].is_object());
    assert!(shell["properties"]["id"].is_object(), "common fields too");
    assert!(shell["properties"]["tool"].is_null(), "not another type's");
    // A step without `type` is a tool step: `type` is not required.
    assert_eq!(step["required"], json!(["id"]));
}

#[test]
fn a_declared_tool_needs_a_type() {
    let schema = workflow_schema();
    let tool = &schema["$defs"]["ToolDefinition"];
    assert_eq!(tool["required"], json!(["name", "type"]));
    let types: Vec<&str> = tool["properties"]["type"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(types, TOOL_KINDS);
}
