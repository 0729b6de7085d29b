use serde_json::json;

use super::*;
use crate::domain::ids::RunId;
use crate::runners::{ExternalTools, RunnersConfig};
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

const SERVERS: &str = r#"
mcp_servers:
  - name: github
    url: https://mcp.example.com/mcp
    bearer_token_env: GITHUB_TOKEN
    timeout_seconds: 30
    cost_usd: 0.001
    refresh_seconds: 60
  - name: files
    command: [npx, -y, "@modelcontextprotocol/server-filesystem", /tmp]
    env_from: [FILES_ROOT]
"#;

#[test]
fn mcp_servers_are_read_beside_or_instead_of_tools_and_start_nothing_when_loaded() {
    let registry = registry_with(&[("servers.yaml", SERVERS), ("words.yaml", WORDS)]).unwrap();
    assert_eq!(registry.mcp_servers(), vec!["files", "github"]);
    assert!(registry.get("word_count").is_some());
    assert!(
        registry.names().iter().all(|n| !n.contains("__")),
        "no MCP tool before discovery: {:?}",
        registry.names()
    );
    let file = std::path::Path::new("servers.yaml");
    let read = check_tools(file, SERVERS).unwrap();
    assert!(read.tools.is_empty());
    let github = &read.mcp_servers[0];
    assert_eq!(github.url.as_deref(), Some("https://mcp.example.com/mcp"));
    assert_eq!(github.bearer_token_env.as_deref(), Some("GITHUB_TOKEN"));
    assert_eq!(
        (
            github.timeout_seconds,
            github.cost_usd,
            github.refresh_seconds
        ),
        (30, 0.001, 60)
    );
    let files = &read.mcp_servers[1];
    assert_eq!(files.command[0], "npx");
    assert_eq!(files.env_from, vec!["FILES_ROOT"]);
    assert_eq!(
        (files.timeout_seconds, files.cost_usd, files.refresh_seconds),
        (60, 0.0, 300),
        "the defaults"
    );
}

#[test]
fn bad_mcp_server_declarations_say_what_and_where() {
    let cases = [
        (
            "mcp_servers:\n  - name: gh\n    url: https://x.example/mcp\n    bearer_token: T\n",
            "4:5",
            "unknown field `bearer_token` (did you mean `bearer_token_env`?)",
        ),
        (
            "mcp_servers:\n  - name: my.server\n    command: [srv]\n",
            "2:11",
            "does not match the pattern",
        ),
        (
            "mcp_servers:\n  - name: gh\n",
            "2:5",
            "needs `command` (a process speaking MCP on stdio) or `url`",
        ),
        (
            "mcp_servers:\n  - name: gh\n    command: [srv]\n    url: https://x.example/mcp\n",
            "4:5",
            "not both",
        ),
        (
            "mcp_servers:\n  - name: gh\n    url: https://x.example/mcp\n    env_from: [A]\n",
            "4:5",
            "`env_from` is for stdio servers",
        ),
        (
            "mcp_servers:\n  - name: gh\n    command: [srv]\n    bearer_token_env: T\n",
            "4:5",
            "`bearer_token_env` is for HTTP servers",
        ),
        (
            "mcp_servers:\n  - name: gh\n    url: http://mcp.example.com/mcp\n    bearer_token_env: T\n",
            "3:10",
            "a bearer token is sent over `https://` only",
        ),
        (
            "mcp_servers:\n  - name: gh\n    url: ftp://x.example/mcp\n",
            "3:10",
            "does not match the pattern",
        ),
        (
            "mcp_servers:\n  - name: gh\n    command: [srv]\n    env_from: [NOT-A-NAME]\n",
            "4:16",
            "does not match the pattern",
        ),
        ("mcp_servers:\n  - name: gh\n    command: []\n", "3:14", ""),
        (
            "mcp_servers:\n  - name: gh\n    command: [srv]\n    timeout_seconds: 0\n",
            "4:22",
            "",
        ),
        (
            "mcp_servers:\n  - name: gh\n    command: [srv]\n  - name: gh\n    command: [srv2]\n",
            "4:11",
            "MCP server `gh` is declared twice in this file",
        ),
        (
            "mcp_server:\n  - name: gh\n    command: [srv]\n",
            "1:1",
            "unknown field `mcp_server` (did you mean `mcp_servers`?)",
        ),
    ];
    for (text, at, expected) in cases {
        let Err(problems) = check_tools(std::path::Path::new("s.yaml"), text) else {
            panic!("refused: {text}");
        };
        let shown = problems.to_string();
        assert!(
            shown.contains(&format!("s.yaml:{at}")) && shown.contains(expected),
            "{text}\n-> {shown}"
        );
    }
    // A bearer token in clear text to this machine is fine.
    for url in [
        "http://127.0.0.1:8080/mcp",
        "http://localhost/mcp",
        "http://[::1]:9/mcp",
    ] {
        let text = format!("mcp_servers:\n  - name: gh\n    url: {url}\n    bearer_token_env: T\n");
        check_tools(std::path::Path::new("s.yaml"), &text).unwrap_or_else(|e| panic!("{url}: {e}"));
    }
}

#[test]
fn an_mcp_server_declared_in_two_files_is_refused_at_the_second() {
    let one = "mcp_servers:\n  - name: gh\n    command: [srv]\n";
    let Err(RegistryError::Invalid(problems)) = registry_with(&[("a.yaml", one), ("b.yaml", one)])
    else {
        panic!("refused");
    };
    let text = problems.to_string();
    assert!(
        text.contains("b.yaml") && text.contains("MCP server `gh` is already declared in"),
        "{text}"
    );
}

use crate::domain::run::ErrorClass;

#[tokio::test]
async fn workflows_see_declared_tools_as_declarations_and_step_calls_reach_only_mcp_servers() {
    let servers = "mcp_servers:\n  - {name: gh, command: [\"/nonexistent/mcp-server\"]}\n";
    let registry = registry_with(&[("words.yaml", WORDS), ("servers.yaml", servers)]).unwrap();
    let known = registry.known_tools();
    assert_eq!(known.declared.keys().collect::<Vec<_>>(), ["word_count"]);
    assert_eq!(
        known.declared["word_count"].header.cost_usd,
        Some(0.002),
        "the declaration itself, to be copied into a workflow version"
    );
    assert!(known.external.is_empty(), "no server was listed yet");

    let attempt = crate::runners::Attempt {
        run_id: RunId::new(),
        step_id: "s",
        attempt: 1,
        idempotency_key: "k",
        timeout: Some(Duration::from_secs(5)),
        base_dir: std::path::Path::new("."),
        mask: &NO_SECRETS,
    };
    let performer: &dyn ExternalTools = &registry;
    // A directory tool is performed from the workflow version's copy, never here.
    let not_mcp = performer
        .call(&attempt, "word_count", &serde_json::Map::new())
        .await
        .unwrap_err();
    assert_eq!(not_mcp.class, ErrorClass::Dependency, "{not_mcp}");
    assert!(
        not_mcp.message.contains("(its MCP servers: gh)"),
        "{not_mcp}"
    );
    // A server that cannot be started fails like a process that died: `dependency`,
    // which handlers may retry.
    let down = performer
        .call(&attempt, "gh__search", &serde_json::Map::new())
        .await
        .unwrap_err();
    assert_eq!(down.class, ErrorClass::Dependency, "{down}");
    assert!(
        down.message.contains("MCP server `gh`")
            && down.message.contains("/nonexistent/mcp-server"),
        "{down}"
    );
}
