//! The dashboard in a real browser: `awl serve` (the binary, auth on) and
//! `tests/browser/dashboard.mjs`, which drives Debian's headless Chromium with
//! playwright-core: the token prompt, the board and a run's timeline changing without
//! a reload, a gate approved by a click, the run finishing; tool sequences an agent of
//! the operator's team repeats, proposed by the server's learner and decided on the
//! Learned tab; model use of awl's own agent shown live on the Models tab. Screenshots go to `target/screenshots/<store>/`.
//!
//! `scripts/test` installs Chromium and playwright-core and names them in
//! `AWL_TEST_CHROMIUM`; without it this test fails (it does not skip).

use std::process::Stdio;

use crate::support::cli::Awl;
use crate::support::openai::{Scripted, ScriptedServer};
use crate::support::server::{Api, free_port};
use crate::support::{Backend, TestStore, on_both_stores, within};

on_both_stores!(worker_threads = 2;
    the_dashboard_follows_a_run_and_approves_its_gate,
);

const WORKFLOW: &str = r#"
name: browser-release
version: "1.0.0"
inputs:
  version: {type: string, required: true}
steps:
  - id: build
    type: tool
    tool: echo
    inputs: {message: "built ${{ inputs.version }}"}
  - id: approve
    type: gate
    message: "Release ${{ inputs.version }}?"
  - id: ship
    type: tool
    tool: echo
    inputs: {message: "shipped"}
"#;

async fn the_dashboard_follows_a_run_and_approves_its_gate(backend: Backend) {
    let chromium = std::env::var("AWL_TEST_CHROMIUM").unwrap_or_else(|_| {
        panic!(
            "AWL_TEST_CHROMIUM is not set: the dashboard test drives Debian's Chromium with \
             playwright-core, which scripts/test installs. Run the tests with scripts/test."
        )
    });
    let _ = rustls::crypto::ring::default_provider().install_default();
    let root = env!("CARGO_MANIFEST_DIR");
    let t = TestStore::new(backend).await;
    let awl = Awl::bounded(&t.location, 60);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("browser-release.awl.yaml"), WORKFLOW).unwrap();
    let create = async |name: &str, role: &str| {
        let created = awl
            .ok(&[
                "token", "create", "--name", name, "--role", role, "--team", "alpha", "--json",
            ])
            .await;
        let token: serde_json::Value = serde_json::from_str(&created).unwrap();
        token["token"].as_str().unwrap().to_string()
    };
    let token = create("web", "operator").await;
    let agent_token = create("scout", "agent").await;

    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let workflows = dir.path().to_string_lossy().to_string();
    // awl's own agent `helper`, on a scripted model server.
    let model = ScriptedServer::always(Scripted::text("Hello from the model.")).await;
    let agents_dir = dir.path().join("agents");
    std::fs::create_dir_all(&agents_dir).unwrap();
    std::fs::write(
        agents_dir.join("helper.yaml"),
        format!(
            "name: helper\ncapabilities: [text]\nmodel:\n  name: tiny\n  base_url: {}\n  \
             price: {{input_per_million: 1000, output_per_million: 1000}}\nsystem_prompt: Be brief.\n",
            model.base_url()
        ),
    )
    .unwrap();
    let shots = format!("{root}/target/screenshots/{backend:?}").to_lowercase();
    std::fs::create_dir_all(&shots).unwrap();
    // The server's log beside the screenshots: a failed check shows its end.
    let serve_log = format!("{shots}/serve.log");
    let log_file = std::fs::File::create(&serve_log).expect("create the server's log");
    let mut serve = awl
        .command(&[
            "serve",
            "--bind",
            &format!("127.0.0.1:{port}"),
            "--workflows",
            &workflows,
            "--learn-every",
            "1",
        ])
        .env("AWL_AGENTS_DIR", &agents_dir)
        .stdout(Stdio::null())
        .stderr(log_file)
        .spawn()
        .expect("start awl serve");
    Api::at(url.clone()).wait_healthy(30).await;

    let output = within(
        // Each of the script's waits has its own limit; this one only stops a hang.
        420,
        "the browser test",
        tokio::process::Command::new("node")
            .arg(format!("{root}/tests/browser/dashboard.mjs"))
            .env("AWL_URL", &url)
            .env("AWL_TOKEN", &token)
            .env("AWL_AGENT_TOKEN", &agent_token)
            .env("AWL_CHROMIUM", &chromium)
            .env("AWL_SCREENSHOTS", &shots)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("run node");
    let _ = serve.start_kill();
    if !output.status.success() {
        let log = std::fs::read_to_string(&serve_log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(40)..].join("\n");
        panic!(
            "the dashboard test failed ({}):\n{}{}\n(screenshots in {shots})\n\
             the server's log, last 40 lines:\n{tail}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    assert!(std::path::Path::new(&format!("{shots}/run-finished.png")).exists());
    assert!(std::path::Path::new(&format!("{shots}/learned-decided.png")).exists());
    assert!(std::path::Path::new(&format!("{shots}/models.png")).exists());
    assert_eq!(
        model.requests().len(),
        1,
        "one model call, asked from the API"
    );
}
