//! Workflow `tool` steps calling the tool registry: a tool declared in the tools
//! directory and the tools of an MCP server (the official Python SDK's,
//! `tests/mcp/tool_server.py`, over stdio), through the real binary (`awl validate`,
//! `awl run`, `awl run --detach` with `awl worker`) and through a server in this
//! process, on both stores.
//!
//! What is checked: files naming registry tools are accepted only where the registry
//! knows them (an unknown name refused at its line and column with the known tools);
//! the outputs of directory and MCP tools flow into later steps; MCP failures are
//! classed (an error result `unknown`, a call past the step's timeout `timeout`,
//! arguments the tool's schema refuses `validation`, before the server is called) and
//! acted on by the step's error handlers (a fallback to a directory tool, a longer
//! timeout); tools' costs are charged to the run; the finished run replays to the same
//! decisions (`awl replay`), also after the tools directory changed, since the version
//! carries the directory tool it was registered with.

use std::path::PathBuf;

use awl::runners::{Runners, RunnersConfig};
use awl::tools::Registry;
use reqwest::Method;
use serde_json::{Value, json};

use crate::mcp_tools::{SERVER, python};
use crate::support::cli::{Awl, json_lines, run_id_of, stdout_of, step};
use crate::support::events::for_step;
use crate::support::server::{Api, config, serve_with, tokens};
use crate::support::{Backend, TestStore, poll, wait_for, within};

const TIMEOUT_SECS: u64 = 90;

crate::support::on_both_stores!(
    worker_threads = 2;
    a_run_calls_directory_and_mcp_tools_handles_their_failures_and_replays,
    a_worker_given_the_tools_dir_performs_mcp_steps,
    a_server_s_worker_performs_mcp_steps_through_its_registry,
);

/// The tools directory: two shell tools and the test MCP server as `py`.
fn tools_file(word_count_flag: &str) -> String {
    format!(
        r#"tools:
  - name: words
    description: Count the words of a text.
    type: shell
    timeout_seconds: 10
    cost_usd: 0.01
    inputs:
      text: {{type: string, required: true}}
    script: 'printf "{{\"words\": %s}}" "$(printf "%s" "$1" | wc {word_count_flag})"'
    args: ["${{{{ inputs.text }}}}"]
  - name: say
    type: shell
    inputs:
      message: {{type: string, required: true}}
    command: [echo, "fallback: ${{{{ inputs.message }}}}"]
mcp_servers:
  - name: py
    command: [{python:?}, {SERVER:?}, stdio]
    timeout_seconds: 20
    cost_usd: 0.25
"#,
        python = python(),
    )
}

/// Every kind of registry call, each feeding the next.
const WORKFLOW: &str = r#"name: registry-tools
version: "1.0.0"
steps:
  - id: count
    tool: words
    inputs: {text: "one two three"}
  - id: sum
    tool: py__add
    inputs: {a: "${{ steps.count.outputs.json.words }}", b: 4}
  - id: loud
    tool: py__shout
    inputs: {text: "total ${{ steps.sum.outputs.json }}"}
  - id: refused
    tool: py__fail
    inputs: {message: "the server says no"}
    error_handlers:
      - {class: unknown, action: fallback, fallback_tool: say}
  - id: patient
    tool: py__slow
    inputs: {seconds: 2}
    timeout_seconds: 1
    error_handlers:
      - {class: timeout, action: increase_timeout, timeout_factor: 5, max_attempts: 2}
  - id: typed
    tool: py__add
    inputs: {a: "three", b: 4}
    on_error: continue
  - id: calls
    tool: py__call_count
outputs:
  words: "${{ steps.count.outputs.json.words }}"
  sum: "${{ steps.sum.outputs.json }}"
  loud: "${{ steps.loud.outputs.structured.result }}"
  fallback: "${{ steps.refused.outputs.stdout }}"
  patient: "${{ steps.patient.outputs.content[0].text }}"
  calls: "${{ steps.calls.outputs.json }}"
"#;

/// A store, a scratch folder (every `awl` runs there) and a tools directory.
struct Setup {
    _t: TestStore,
    scratch: tempfile::TempDir,
    awl: Awl,
}

impl Setup {
    async fn new(backend: Backend) -> Self {
        let t = TestStore::new(backend).await;
        let scratch = tempfile::tempdir().expect("scratch dir");
        let awl = Awl::bounded(&t.location, TIMEOUT_SECS).in_dir(scratch.path());
        Self {
            _t: t,
            scratch,
            awl,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.scratch.path().join(name)
    }

    fn write(&self, name: &str, text: &str) -> String {
        let path = self.path(name);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }

    /// `awl replay RUN --json` agrees with the log.
    async fn replays_the_same(&self, run_id: &str) {
        let output = self.awl.output(&["replay", run_id, "--json"]).await;
        let replay: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
            panic!(
                "awl replay printed no JSON ({e}): {}",
                String::from_utf8_lossy(&output.stderr)
            )
        });
        assert!(
            output.status.success() && replay["replay"]["verified"]["decisions"].as_u64() > Some(0),
            "run {run_id} does not replay to the same decisions: {:#}",
            replay["replay"]
        );
    }
}

fn attempts<'a>(status: &'a Value, id: &str) -> &'a Vec<Value> {
    step(status, id)["attempts"]
        .as_array()
        .unwrap_or_else(|| panic!("step `{id}` has no attempts: {status:#}"))
}

/// What [`WORKFLOW`] does, as `awl status --json` shows it.
fn check_the_run(status: &Value) {
    assert_eq!(status["status"], "SUCCEEDED", "{status:#}");
    // An MCP error result (`unknown`), acted on by the fallback to a directory tool.
    let refused = attempts(status, "refused");
    assert_eq!(refused.len(), 2, "{refused:#?}");
    assert_eq!(refused[0]["error"]["class"], "unknown", "{:#}", refused[0]);
    let said = refused[0]["error"]["message"].as_str().unwrap_or_default();
    assert!(
        said.contains("the server says no") && said.contains("MCP server `py`"),
        "{said}"
    );
    assert_eq!(
        refused[0]["recovery"],
        json!({"kind": "fallback", "tool": "say"})
    );
    assert_eq!(refused[1]["outcome"], "SUCCEEDED");
    // A call past the step's timeout (`timeout`), tried again with a longer one.
    let patient = attempts(status, "patient");
    assert_eq!(patient.len(), 2, "{patient:#?}");
    assert_eq!(patient[0]["error"]["class"], "timeout", "{:#}", patient[0]);
    assert_eq!(patient[0]["recovery"]["kind"], "increase_timeout");
    assert_eq!(patient[1]["outcome"], "SUCCEEDED");
    // Arguments the tool's schema refuses (`validation`), before the server is called.
    let typed = attempts(status, "typed");
    assert_eq!(typed.len(), 1, "{typed:#?}");
    assert_eq!(typed[0]["error"]["class"], "validation", "{:#}", typed[0]);
    let said = typed[0]["error"]["message"].as_str().unwrap_or_default();
    assert!(said.contains("/a"), "says which argument: {said}");
    // Costs: the directory tool's per call, the MCP server's per call.
    let cost = |id: &str| {
        attempts(status, id)
            .iter()
            .filter_map(|a| a["cost_usd"].as_f64())
            .sum::<f64>()
    };
    assert_eq!(cost("count"), 0.01);
    assert_eq!(cost("sum"), 0.25);
    assert_eq!(cost("patient"), 0.25, "only the attempt that succeeded");
    let total = status["cost_usd"].as_f64().unwrap_or_default();
    assert!((total - 0.01 - 4.0 * 0.25).abs() < 1e-9, "{total}");
}

/// The run's outputs: each step's output reached the next.
fn check_the_outputs(outputs: &Value) {
    assert_eq!(outputs["words"], 3, "{outputs:#}");
    assert_eq!(outputs["sum"], 7, "{outputs:#}");
    assert_eq!(outputs["loud"], "TOTAL 7!", "{outputs:#}");
    assert_eq!(
        outputs["fallback"].as_str().map(str::trim),
        Some("fallback: the server says no"),
        "{outputs:#}"
    );
    assert!(
        outputs["patient"]
            .as_str()
            .is_some_and(|s| s.starts_with("slept 2")),
        "{outputs:#}"
    );
    // add, shout, fail, slow twice: the refused arguments never reached the server.
    assert_eq!(outputs["calls"], 5, "{outputs:#}");
}

async fn a_run_calls_directory_and_mcp_tools_handles_their_failures_and_replays(backend: Backend) {
    let s = Setup::new(backend).await;
    // The default tools directory: `./tools` of where awl runs.
    s.write("tools/registry.yaml", &tools_file("-w"));
    let file = s.write("registry.awl.yaml", WORKFLOW);

    // Checked against the registry: the MCP server's tools are listed for it.
    let valid = s.awl.ok(&["validate", &file]).await;
    assert!(
        valid.contains("ok (registry-tools 1.0.0, 7 steps)"),
        "{valid}"
    );
    let typo = s.write(
        "typo.awl.yaml",
        &WORKFLOW.replace("tool: py__shout", "tool: py__shoot"),
    );
    let refused = s.awl.output(&["validate", "--json", &typo]).await;
    assert!(!refused.status.success());
    let problems = json_lines(&String::from_utf8_lossy(&refused.stdout));
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert_eq!(
        (
            problems[0]["line"].clone(),
            problems[0]["column"].clone(),
            problems[0]["field"].clone()
        ),
        (json!(11), json!(11), json!("steps[2].tool"))
    );
    let message = problems[0]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("unknown tool `py__shoot` (known: ")
            && message.contains("py__shout")
            && message.contains("words")
            && message.contains("say"),
        "{message}"
    );
    let running_it = s.awl.output(&["run", &typo]).await;
    assert!(!running_it.status.success());
    let said = String::from_utf8_lossy(&running_it.stderr);
    assert!(
        said.contains("typo.awl.yaml:11:11: steps[2].tool: unknown tool `py__shoot`"),
        "{said}"
    );

    // Run here, in the foreground.
    let ran = s.awl.output(&["run", &file]).await;
    let stderr = String::from_utf8_lossy(&ran.stderr).into_owned();
    assert!(ran.status.success(), "{stderr}");
    let run_id = run_id_of(&stderr);
    let outputs: Value = serde_json::from_slice(&ran.stdout)
        .unwrap_or_else(|e| panic!("no JSON outputs ({e}): {stderr}"));
    check_the_outputs(&outputs);
    check_the_run(&s.awl.status(&run_id).await);

    // What each registry call was, recorded as it started.
    let events = json_lines(&s.awl.ok(&["events", "--json", "--stream", &run_id]).await);
    let calls: Vec<Value> = ["count", "sum", "loud"]
        .iter()
        .map(|id| {
            for_step(&events, "run.step_started", id)
                .next()
                .unwrap_or_else(|| panic!("`{id}` started"))["call"]
                .clone()
        })
        .collect();
    assert_eq!(
        calls,
        [
            json!({"tool": "words", "inputs": {"text": "one two three"}}),
            json!({"tool": "py__add", "inputs": {"a": 3, "b": 4}}),
            json!({"tool": "py__shout", "inputs": {"text": "total 7"}}),
        ]
    );
    s.replays_the_same(&run_id).await;

    // The registered version carries the directory tool it was registered with.
    let shown = s
        .awl
        .ok(&["workflows", "show", "registry-tools@1.0.0"])
        .await;
    let definition: Value = serde_json::from_str(&shown).expect("the definition as JSON");
    let copied: Vec<&str> = definition["tools"]
        .as_array()
        .map(|tools| tools.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        copied,
        ["say", "words"],
        "the directory tools it names, not the MCP tools: {definition:#}"
    );
    let script = definition["tools"][1]["script"]
        .as_str()
        .unwrap_or_default();
    assert!(script.contains("wc -w"), "{script}");

    // The directory changes: the finished run still replays, and the same version is
    // other content now, refused until it is given a new version.
    s.write("tools/registry.yaml", &tools_file("-c"));
    s.replays_the_same(&run_id).await;
    let again = s.awl.output(&["run", &file]).await;
    assert!(!again.status.success());
    let said = String::from_utf8_lossy(&again.stderr);
    assert!(said.contains("versions are immutable"), "{said}");
}

async fn a_worker_given_the_tools_dir_performs_mcp_steps(backend: Backend) {
    let s = Setup::new(backend).await;
    // A tools directory elsewhere, named by `--tools-dir`.
    let tools = tempfile::tempdir().unwrap();
    std::fs::write(tools.path().join("registry.yaml"), tools_file("-w")).unwrap();
    let tools_dir = tools.path().display().to_string();
    let file = s.write("registry.awl.yaml", WORKFLOW);

    let started = stdout_of(
        "awl run --detach",
        s.awl
            .output(&["--tools-dir", &tools_dir, "run", "--detach", &file])
            .await,
    );
    let run_id = started.trim().to_string();
    let _worker = s
        .awl
        .worker(s.path("worker.log"), &["--tools-dir", &tools_dir]);
    let status = poll(TIMEOUT_SECS, async || {
        let status = s.awl.status(&run_id).await;
        matches!(status["status"].as_str(), Some("SUCCEEDED" | "FAILED")).then_some(status)
    })
    .await
    .unwrap_or_else(|| panic!("run {run_id} did not finish"));
    check_the_run(&status);
    let outputs = status["outcome"]["outputs"].clone();
    check_the_outputs(&outputs);
    s.replays_the_same(&run_id).await;
}

async fn a_server_s_worker_performs_mcp_steps_through_its_registry(backend: Backend) {
    let t = TestStore::new(backend).await;
    let tools = tempfile::tempdir().unwrap();
    std::fs::write(tools.path().join("registry.yaml"), tools_file("-w")).unwrap();
    let registry = within(
        60,
        "discovering the MCP server",
        Registry::load_with_mcp(tools.path(), Runners::new(RunnersConfig::default())),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("registry.awl.yaml");
    std::fs::write(&file, WORKFLOW).unwrap();
    // Registration as `awl serve --workflows` does it, against the server's registry.
    awl::definitions::register_file(&t.store, &file, "test", chrono::Utc::now())
        .await
        .expect_err("without the registry its tools are unknown");
    awl::definitions::register_file_with(
        &t.store,
        &file,
        "test",
        chrono::Utc::now(),
        &registry.known_tools(),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));

    let tk = tokens(&t.store, &[]).await;
    let mut config = config();
    config.tools = Some(registry);
    config.worker = Some(awl::executor::WorkerConfig::new("registry-tools-test"));
    let server = serve_with(&t.store, config, awl::clock::system_clock()).await;
    let api = Api::of(&server);
    let started = api
        .ok(
            &tk.operator,
            Method::POST,
            "/api/v1/runs",
            json!({"workflow": "registry-tools", "inputs": {}}),
        )
        .await;
    let run = started["run_id"].as_str().unwrap_or_default().to_string();
    let view = wait_for(TIMEOUT_SECS, "the run to end", async || {
        let view = api
            .fetch(Some(&tk.viewer), &format!("/api/v1/runs/{run}"))
            .await;
        matches!(view["status"].as_str(), Some("SUCCEEDED" | "FAILED")).then_some(view)
    })
    .await;
    assert_eq!(view["status"], "SUCCEEDED", "{view:#}");
    let awl = Awl::bounded(&t.location, TIMEOUT_SECS);
    let status = awl.status(&run).await;
    check_the_run(&status);
    check_the_outputs(&status["outcome"]["outputs"]);
    let replay = awl.ok(&["replay", &run]).await;
    assert!(!replay.is_empty());
    server.shutdown().await.expect("the server stops");
}
