//! awl's own agent on both stores, against a scripted OpenAI-compatible server
//! (`support::openai`) and real tools (a declared shell tool, the built-ins): tool-call
//! turns with the conversation the model is sent, malformed tool arguments handed back
//! to the model, a model that never stops calling tools, a 429 with `Retry-After`, a
//! streamed reply, budgets that stop a solve before a call would exceed them, and a
//! solve whose process died during execute carried on without asking the model again
//! (by hand, and by a server once it was abandoned); model use per model, agent and
//! workflow.

use std::path::Path;
use std::time::Duration;

use awl::agents::{AgentDefinition, Agents, Observer, SolveResult, Unobserved, load_dir};
use awl::clock::system_clock;
use awl::domain::ids::SolveId;
use awl::domain::run::ErrorClass;
use awl::domain::solve::{Origin, SolveEvent};
use awl::log::{EventFilter, StreamType};
use awl::runners::{Runners, RunnersConfig};
use awl::store::EventStore;
use awl::tools::Registry;
use serde_json::{Value, json};

use crate::support::openai::{Scripted, ScriptedServer};
use crate::support::{Backend, TestStore, on_both_stores};

on_both_stores!(worker_threads = 2;
    tool_calls_run_and_their_results_reach_the_model,
    malformed_arguments_are_handed_back_to_the_model,
    a_model_that_never_stops_calling_tools_is_told_to_answer_then_stopped,
    a_rate_limited_model_is_retried_after_the_time_it_asks,
    a_streamed_reply_reaches_the_observer_as_it_comes,
    a_budget_stops_the_solve_before_a_call_could_exceed_it,
    a_solve_that_died_during_execute_resumes_without_asking_the_model_again,
    solves_over_http_whole_and_streamed_with_roles_and_bad_input,
    a_builtin_agent_does_a_workflow_agent_step_and_only_the_tasks_it_may_take,
    an_agent_is_asked_over_mcp_with_progress_for_each_phase,
    model_use_is_counted_per_model_agent_and_workflow,
    a_direct_solve_whose_process_died_is_carried_on_by_a_server,
);

const TOOLS: &str = r#"
tools:
  - name: word_count
    description: Count the words of a text.
    type: shell
    inputs:
      text: {type: string, required: true}
    script: 'printf "{\"words\": %s}" "$(printf "%s" "$1" | wc -w)"'
    args: ["${{ inputs.text }}"]
  - name: slow_count
    description: Count the words of a text, slowly.
    type: shell
    inputs:
      text: {type: string, required: true}
    script: 'sleep 3; printf "{\"words\": %s}" "$(printf "%s" "$1" | wc -w)"'
    args: ["${{ inputs.text }}"]
"#;

/// The agents of a temporary directory: one agent on `server`, with `extra` lines.
fn agents(store: &EventStore, server: &ScriptedServer, extra: &str) -> Agents {
    let dir = tempfile::tempdir().unwrap();
    let (registry, definitions) = declared(dir.path(), server, extra, "");
    Agents::new(store.clone(), definitions, registry, system_clock()).expect("agents")
}

/// The tools and the agent `counter` on `server` written in `dir` (with `extra` lines
/// in the agent's file and `model_extra` lines in its model section), loaded.
fn declared(
    dir: &Path,
    server: &ScriptedServer,
    extra: &str,
    model_extra: &str,
) -> (Registry, Vec<AgentDefinition>) {
    write_declarations(dir, server, extra, model_extra);
    reload(dir)
}

/// The tools and agents of `dir` loaded again (after a file changed).
fn reload(dir: &Path) -> (Registry, Vec<AgentDefinition>) {
    let registry = Registry::load(&dir.join("tools"), Runners::new(RunnersConfig::default()))
        .expect("the tools load");
    let definitions = load_dir(&dir.join("agents"), &registry).expect("the agent loads");
    (registry, definitions)
}

fn write_declarations(dir: &Path, server: &ScriptedServer, extra: &str, model_extra: &str) {
    std::fs::create_dir_all(dir.join("tools")).unwrap();
    std::fs::create_dir_all(dir.join("agents")).unwrap();
    std::fs::write(dir.join("tools/text.yaml"), TOOLS).unwrap();
    let agent = format!(
        "name: counter\ncapabilities: [text]\nmodel:\n  name: small\n  base_url: {}\n  max_retries: 2\n{model_extra}\
         system_prompt: Count with the tools.\ntools: [word_count, slow_count, echo]\n{extra}",
        server.base_url()
    );
    std::fs::write(dir.join("agents/counter.yaml"), agent).unwrap();
}

async fn ask(agents: &Agents, prompt: &str) -> SolveResult {
    agents
        .ask(
            SolveId::new(),
            "counter",
            prompt,
            Origin::default(),
            "user:ada",
            &mut Unobserved,
        )
        .await
        .expect("the solve runs")
}

/// The types of the solve's events, in order.
async fn recorded(store: &EventStore, id: SolveId) -> Vec<String> {
    let filter = EventFilter {
        stream_types: vec![StreamType::Solve],
        ..EventFilter::default()
    };
    let (events, _) = store.read_page(0, 1_000, &filter).await.unwrap();
    events
        .into_iter()
        .filter(|e| e.stream.id == id.to_string())
        .map(|e| e.event_type)
        .collect()
}

fn messages(request: &Value) -> Vec<Value> {
    request["messages"].as_array().cloned().unwrap_or_default()
}

async fn tool_calls_run_and_their_results_reach_the_model(backend: Backend) {
    let db = TestStore::new(backend).await;
    let server = ScriptedServer::start([
        Scripted::tool_calls(&[
            ("word_count", r#"{"text": "one two three"}"#),
            ("echo", r#"{"message": "hi"}"#),
        ]),
        Scripted::text("There are 3 words."),
    ])
    .await;
    let agents = agents(&db.store, &server, "");
    let result = ask(&agents, "How many words in 'one two three'?").await;
    assert_eq!(result.status, "finished", "{result:?}");
    assert_eq!(result.message.as_deref(), Some("There are 3 words."));
    assert_eq!(result.model_calls, 2);
    assert_eq!(result.plan.len(), 2);
    assert!(result.plan.iter().all(|s| s.ok), "{:?}", result.plan);
    assert_eq!(
        result.plan[0].output.as_ref().unwrap()["json"],
        json!({"words": 3})
    );
    assert_eq!(result.tools_used.len(), 2);
    assert!(result.total_ms >= result.execute_ms);
    assert!(result.tokens_in > 0 && result.tokens_out > 0);

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let offered: Vec<&str> = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(offered, vec!["word_count", "slow_count", "echo"]);
    assert_eq!(
        requests[0]["tools"][0]["function"]["parameters"]["required"],
        json!(["text"])
    );
    let first = messages(&requests[0]);
    assert_eq!(first[0]["role"], "system");
    assert_eq!(first[1]["role"], "user");
    let second = messages(&requests[1]);
    assert_eq!(
        second.len(),
        5,
        "system, user, the assistant's calls, two results"
    );
    assert_eq!(second[2]["role"], "assistant");
    assert_eq!(second[2]["tool_calls"].as_array().unwrap().len(), 2);
    let results: Vec<&Value> = second.iter().filter(|m| m["role"] == "tool").collect();
    assert!(
        results[0]["content"]
            .as_str()
            .unwrap()
            .contains(r#""words":3"#),
        "{results:?}"
    );
    assert_eq!(results[0]["tool_call_id"], second[2]["tool_calls"][0]["id"]);

    assert_eq!(
        recorded(&db.store, result.solve_id).await,
        vec![
            "solve.started",
            "solve.model_replied",
            "solve.tool_finished",
            "solve.tool_finished",
            "solve.model_replied",
            "solve.finished"
        ]
    );
    let again = agents.solve(result.solve_id).await.unwrap();
    assert_eq!(again, result, "the solve reads back as it ended");
}

async fn malformed_arguments_are_handed_back_to_the_model(backend: Backend) {
    let db = TestStore::new(backend).await;
    let server = ScriptedServer::start([
        Scripted::tool_calls(&[
            ("word_count", r#"{"text": "unterminated"#),
            ("rm_rf", r#"{}"#),
            ("word_count", r#"{"txt": "a b"}"#),
        ]),
        Scripted::text("I could not count."),
    ])
    .await;
    let agents = agents(&db.store, &server, "");
    let result = ask(&agents, "Count.").await;
    assert_eq!(result.status, "finished");
    let errors: Vec<_> = result
        .plan
        .iter()
        .map(|s| s.error.clone().expect("every call failed"))
        .collect();
    assert!(errors.iter().all(|e| e.class == ErrorClass::Validation));
    assert!(errors[0].message.contains("not valid JSON"), "{errors:?}");
    assert!(
        errors[1].message.contains("not one of this agent's tools"),
        "{errors:?}"
    );
    assert!(
        errors[2]
            .message
            .contains("\"text\" is a required property"),
        "{errors:?}"
    );
    let second = messages(&server.requests()[1]);
    let told: Vec<&str> = second
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(told.len(), 3);
    assert!(
        told[0].contains("not valid JSON") && told[0].contains("validation"),
        "{told:?}"
    );
}

async fn a_model_that_never_stops_calling_tools_is_told_to_answer_then_stopped(backend: Backend) {
    let db = TestStore::new(backend).await;
    let server =
        ScriptedServer::always(Scripted::tool_calls(&[("echo", r#"{"message": 1}"#)])).await;
    let agents = agents(&db.store, &server, "max_iterations: 2\n");
    let result = ask(&agents, "Loop.").await;
    assert_eq!(result.status, "failed");
    let error = result.error.expect("why");
    assert_eq!(error.class, ErrorClass::Validation);
    assert!(
        error
            .message
            .contains("still asked for tools after 2 iterations"),
        "{error}"
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "two plan phases and one solve phase");
    assert_eq!(requests[0]["tool_choice"], "auto");
    assert_eq!(requests[2]["tool_choice"], "none");
    assert_eq!(
        result.plan.len(),
        3,
        "the solve phase's calls are recorded, not run"
    );
    assert!(result.plan[2].duration_ms.is_none());
}

async fn a_rate_limited_model_is_retried_after_the_time_it_asks(backend: Backend) {
    let db = TestStore::new(backend).await;
    let server = ScriptedServer::start([
        Scripted::error(429, Some("1"), "Rate limit reached"),
        Scripted::text("Done."),
    ])
    .await;
    let agents = agents(&db.store, &server, "");
    let started = std::time::Instant::now();
    let result = ask(&agents, "Hi.").await;
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(result.status, "finished");
    assert_eq!(server.requests().len(), 2);

    // A model that keeps refusing ends the solve with its class, after the retries.
    let refusing = ScriptedServer::always(Scripted::error(503, Some("0"), "overloaded")).await;
    let agents = self::agents(&db.store, &refusing, "");
    let result = ask(&agents, "Hi.").await;
    assert_eq!(result.status, "failed");
    let error = result.error.unwrap();
    assert_eq!(error.class, ErrorClass::Dependency, "{error}");
    assert!(error.message.contains("overloaded"), "{error}");
    assert_eq!(
        refusing.requests().len(),
        3,
        "the first attempt and max_retries: 2"
    );
}

#[derive(Default)]
struct Watcher {
    tokens: Vec<String>,
    phases: Vec<String>,
}

impl Observer for Watcher {
    fn event(&mut self, event: &SolveEvent) {
        self.phases.push(cqrs_es::DomainEvent::event_type(event));
    }
    fn token(&mut self, text: &str) {
        self.tokens.push(text.to_string());
    }
}

async fn a_streamed_reply_reaches_the_observer_as_it_comes(backend: Backend) {
    let db = TestStore::new(backend).await;
    let answer = "Three words, counted with the word_count tool.";
    let server = ScriptedServer::start([
        Scripted::tool_calls(&[("word_count", r#"{"text": "a b c"}"#)]),
        Scripted::text(answer),
    ])
    .await;
    let stream_dir = tempfile::tempdir().unwrap();
    let (registry, definitions) = declared(stream_dir.path(), &server, "", "  stream: true\n");
    let streaming = Agents::new(db.store.clone(), definitions, registry, system_clock()).unwrap();
    let mut watcher = Watcher::default();
    let result = streaming
        .ask(
            SolveId::new(),
            "counter",
            "Count a b c.",
            Origin::default(),
            "user:ada",
            &mut watcher,
        )
        .await
        .unwrap();
    assert_eq!(result.message.as_deref(), Some(answer));
    assert!(
        watcher.tokens.len() > 1,
        "the text came in pieces: {:?}",
        watcher.tokens
    );
    assert_eq!(watcher.tokens.concat(), answer);
    assert_eq!(
        watcher.phases,
        vec![
            "solve.started",
            "solve.model_replied",
            "solve.tool_finished",
            "solve.model_replied",
            "solve.finished"
        ]
    );
    assert_eq!(server.requests()[0]["stream"], true);
}

async fn a_budget_stops_the_solve_before_a_call_could_exceed_it(backend: Backend) {
    let db = TestStore::new(backend).await;
    // $1 per thousand tokens in and out: the first prompt alone is over a thousand
    // bytes with the tools' schemas, so a budget of $0.50 never reaches the model.
    let price = "  price: {input_per_million: 1000, output_per_million: 1000}\n";
    let server =
        ScriptedServer::always(Scripted::tool_calls(&[("echo", r#"{"message": 1}"#)])).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agents/counter.yaml");
    let (registry, definitions) = declared(dir.path(), &server, "budget_usd: 0.5\n", price);
    let agents = Agents::new(
        db.store.clone(),
        definitions,
        registry.clone(),
        system_clock(),
    )
    .unwrap();
    let result = ask(&agents, "Count.").await;
    assert_eq!(result.status, "failed");
    let error = result.error.unwrap();
    assert_eq!(error.class, ErrorClass::Budget);
    assert!(
        error.message.contains("more than the 0.500000 USD left"),
        "{error}"
    );
    assert!(server.requests().is_empty(), "no call was made");

    // A long prompt costs about $1 a call as the server counts it: a budget of $6
    // covers a few calls and stops the solve before the one that could pass it.
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("budget_usd: 0.5", "budget_usd: 6\nmax_iterations: 10");
    std::fs::write(&path, text).unwrap();
    let (registry, definitions) = reload(dir.path());
    let agents = Agents::new(db.store.clone(), definitions, registry, system_clock()).unwrap();
    let long = format!("Count: {}", "word ".repeat(800));
    let result = ask(&agents, &long).await;
    assert_eq!(result.status, "failed");
    assert_eq!(
        result.error.clone().unwrap().class,
        ErrorClass::Budget,
        "{result:?}"
    );
    assert!(result.model_calls >= 2, "{result:?}");
    assert_eq!(server.requests().len(), result.model_calls);
    assert!(result.cost_usd <= 6.0, "{}", result.cost_usd);
    assert!(result.cost_usd >= 2.0, "{}", result.cost_usd);
}

/// Ask `counter` to count "a b" as solve `id`, and let the process "die" (the future
/// dropped) while the slow tool runs.
async fn cut_off_during_execute(agents: &Agents, id: SolveId) {
    let died = tokio::time::timeout(
        Duration::from_millis(1_500),
        agents.ask(
            id,
            "counter",
            "Count a b.",
            Origin::default(),
            "user:ada",
            &mut Unobserved,
        ),
    )
    .await;
    assert!(died.is_err(), "the solve was cut off during execute");
}

async fn a_solve_that_died_during_execute_resumes_without_asking_the_model_again(backend: Backend) {
    let db = TestStore::new(backend).await;
    let server = ScriptedServer::start([
        Scripted::tool_calls(&[
            ("echo", r#"{"message": "fast"}"#),
            ("slow_count", r#"{"text": "a b"}"#),
        ]),
        Scripted::text("Two words."),
    ])
    .await;
    let agents = agents(&db.store, &server, "");
    let id = SolveId::new();
    // The process "dies" while the slow tool runs: the future is dropped.
    cut_off_during_execute(&agents, id).await;
    assert_eq!(
        recorded(&db.store, id).await,
        vec![
            "solve.started",
            "solve.model_replied",
            "solve.tool_finished"
        ],
        "the reply and the fast call were recorded"
    );
    assert_eq!(server.requests().len(), 1);

    // Another process carries it on from the log.
    let store = db.reopen().await;
    let again = self::agents(&store, &server, "");
    let result = again
        .resume(id, "user:ada", &mut Unobserved)
        .await
        .expect("resumed");
    assert_eq!(result.status, "finished");
    assert_eq!(result.message.as_deref(), Some("Two words."));
    assert_eq!(
        server.requests().len(),
        2,
        "the recorded reply was not asked for again"
    );
    let events = recorded(&store, id).await;
    assert_eq!(
        events
            .iter()
            .filter(|e| *e == "solve.model_replied")
            .count(),
        2
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| *e == "solve.tool_finished")
            .count(),
        2,
        "the recorded call was not run again"
    );
    assert_eq!(
        result.plan[1].output.as_ref().unwrap()["json"],
        json!({"words": 2})
    );
}

/// The SSE messages of a whole (ended) response body: `(event, data)`.
fn sse_blocks(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter_map(|block| {
            let mut event = String::new();
            let mut data = String::new();
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event:") {
                    event = v.trim().to_string();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.trim());
                }
            }
            (!event.is_empty()).then(|| (event, serde_json::from_str(&data).unwrap_or(Value::Null)))
        })
        .collect()
}

async fn solves_over_http_whole_and_streamed_with_roles_and_bad_input(backend: Backend) {
    use crate::support::server::{Api, config, serve_with, tokens};
    use reqwest::{Method, StatusCode};

    let db = TestStore::new(backend).await;
    let server = ScriptedServer::start([
        Scripted::tool_calls(&[("word_count", r#"{"text": "a b c d"}"#)]),
        Scripted::text("Four."),
        Scripted::tool_calls(&[("echo", r#"{"message": "x"}"#)]),
        Scripted::text("Streamed answer."),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (registry, definitions) = declared(dir.path(), &server, "", "  stream: true\n");
    let tokens = tokens(&db.store, &["worker-1"]).await;
    let mut config = config();
    config.tools = Some(registry);
    config.agents = definitions;
    let awl = serve_with(&db.store, config, system_clock()).await;
    let api = Api::of(&awl);

    let tools = api.get(Some(&tokens.viewer), "/api/v1/tools").await;
    let word_count = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "word_count")
        .expect("listed");
    assert_eq!(word_count["input_schema"]["required"], json!(["text"]));
    assert!(
        word_count["source"]
            .as_str()
            .unwrap()
            .starts_with("declared:"),
        "{word_count}"
    );
    let defined = api
        .get(Some(&tokens.viewer), "/api/v1/agent-definitions")
        .await;
    assert_eq!(defined[0]["name"], "counter");
    assert_eq!(
        defined[0]["tools"],
        json!(["word_count", "slow_count", "echo"])
    );

    // Whole.
    let result = api
        .ok_post(
            &tokens.operator,
            "/api/v1/solve",
            json!({"agent": "counter", "prompt": "Count a b c d."}),
        )
        .await;
    assert_eq!(result["status"], "finished", "{result}");
    assert_eq!(result["message"], "Four.");
    assert_eq!(result["plan"][0]["tool"], "word_count");
    assert_eq!(result["plan"][0]["output"]["json"], json!({"words": 4}));
    for field in [
        "plan_ms",
        "execute_ms",
        "solve_ms",
        "total_ms",
        "tokens_in",
        "cost_usd",
    ] {
        assert!(result.get(field).is_some(), "{field} in {result}");
    }
    let id = result["solve_id"].as_str().unwrap();
    let read = api
        .get(Some(&tokens.viewer), &format!("/api/v1/solves/{id}"))
        .await;
    assert_eq!(read, result);

    // Streamed: every phase, the tokens, then the result.
    let response = api
        .http
        .post(format!("{}/api/v1/solve", api.base))
        .bearer_auth(&tokens.operator)
        .header("accept", "text/event-stream")
        .json(&json!({"agent": "counter", "prompt": "Echo x."}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body = crate::support::within(30, "the stream to end", response.text())
        .await
        .unwrap();
    let messages = sse_blocks(&body);
    let names: Vec<&str> = messages.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(names.first(), Some(&"started"), "{names:?}");
    assert_eq!(names.last(), Some(&"result"), "{names:?}");
    for phase in ["model", "tool", "token", "finished"] {
        assert!(names.contains(&phase), "{phase} in {names:?}");
    }
    let streamed: String = messages
        .iter()
        .filter(|(e, _)| e == "token")
        .map(|(_, d)| d["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(streamed, "Streamed answer.");
    assert_eq!(messages.last().unwrap().1["message"], "Streamed answer.");

    // Who may ask, and bad input: nothing recorded, nothing asked of the model.
    let asked = server.requests().len();
    let body = json!({"agent": "counter", "prompt": "x"});
    let (status, _) = api
        .call(
            Some(&tokens.viewer),
            Method::POST,
            "/api/v1/solve",
            Some(body.clone()),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let agent_token = &tokens.agents["worker-1"];
    let (status, _) = api
        .call(
            Some(agent_token),
            Method::POST,
            "/api/v1/solve",
            Some(body.clone()),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = api.call(None, Method::GET, "/api/v1/tools", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, error) = api
        .call(
            Some(&tokens.operator),
            Method::POST,
            "/api/v1/solve",
            Some(json!({"agent": "nobody", "prompt": "x"})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{error}");
    assert!(error.to_string().contains("no agent `nobody`"), "{error}");
    let (status, _) = api
        .call(
            Some(&tokens.operator),
            Method::POST,
            "/api/v1/solve",
            Some(json!({"agent": "counter", "prompt": "  "})),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, _) = api
        .call(
            Some(&tokens.operator),
            Method::POST,
            "/api/v1/solve",
            Some(json!({"agent": "counter", "prompt": "x", "budget": 1})),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "unknown fields are refused"
    );
    let (status, _) = api
        .call(
            Some(&tokens.viewer),
            Method::GET,
            &format!("/api/v1/solves/{}", SolveId::new()),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(server.requests().len(), asked);
    awl.shutdown().await.unwrap();
}

const BUILTIN_WORKFLOW: &str = r#"
name: count-words
version: "1.0.0"
inputs:
  text: {type: string, required: true}
steps:
  - id: count
    type: agent
    prompt: "How many words in: ${{ inputs.text }}"
    capabilities: [text]
    runner: builtin
outputs:
  answer: "${{ steps.count.outputs.message }}"
"#;

async fn a_builtin_agent_does_a_workflow_agent_step_and_only_the_tasks_it_may_take(
    backend: Backend,
) {
    use crate::support::server::{Api, config, serve_with, tokens};
    use crate::support::wait_for;
    use reqwest::{Method, StatusCode};

    let db = TestStore::new(backend).await;
    let model = ScriptedServer::start([
        Scripted::tool_calls(&[("word_count", r#"{"text": "one two three"}"#)]),
        Scripted::text("3 words."),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (registry, definitions) = declared(dir.path(), &model, "board: true\nconcurrency: 2\n", "");
    let file = dir.path().join("count-words.awl.yaml");
    std::fs::write(&file, BUILTIN_WORKFLOW).unwrap();
    awl::definitions::register_file(&db.store, &file, "test", chrono::Utc::now())
        .await
        .expect("register");
    let tk = tokens(&db.store, &["outsider"]).await;
    let mut config = config();
    config.tools = Some(registry);
    config.agents = definitions;
    config.worker = Some(awl::executor::WorkerConfig::new("builtin-test"));
    let awl = serve_with(&db.store, config, system_clock()).await;
    let api = Api::of(&awl);

    // The built-in agent is on the board like any agent, marked as awl's own.
    let counter = api.get(Some(&tk.viewer), "/api/v1/agents/counter").await;
    assert_eq!(counter["builtin"], true, "{counter}");
    assert_eq!(counter["capabilities"], json!(["text"]));
    // An external agent may not take its name.
    let outsider = &tk.agents["outsider"];
    let (status, body) = api
        .call(
            Some(&tk.admin),
            Method::POST,
            "/api/v1/agents",
            Some(json!({"agent_id": "counter", "capabilities": ["text"]})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    api.ok(
        outsider,
        Method::POST,
        "/api/v1/agents",
        json!({"capabilities": ["text"]}),
    )
    .await;

    let started = api
        .ok(
            &tk.operator,
            Method::POST,
            "/api/v1/runs",
            json!({"workflow": "count-words", "inputs": {"text": "one two three"}}),
        )
        .await;
    let run = started["run_id"].as_str().unwrap().to_string();
    let done = wait_for(30, "the run to succeed", async || {
        let view = api
            .fetch(Some(&tk.viewer), &format!("/api/v1/runs/{run}"))
            .await;
        (view["status"] == "SUCCEEDED").then_some(view)
    })
    .await;
    assert_eq!(done["outputs"]["answer"], "3 words.", "{done}");

    // The task went to the built-in agent, which reported its tool calls on it.
    let tasks = api
        .get(Some(&tk.viewer), "/api/v1/tasks?status=COMPLETED")
        .await;
    let task = tasks["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["run_id"] == run.as_str())
        .expect("the run's task")
        .clone();
    assert_eq!(task["assignee"], "counter", "{task}");
    let task_id = task["task_id"].as_str().unwrap();
    let history = api
        .get(Some(&tk.viewer), &format!("/api/v1/tasks/{task_id}/events"))
        .await;
    let types: Vec<String> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_type"].as_str().unwrap_or_default().to_string())
        .collect();
    for t in [
        "task.queued",
        "task.acknowledged",
        "task.tool_call_reported",
        "task.completed",
    ] {
        assert!(types.iter().any(|x| x == t), "{t} in {types:?}");
    }

    // A task only external agents may take waits for the outsider, never the
    // built-in agent (which is waiting too).
    let sent = api
        .ok(
            &tk.operator,
            Method::POST,
            "/api/v1/tasks",
            json!({"prompt": "by hand", "capabilities": ["text"], "runner": "external"}),
        )
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let view = api
        .get(
            Some(&tk.viewer),
            &format!("/api/v1/tasks/{}", sent["task_id"].as_str().unwrap()),
        )
        .await;
    assert_eq!(view["status"], "QUEUED", "{view}");
    let got = api
        .ok(
            outsider,
            Method::POST,
            "/api/v1/agents/outsider/wait",
            json!({"timeout_seconds": 5}),
        )
        .await;
    assert_eq!(got["task"]["task_id"], sent["task_id"], "{got}");
    assert_eq!(
        model.requests().len(),
        2,
        "the model was asked only for the run's task"
    );
    awl.shutdown().await.unwrap();
}

/// The example tools and agents of the repository load (and the example tool runs).
#[tokio::test]
async fn the_example_tools_and_agents_load() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let registry = Registry::load(&root.join("tools"), Runners::new(RunnersConfig::default()))
        .expect("tools/ loads");
    let agents = load_dir(&root.join("agents"), &registry).expect("agents/ loads");
    assert!(agents.iter().any(|a| a.name() == "assistant"));
    let counted = registry
        .call(
            "word_count",
            &json!({"text": "to be or not to be"}),
            awl::tools::CallContext {
                run_id: awl::domain::ids::RunId::new(),
                call_key: "example",
                mask: &awl::vault::mask::NO_SECRETS,
            },
        )
        .await
        .expect("word_count runs");
    assert_eq!(counted.output["json"], json!({"words": 6}));
}

async fn an_agent_is_asked_over_mcp_with_progress_for_each_phase(backend: Backend) {
    use crate::support::server::{config, serve_with, token};
    use awl::auth::Role;

    let python = std::env::var("AWL_TEST_PYTHON").expect(
        "AWL_TEST_PYTHON names the Python with the official MCP SDK (scripts/test sets it)",
    );
    let db = TestStore::new(backend).await;
    let model = ScriptedServer::start([
        Scripted::tool_calls(&[("word_count", r#"{"text": "a b c d"}"#)]),
        Scripted::text("Four."),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (registry, definitions) = declared(dir.path(), &model, "", "  stream: true\n");
    let mut config = config();
    config.agents = definitions;
    config.tools = Some(registry);
    let operator = token(&db.store, "ops", Role::Operator).await;
    let agent = token(&db.store, "py-agent", Role::Agent).await;
    let server = serve_with(&db.store, config, system_clock()).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/ask_agent.py");
    let mut cmd = tokio::process::Command::new(&python);
    cmd.arg(script)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp"))
        .env("AWL_MCP_URL", format!("http://{}/mcp", server.addr))
        .env("AWL_OPERATOR_TOKEN", &operator)
        .env("AWL_AGENT_TOKEN", &agent)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = crate::support::within(120, "tests/mcp/ask_agent.py", cmd.output())
        .await
        .unwrap_or_else(|e| panic!("cannot run {python} {script}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("ask_agent.py: ok"),
        "ask_agent.py failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    server.shutdown().await.unwrap();
}

/// Model use, counted by the model_use projection from the solves' events: per model,
/// agent and workflow (a workflow's agent step done by the built-in agent, and a
/// question asked directly), the solves listed with what they worked for, and the
/// projection equal to a fold of the log.
async fn model_use_is_counted_per_model_agent_and_workflow(backend: Backend) {
    use crate::support::server::{Api, config, serve_with, tokens};
    use crate::support::wait_for;
    use reqwest::Method;

    let db = TestStore::new(backend).await;
    let model = ScriptedServer::start([
        Scripted::tool_calls(&[("word_count", r#"{"text": "one two three"}"#)]),
        Scripted::text("3 words."),
        Scripted::text("Hello."),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let price = "  price: {input_per_million: 1000, output_per_million: 2000}\n";
    let (registry, definitions) = declared(dir.path(), &model, "board: true\n", price);
    let file = dir.path().join("count-words.awl.yaml");
    std::fs::write(&file, BUILTIN_WORKFLOW).unwrap();
    awl::definitions::register_file(&db.store, &file, "test", chrono::Utc::now())
        .await
        .expect("register");
    let tk = tokens(&db.store, &[]).await;
    let mut config = config();
    config.tools = Some(registry);
    config.agents = definitions;
    config.worker = Some(awl::executor::WorkerConfig::new("model-use-test"));
    let awl = serve_with(&db.store, config, system_clock()).await;
    let api = Api::of(&awl);

    let started = api
        .ok(
            &tk.operator,
            Method::POST,
            "/api/v1/runs",
            json!({"workflow": "count-words", "inputs": {"text": "one two three"}}),
        )
        .await;
    let run = started["run_id"].as_str().unwrap().to_string();
    wait_for(30, "the run to succeed", async || {
        let view = api
            .fetch(Some(&tk.viewer), &format!("/api/v1/runs/{run}"))
            .await;
        (view["status"] == "SUCCEEDED").then_some(view)
    })
    .await;
    let direct = api
        .ok_post(
            &tk.operator,
            "/api/v1/solve",
            json!({"agent": "counter", "prompt": "Say hello."}),
        )
        .await;
    assert_eq!(direct["status"], "finished", "{direct}");

    // The solves, newest first, with what they worked for.
    let solves = wait_for(10, "both solves in the view", async || {
        let page = api
            .fetch(Some(&tk.viewer), "/api/v1/views/solves?status=finished")
            .await;
        (page["rows"].as_array().map(Vec::len) == Some(2)).then_some(page)
    })
    .await;
    let rows = solves["rows"].as_array().unwrap();
    assert_eq!(rows[0]["solve_id"], direct["solve_id"], "{solves:#}");
    assert_eq!(rows[0]["workflow"], "");
    assert!(rows[0]["task_id"].is_null());
    assert_eq!(rows[1]["workflow"], "count-words", "{solves:#}");
    assert_eq!(rows[1]["run_id"], run.as_str());
    assert!(rows[1]["task_id"].is_string());
    assert_eq!(
        (
            rows[1]["model_calls"].clone(),
            rows[1]["tool_calls"].clone()
        ),
        (json!(2), json!(1))
    );
    let solve_of_run = api
        .get(
            Some(&tk.viewer),
            &format!("/api/v1/solves/{}", rows[1]["solve_id"].as_str().unwrap()),
        )
        .await;
    assert_eq!(solve_of_run["workflow"], "count-words", "{solve_of_run}");

    // Per model: every call, the tokens and cost the solves themselves report.
    let per_model = api
        .get(Some(&tk.viewer), "/api/v1/views/analytics/models?by=model")
        .await;
    assert_eq!(per_model.as_array().unwrap().len(), 1, "{per_model:#}");
    let small = &per_model[0];
    assert_eq!(small["key"], "small");
    assert_eq!(
        (small["solves"].clone(), small["finished"].clone()),
        (json!(2), json!(2))
    );
    assert_eq!(small["calls"], 3);
    assert_eq!(small["retries"], 0);
    let total =
        |field: &str| solve_of_run[field].as_u64().unwrap() + direct[field].as_u64().unwrap();
    assert_eq!(
        small["tokens_in"].as_u64(),
        Some(total("tokens_in")),
        "{small}"
    );
    assert_eq!(
        small["tokens_out"].as_u64(),
        Some(total("tokens_out")),
        "{small}"
    );
    let cost = solve_of_run["cost_usd"].as_f64().unwrap() + direct["cost_usd"].as_f64().unwrap();
    assert!(cost > 0.0);
    assert!(
        (small["cost_usd"].as_f64().unwrap() - cost).abs() < 1e-9,
        "{small}"
    );
    assert!(
        small["p50_latency_ms"].is_i64() && small["max_latency_ms"].is_i64(),
        "{small}"
    );
    assert!(small["p50_latency_ms"].as_i64() <= small["max_latency_ms"].as_i64());
    assert_eq!(small["by_day"].as_array().unwrap().len(), 1);
    assert_eq!(small["by_day"][0]["calls"], 3);

    // Per agent and per workflow.
    let per_agent = api
        .get(Some(&tk.viewer), "/api/v1/views/analytics/models?by=agent")
        .await;
    assert_eq!(per_agent[0]["key"], "counter");
    assert_eq!(per_agent[0]["calls"], 3);
    let per_workflow = api
        .get(
            Some(&tk.viewer),
            "/api/v1/views/analytics/models?by=workflow",
        )
        .await;
    let calls: Vec<(String, i64)> = per_workflow
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["key"].as_str().unwrap().to_string(),
                w["calls"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(calls, [("".to_string(), 1), ("count-words".to_string(), 2)]);
    let one = api
        .get(
            Some(&tk.viewer),
            "/api/v1/views/analytics/models?by=agent&workflow=count-words",
        )
        .await;
    assert_eq!(one[0]["calls"], 2, "{one}");
    let (status, body) = api
        .call(
            Some(&tk.viewer),
            Method::GET,
            "/api/v1/views/analytics/models?by=colour",
            None,
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::BAD_REQUEST, "{body}");
    awl.shutdown().await.unwrap();

    // The projection is what a fold of the log gives.
    let differences = awl::projections::Projections::new(db.store.clone())
        .verify("model_use")
        .await
        .expect("verify");
    assert!(differences.is_empty(), "{differences:?}");
}

/// A question asked directly whose process died mid-solve is carried on by a server
/// once it has been idle past the limit, without asking the model again for what was
/// recorded.
async fn a_direct_solve_whose_process_died_is_carried_on_by_a_server(backend: Backend) {
    use crate::support::server::{Api, config, serve_with, tokens};
    use crate::support::wait_for;

    let db = TestStore::new(backend).await;
    let model = ScriptedServer::start([
        Scripted::tool_calls(&[
            ("echo", r#"{"message": "fast"}"#),
            ("slow_count", r#"{"text": "a b"}"#),
        ]),
        Scripted::text("Two words."),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (registry, definitions) = declared(dir.path(), &model, "", "");
    let agents = Agents::new(
        db.store.clone(),
        definitions.clone(),
        registry.clone(),
        system_clock(),
    )
    .unwrap();
    let id = SolveId::new();
    cut_off_during_execute(&agents, id).await;
    drop(agents);

    let tk = tokens(&db.store, &[]).await;
    let mut config = config();
    config.tools = Some(registry);
    config.agents = definitions;
    config.solve_abandoned_after = Some(Duration::from_secs(1));
    let awl = serve_with(&db.store, config, system_clock()).await;
    let api = Api::of(&awl);
    let done = wait_for(30, "the solve to be carried on", async || {
        let solve = api
            .fetch(Some(&tk.viewer), &format!("/api/v1/solves/{id}"))
            .await;
        (solve["status"] == "finished").then_some(solve)
    })
    .await;
    assert_eq!(done["message"], "Two words.", "{done}");
    assert_eq!(
        model.requests().len(),
        2,
        "the recorded reply was not asked again"
    );
    let events = recorded(&db.store, id).await;
    assert_eq!(
        events
            .iter()
            .filter(|e| *e == "solve.tool_finished")
            .count(),
        2,
        "the recorded call was not run again: {events:?}"
    );
    awl.shutdown().await.unwrap();
}
