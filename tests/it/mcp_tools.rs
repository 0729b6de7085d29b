//! Tools discovered from external MCP servers: a server written with the official MCP
//! Python SDK (`tests/mcp/tool_server.py`), run over stdio and over streamable HTTP,
//! discovered into the registry and called through it: names, descriptions and
//! schemas as listed, results, error results, arguments refused before the call, a
//! timeout that leaves the session usable, a server process that died started again,
//! the process killed with the registry, credentials only from awl's environment (a
//! stdio server's cleared environment, the bearer token reaching the HTTP server),
//! servers that cannot be reached as errors naming them, and `awl tools list`.
//!
//! The Python SDK comes from the virtualenv `scripts/test` sets up; its interpreter is
//! named by `AWL_TEST_PYTHON`. Without it these tests fail (they do not skip). No
//! database is needed.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use awl::domain::ids::RunId;
use awl::domain::run::ErrorClass;
use awl::runners::{Runners, RunnersConfig, StepFailure, StepSuccess};
use awl::tools::{CallContext, Registry, RegistryError, Source};
use awl::vault::mask::NO_SECRETS;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::support::within;

pub(crate) const SERVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/tool_server.py");

/// Every tool the server offers, as registered from server `py`.
const PY_TOOLS: [&str; 8] = [
    "py__add",
    "py__call_count",
    "py__env",
    "py__fail",
    "py__files_count",
    "py__shout",
    "py__slow",
    "py__whereami",
];

pub(crate) fn python() -> String {
    std::env::var("AWL_TEST_PYTHON").unwrap_or_else(|_| {
        panic!(
            "AWL_TEST_PYTHON is not set: the MCP tool tests run an MCP server written with the \
             official MCP Python SDK, which scripts/test installs in a virtualenv (target/pyenv) \
             and names in AWL_TEST_PYTHON. Run the tests with scripts/test."
        )
    })
}

fn runners() -> Runners {
    Runners::new(RunnersConfig::default())
}

/// A tools directory holding one file, `mcp.yaml`, with `text`.
fn tools_dir(text: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("mcp.yaml"), text).unwrap();
    dir
}

/// A tools file with one stdio server `py` running the test server, and `extra`
/// lines of its declaration.
fn stdio_server(extra: &str) -> String {
    format!(
        "mcp_servers:\n  - name: py\n    command: [{:?}, {SERVER:?}, stdio]\n{extra}",
        python()
    )
}

async fn discovered(dir: &Path) -> Registry {
    let loaded = Registry::load(dir, runners()).expect("the tools file loads");
    within(60, "discovering the MCP servers", loaded.discover())
        .await
        .unwrap_or_else(|e| panic!("discovery fails: {e}"))
}

async fn call(
    registry: &Registry,
    name: &str,
    arguments: Value,
) -> Result<StepSuccess, StepFailure> {
    let ctx = CallContext {
        run_id: RunId::new(),
        call_key: "mcp-test",
        mask: &NO_SECRETS,
    };
    within(60, name, registry.call(name, &arguments, ctx)).await
}

async fn ok(registry: &Registry, name: &str, arguments: Value) -> Value {
    call(registry, name, arguments.clone())
        .await
        .unwrap_or_else(|e| panic!("{name}({arguments}) fails: {e}"))
        .output
}

async fn calls_so_far(registry: &Registry) -> u64 {
    let out = ok(registry, "py__call_count", json!({})).await;
    out["json"]
        .as_u64()
        .unwrap_or_else(|| panic!("a count: {out}"))
}

/// The test server over streamable HTTP on a free port, killed when dropped.
struct HttpServer {
    url: String,
    _child: tokio::process::Child,
}

impl HttpServer {
    /// Started with `token` as the bearer token it requires, if any.
    async fn start(token: Option<&str>) -> Self {
        let mut command = tokio::process::Command::new(python());
        command
            .args([SERVER, "http", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        if let Some(token) = token {
            command.env("TOOL_SERVER_TOKEN", token);
        }
        let mut child = command.spawn().expect("the HTTP tool server starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = within(60, "the HTTP tool server's address", lines.next_line())
            .await
            .expect("its stdout")
            .expect("a line naming its address");
        let url = first
            .strip_prefix("tool_server: ")
            .unwrap_or_else(|| panic!("not an address: {first}"))
            .to_string();
        Self { url, _child: child }
    }
}

/// Two variables of this process (neither `PATH` nor `HOME`), with their values:
/// tests may not set variables of their own (that is unsound while other threads
/// run), so they pass on ones the process has.
fn two_variables() -> [(String, String); 2] {
    let mut found = std::env::vars().filter(|(name, value)| {
        name != "PATH"
            && name != "HOME"
            && !value.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit())
    });
    let (Some(first), Some(second)) = (found.next(), found.next()) else {
        panic!("the test process needs two environment variables besides PATH and HOME");
    };
    [first, second]
}

fn home() -> String {
    std::env::var("HOME").expect("HOME is set")
}

/// Whether process `pid` has ended (gone, or a zombie waiting to be reaped).
fn ended(pid: u64) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_tools_are_discovered_with_their_schemas_and_called() {
    let [(given, given_value), (withheld, _)] = two_variables();
    let dir = tools_dir(&stdio_server(&format!(
        "    env_from: [{given}]\n    timeout_seconds: 20\n    cost_usd: 0.25\n"
    )));

    // Loading alone starts nothing.
    let loaded = Registry::load(dir.path(), runners()).unwrap();
    assert_eq!(loaded.mcp_servers(), vec!["py"]);
    assert!(loaded.get("py__add").is_none());

    let registry = discovered(dir.path()).await;
    let names = registry.names();
    for name in PY_TOOLS.iter().chain(&["echo", "fail", "noop", "sleep"]) {
        assert!(names.contains(name), "{name} in {names:?}");
    }
    let add = registry.get("py__add").unwrap();
    assert_eq!(add.description, "Add two whole numbers.");
    assert_eq!(add.input_schema["type"], "object");
    assert_eq!(add.input_schema["properties"]["a"]["type"], "integer");
    assert_eq!(add.input_schema["properties"]["b"]["type"], "integer");
    assert_eq!(add.input_schema["required"], json!(["a", "b"]));
    assert_eq!(
        add.source,
        Source::Mcp {
            server: "py".into()
        }
    );
    assert_eq!(add.timeout, Duration::from_secs(20));
    assert_eq!(add.cost_usd, 0.25);
    let shown = serde_json::to_value(add).unwrap();
    assert_eq!(shown["source"], json!({"kind": "mcp", "server": "py"}));
    assert_eq!(add.source.to_string(), "mcp:py");
    // A tool name with a dot becomes a function name.
    assert!(registry.get("py__files_count").is_some());

    // Results: the content, the structured content, and the one text item as JSON.
    let out = ok(&registry, "py__add", json!({"a": 2, "b": 3})).await;
    assert_eq!(
        out["content"],
        json!([{"type": "text", "text": "5"}]),
        "{out}"
    );
    assert_eq!(out["structured"], json!({"result": 5}), "{out}");
    assert_eq!(out["json"], json!(5), "{out}");
    let out = ok(&registry, "py__shout", json!({"text": "hello"})).await;
    assert_eq!(out["content"][0]["text"], "HELLO!", "{out}");
    assert!(out.get("json").is_none(), "not JSON: {out}");
    let out = ok(&registry, "py__files_count", json!({"directory": "."})).await;
    assert_eq!(
        out["json"],
        json!(1),
        "the tools directory holds mcp.yaml: {out}"
    );

    // The process runs in the tools file's directory, with a cleared environment
    // but PATH, HOME and what `env_from` names.
    let out = ok(&registry, "py__whereami", json!({})).await;
    let cwd = PathBuf::from(out["json"]["cwd"].as_str().unwrap());
    assert_eq!(
        cwd.canonicalize().unwrap(),
        dir.path().canonicalize().unwrap()
    );
    let env = |name: &str| {
        let registry = registry.clone();
        let name = name.to_string();
        async move {
            ok(&registry, "py__env", json!({ "name": name })).await["content"][0]["text"]
                .as_str()
                .unwrap()
                .to_string()
        }
    };
    assert_eq!(env("HOME").await, home());
    assert_eq!(env(&given).await, given_value);
    assert_eq!(
        env(&withheld).await,
        "<unset>",
        "{withheld} is not passed on"
    );

    // An error result.
    let err = call(&registry, "py__fail", json!({"message": "boom"}))
        .await
        .unwrap_err();
    assert_eq!(err.class, ErrorClass::Unknown, "{err}");
    assert!(err.message.contains("boom"), "{err}");
    assert!(err.message.contains("py__fail"), "{err}");

    // Arguments the listed schema refuses never reach the server.
    let before = calls_so_far(&registry).await;
    for (arguments, expected) in [
        (
            json!({"a": "x", "b": 1}),
            "/a: \"x\" is not of type \"integer\"",
        ),
        (json!({"a": 1}), "\"b\" is a required property"),
        (json!([1, 2]), "takes an object of named arguments"),
    ] {
        let err = call(&registry, "py__add", arguments.clone())
            .await
            .unwrap_err();
        assert_eq!(err.class, ErrorClass::Validation, "{arguments}: {err}");
        assert!(err.message.contains(expected), "{arguments}: {err}");
    }
    assert_eq!(
        calls_so_far(&registry).await,
        before,
        "no call reached the server"
    );

    let err = call(&registry, "py__nope", json!({})).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::Validation, "{err}");

    // The listing can be asked for again, and gives the same tools.
    let refreshed = within(60, "a refresh", registry.refresh()).await.unwrap();
    assert_eq!(refreshed.names(), registry.names());
    let current = within(60, "the current registry", registry.current()).await;
    assert_eq!(current.names(), registry.names());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_its_timeout_fails_as_timeout_and_the_session_goes_on() {
    let dir = tools_dir(&stdio_server("    timeout_seconds: 1\n"));
    let registry = discovered(dir.path()).await;
    let started = Instant::now();
    let err = call(&registry, "py__slow", json!({"seconds": 10}))
        .await
        .unwrap_err();
    assert_eq!(err.class, ErrorClass::Timeout, "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(err.message.contains("py__slow"), "{err}");
    let out = ok(&registry, "py__add", json!({"a": 1, "b": 1})).await;
    assert_eq!(out["json"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_process_that_died_is_started_again_and_killed_with_the_registry() {
    let dir = tools_dir(&stdio_server(""));
    let registry = discovered(dir.path()).await;
    let first = ok(&registry, "py__whereami", json!({})).await["json"]["pid"]
        .as_u64()
        .unwrap();
    std::process::Command::new("kill")
        .args(["-KILL", &first.to_string()])
        .status()
        .unwrap();
    crate::support::poll(10, async || ended(first).then_some(())).await;
    let second = ok(&registry, "py__whereami", json!({})).await["json"]["pid"]
        .as_u64()
        .unwrap();
    assert_ne!(first, second, "a new process");

    let clone = registry.clone();
    drop(registry);
    assert!(!ended(second), "a clone keeps the server");
    drop(clone);
    let gone = crate::support::poll(10, async || ended(second).then_some(())).await;
    assert!(gone.is_some(), "process {second} outlived the registry");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_tools_are_discovered_and_called_with_the_bearer_token_from_the_environment() {
    // The token is the value of a variable awl has: HOME (see `two_variables`).
    let server = HttpServer::start(Some(&home())).await;
    let dir = tools_dir(&format!(
        "mcp_servers:\n  - name: py\n    url: {}\n    bearer_token_env: HOME\n    timeout_seconds: 1\n",
        server.url
    ));
    let registry = discovered(dir.path()).await;
    for name in PY_TOOLS {
        assert!(
            registry.get(name).is_some(),
            "{name} in {:?}",
            registry.names()
        );
    }
    let shout = registry.get("py__shout").unwrap();
    assert_eq!(
        shout.description,
        "Say a text louder: in capitals, with an exclamation mark."
    );
    assert_eq!(shout.input_schema["properties"]["text"]["type"], "string");
    assert_eq!(shout.input_schema["required"], json!(["text"]));

    let out = ok(&registry, "py__add", json!({"a": 40, "b": 2})).await;
    assert_eq!(out["json"], 42, "{out}");
    assert_eq!(out["structured"], json!({"result": 42}), "{out}");

    let err = call(&registry, "py__fail", json!({"message": "no way"}))
        .await
        .unwrap_err();
    assert_eq!(err.class, ErrorClass::Unknown, "{err}");
    assert!(err.message.contains("no way"), "{err}");

    let before = calls_so_far(&registry).await;
    let err = call(&registry, "py__add", json!({"a": 1.5, "b": 1}))
        .await
        .unwrap_err();
    assert_eq!(err.class, ErrorClass::Validation, "{err}");
    assert_eq!(calls_so_far(&registry).await, before);

    let err = call(&registry, "py__slow", json!({"seconds": 10}))
        .await
        .unwrap_err();
    assert_eq!(err.class, ErrorClass::Timeout, "{err}");
    assert_eq!(
        ok(&registry, "py__add", json!({"a": 1, "b": 2})).await["json"],
        3
    );

    // Another variable's value is the wrong token; an unset variable is no token.
    for (variable, expected) in [
        ("PATH", "authorization required"),
        (
            "AWL_TEST_NO_SUCH_VARIABLE",
            "`AWL_TEST_NO_SUCH_VARIABLE` (its `bearer_token_env`) is not set",
        ),
    ] {
        let dir = tools_dir(&format!(
            "mcp_servers:\n  - name: guarded\n    url: {}\n    bearer_token_env: {variable}\n",
            server.url
        ));
        let loaded = Registry::load(dir.path(), runners()).unwrap();
        let Err(RegistryError::Mcp(failed)) = within(30, "discovery", loaded.discover()).await
        else {
            panic!("discovery with {variable} fails");
        };
        let text = failed
            .iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join("\n");
        assert!(text.contains("MCP server `guarded`"), "{text}");
        assert!(text.contains(expected), "{variable}: {text}");
        // The token (HOME's value) is not shown, unless it is part of the file's path.
        let token = home();
        if token.len() > 1 && !dir.path().starts_with(&token) {
            assert!(!text.contains(&token), "the token is not shown: {text}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_that_cannot_be_reached_are_errors_naming_them() {
    let closed_port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let dir = tools_dir(&format!(
        r#"mcp_servers:
  - name: missing
    command: [/nonexistent/awl-mcp-server, stdio]
  - name: quits
    command: [{python:?}, -c, "import sys; sys.stderr.write('no luck today\\n'); sys.exit(3)"]
  - name: nobody
    url: http://127.0.0.1:{closed_port}/mcp
    timeout_seconds: 10
"#,
        python = python()
    ));
    let loaded = Registry::load(dir.path(), runners()).unwrap();
    let started = Instant::now();
    let result = within(60, "discovery", loaded.discover()).await;
    let Err(error) = result else {
        panic!("discovery fails");
    };
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    let RegistryError::Mcp(failed) = &error else {
        panic!("an MCP error: {error}");
    };
    let servers: Vec<&str> = failed.iter().map(|e| e.server.as_str()).collect();
    assert_eq!(servers, vec!["missing", "nobody", "quits"], "{error}");
    let text = error.to_string();
    assert!(
        text.contains("MCP server `missing`")
            && text.contains("cannot start `/nonexistent/awl-mcp-server`"),
        "{text}"
    );
    assert!(
        text.contains("MCP server `quits`") && text.contains("no luck today"),
        "{text}"
    );
    assert!(
        text.contains("MCP server `nobody`")
            && text.contains(&format!("http://127.0.0.1:{closed_port}/mcp")),
        "{text}"
    );
    assert!(text.contains("mcp.yaml"), "where it is declared: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn awl_tools_list_shows_mcp_tools_with_their_source() {
    let dir = tools_dir(&stdio_server(""));
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_awl"));
    command
        .arg("--tools-dir")
        .arg(dir.path())
        .args(["tools", "list"])
        .env_remove("AWL_LOG")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = within(60, "awl tools list", command.output())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "awl tools list: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let add = stdout
        .lines()
        .find(|l| l.starts_with("py__add "))
        .unwrap_or_else(|| panic!("py__add is listed: {stdout}"));
    assert!(
        add.contains("mcp:py") && add.contains("Add two whole numbers."),
        "{add}"
    );
}
