use serde_json::json;

use super::*;
use crate::domain::ids::RunId;
use crate::runners::RunnersConfig;
use crate::vault::mask::NO_SECRETS;

const WORDS: &str = r#"
tools:
  - name: word_count
    description: Count the words of a text.
    type: shell
    timeout_seconds: 5
    cost_usd: 0.002
    inputs:
      text: {type: string, required: true, description: The text to count.}
      unit: {type: string, default: words}
    script: 'printf "{\"%s\": %s}" "$1" "$(printf "%s" "$2" | wc -w)"'
    args: ["${{ inputs.unit }}", "${{ inputs.text }}"]
"#;

fn registry_with(files: &[(&str, &str)]) -> Result<Registry, RegistryError> {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    Registry::load(dir.path(), Runners::new(RunnersConfig::default()))
}

fn ctx() -> CallContext<'static> {
    CallContext {
        run_id: RunId::new(),
        call_key: "call-1",
        mask: &NO_SECRETS,
    }
}

#[test]
fn declared_tools_join_the_built_ins_with_a_schema_from_their_inputs() {
    let registry =
        registry_with(&[("words.yaml", WORDS), ("notes.txt", "not a tools file")]).unwrap();
    assert_eq!(
        registry.names(),
        vec!["echo", "fail", "noop", "sleep", "word_count"]
    );
    let tool = registry.get("word_count").unwrap();
    assert_eq!(tool.timeout, Duration::from_secs(5));
    assert_eq!(tool.cost_usd, 0.002);
    assert_eq!(
        tool.input_schema,
        json!({
            "type": "object",
            "properties": {
                "text": {"type": "string", "description": "The text to count."},
                "unit": {"type": "string", "default": "words"},
            },
            "required": ["text"],
            "additionalProperties": false,
        })
    );
    assert!(matches!(&tool.source, Source::Declared { file } if file.ends_with("words.yaml")));
    assert_eq!(registry.get("echo").unwrap().source, Source::Builtin);
}

#[tokio::test]
async fn a_declared_tool_runs_with_its_arguments_as_data() {
    let registry = registry_with(&[("words.yaml", WORDS)]).unwrap();
    let out = registry
        .call(
            "word_count",
            &json!({"text": "one two; rm -rf ~ three"}),
            ctx(),
        )
        .await
        .unwrap();
    assert_eq!(out.output["json"], json!({"words": 6}), "{}", out.output);
}

#[tokio::test]
async fn arguments_the_schema_refuses_fail_as_validation_before_anything_runs() {
    let registry = registry_with(&[("words.yaml", WORDS)]).unwrap();
    for (args, expected) in [
        (json!({}), "\"text\" is a required property"),
        (json!({"text": 3}), "/text: 3 is not of type \"string\""),
        (
            json!({"text": "a", "extra": 1}),
            "Additional properties are not allowed",
        ),
        (json!(["a"]), "takes an object of named arguments"),
    ] {
        let err = registry.call("word_count", &args, ctx()).await.unwrap_err();
        assert_eq!(err.class, ErrorClass::Validation, "{args}");
        assert!(err.message.contains(expected), "{args}: {}", err.message);
    }
    let err = registry.call("nope", &json!({}), ctx()).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::Validation);
    assert!(
        err.message.contains("unknown tool `nope`"),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn built_ins_run_and_report_their_error_class() {
    let registry = Registry::builtins(Runners::new(RunnersConfig::default()));
    let out = registry
        .call("echo", &json!({"message": "hi"}), ctx())
        .await
        .unwrap();
    assert_eq!(out.output, json!({"message": "hi"}));
    let err = registry
        .call(
            "fail",
            &json!({"class": "rate_limit", "message": "slow down"}),
            ctx(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.class, ErrorClass::RateLimit);
}

#[tokio::test]
async fn a_call_past_its_timeout_fails_as_timeout() {
    let slow = r#"
tools:
  - name: slow
    type: shell
    timeout_seconds: 1
    command: [sleep, "5"]
"#;
    let registry = registry_with(&[("slow.yaml", slow)]).unwrap();
    let started = std::time::Instant::now();
    let err = registry.call("slow", &json!({}), ctx()).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::Timeout, "{}", err.message);
    assert!(started.elapsed() < Duration::from_secs(4));
}

#[test]
fn bad_tools_files_say_what_and_where() {
    let typo = "tools:\n  - name: x\n    type: shell\n    comand: [ls]\n";
    let clash = "tools:\n  - name: echo\n    type: shell\n    command: [echo]\n";
    let twice = "tools:\n  - name: word_count\n    type: shell\n    command: [wc]\n";
    let Err(RegistryError::Invalid(problems)) = registry_with(&[
        ("a.yaml", WORDS),
        ("b.yaml", typo),
        ("c.yaml", clash),
        ("d.yaml", twice),
    ]) else {
        panic!("the files are refused");
    };
    let text = problems.to_string();
    assert!(
        text.contains("b.yaml:4:5") && text.contains("did you mean `command`"),
        "{text}"
    );
    assert!(
        text.contains("c.yaml") && text.contains("`echo` is a built-in tool"),
        "{text}"
    );
    assert!(
        text.contains("d.yaml") && text.contains("tool `word_count` is already declared in"),
        "{text}"
    );
    let Err(RegistryError::Directory { .. }) = Registry::load(
        Path::new("/nonexistent/awl-tools"),
        Runners::new(RunnersConfig::default()),
    ) else {
        panic!("a missing directory is an error");
    };
}

use crate::domain::run::ErrorClass;
