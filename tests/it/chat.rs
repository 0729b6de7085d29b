//! Chat end to end on both stores: `awl serve` (the binary) with a chat file whose
//! Slack and Discord are the local stand-in (`support::chat`, the services' documented
//! request and response shapes). A gate is posted to both with Approve and Reject
//! buttons; requests with a forged, stale or replayed signature are refused; an
//! unmapped user and a viewer are refused; a mapped user's click decides the gate (the
//! event records who), both messages are edited in place without buttons, and a later
//! click says who decided. A reject through Discord's form fails the run, which is
//! posted. A task's questions are answered from Slack's form and from a reply in the
//! question's thread, its review decided with a button; slash commands answer; a
//! notify step and `awl chat test` post to a channel by name; a 429 is waited out; a
//! chat service that is down never holds a run up, and the failed delivery is
//! recorded. Webhook channels of both services (Slack's cannot be edited: the outcome
//! follows), a Discord 429, a Discord question answered by a reply to its message,
//! `/awl status` from both. Two servers on one store post each notice once.

use std::process::Stdio;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::chat::{
    ChatMessage, ChatServer, DISCORD_APPLICATION_ID, DISCORD_BOT_TOKEN, DiscordKey, Platform,
    SLACK_BOT_TOKEN, SLACK_TEAM_ID, discord_command, discord_component, discord_modal_submit,
    slack_block_action, slack_form, slack_message_event, slack_signed_headers, slack_slash_command,
    slack_url_verification, slack_view_submission, unix_now,
};
use crate::support::cli::Awl;
use crate::support::server::{Api, free_port};
use crate::support::{Backend, TestStore, on_both_stores, wait_for, within};

on_both_stores!(worker_threads = 2;
    gates_are_decided_from_slack_and_discord_and_their_messages_follow,
    questions_reviews_and_commands_from_chat_and_a_chat_outage_holds_nothing_up,
    webhooks_of_both_services_a_discord_rate_limit_and_status_commands,
    two_servers_post_each_notice_once,
);

const SIGNING_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
const SLACK_CHANNEL: &str = "C0AWL0001";
const DISCORD_CHANNEL: &str = "100000000000000001";

const RELEASE: &str = r#"
name: release
version: "1.0.0"
inputs:
  version: {type: string, required: true}
steps:
  - id: approve
    type: gate
    message: "Ship ${{ inputs.version }}?"
  - id: ship
    type: tool
    tool: echo
    inputs: {message: "shipped"}
chat:
  - {events: [run_failed], channel: dev}
"#;

const ANNOUNCE: &str = r#"
name: announce
version: "1.0.0"
inputs:
  version: {type: string, required: true}
steps:
  - id: tell
    type: notify
    message: "Released ${{ inputs.version }}"
    mentions: [release-team]
    chat: dev
"#;

/// A server on `t` with a chat file pointing at `chat` (and `extra` channels and
/// routes lines), the workflow above registered.
struct Setup {
    awl: Awl,
    api: Api,
    base: String,
    key: DiscordKey,
    chat_file: std::path::PathBuf,
    _serve: tokio::process::Child,
    _dir: tempfile::TempDir,
}

async fn setup(
    t: &TestStore,
    chat: &ChatServer,
    extra_channels: &str,
    extra_routes: &str,
) -> Setup {
    let awl = Awl::bounded(&t.location, 60);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("release.awl.yaml"), RELEASE).unwrap();
    std::fs::write(dir.path().join("announce.awl.yaml"), ANNOUNCE).unwrap();
    let key = DiscordKey::generate();
    let file = format!(
        "slack:\n  bot_token_env: TEST_SLACK_TOKEN\n  signing_secret_env: TEST_SLACK_SECRET\n  api_base: {}\n\
         discord:\n  bot_token_env: TEST_DISCORD_TOKEN\n  application_id: \"{DISCORD_APPLICATION_ID}\"\n  public_key: {}\n  api_base: {}\n\
         channels:\n  ops: {{slack: {SLACK_CHANNEL}}}\n  dev: {{discord: \"{DISCORD_CHANNEL}\"}}\n{extra_channels}\
         notify:\n  - {{events: [gate_waiting, run_failed, task_blocked, review_requested], channel: ops}}\n  - {{events: [gate_waiting], channel: dev, workflows: [release]}}\n{extra_routes}",
        chat.slack_api_base(),
        key.public_key_hex(),
        chat.discord_api_base(),
    );
    let chat_file = dir.path().join("chat.yaml");
    std::fs::write(&chat_file, file).unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let serve = awl
        .command(&[
            "serve",
            "--bind",
            &format!("127.0.0.1:{port}"),
            "--workflows",
            &dir.path().to_string_lossy(),
            "--chat-config",
            &chat_file.to_string_lossy(),
        ])
        .env("TEST_SLACK_TOKEN", SLACK_BOT_TOKEN)
        .env("TEST_SLACK_SECRET", SIGNING_SECRET)
        .env("TEST_DISCORD_TOKEN", DISCORD_BOT_TOKEN)
        .env("TEST_DOWN_WEBHOOK", "http://127.0.0.1:9/hooks/down")
        .env("TEST_SLACK_WEBHOOK", chat.slack_webhook_url())
        .env("TEST_DISCORD_WEBHOOK", chat.discord_webhook_url())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start awl serve");
    let api = Api::at(base.clone());
    api.wait_healthy(30).await;
    for (platform, user, name, role) in [
        ("slack", "U0ADA", "ada", "operator"),
        ("slack", "U0VIC", "vic", "viewer"),
        ("discord", "500000000000000001", "bob", "operator"),
    ] {
        awl.ok(&[
            "chat", "users", "add", platform, user, "--as", name, "--role", role,
        ])
        .await;
    }
    Setup {
        awl,
        api,
        base,
        key,
        chat_file,
        _serve: serve,
        _dir: dir,
    }
}

impl Setup {
    async fn slack(&self, path: &str, body: &str, timestamp: i64) -> (StatusCode, String) {
        let mut request = reqwest::Client::new()
            .post(format!("{}/api/v1/chat/slack/{path}", self.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body.to_string());
        for (name, value) in slack_signed_headers(SIGNING_SECRET, timestamp, body) {
            request = request.header(name, value);
        }
        let response = request.send().await.unwrap();
        (response.status(), response.text().await.unwrap())
    }

    async fn slack_raw(&self, path: &str, body: &str, headers: &[(&str, String)]) -> StatusCode {
        let mut request = reqwest::Client::new()
            .post(format!("{}/api/v1/chat/slack/{path}", self.base))
            .body(body.to_string());
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        request.send().await.unwrap().status()
    }

    async fn discord(&self, interaction: &Value) -> (StatusCode, Value) {
        let body = interaction.to_string();
        let timestamp = unix_now().to_string();
        let mut request = reqwest::Client::new()
            .post(format!("{}/api/v1/chat/discord/interactions", self.base))
            .header("content-type", "application/json")
            .body(body.clone());
        for (name, value) in self.key.signed_headers(&timestamp, &body) {
            request = request.header(name, value);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn start_run(&self, version: &str) -> String {
        let started = self
            .api
            .post(
                None,
                "/api/v1/runs",
                json!({"workflow": "release", "inputs": {"version": version}}),
            )
            .await;
        started["run_id"].as_str().unwrap().to_string()
    }

    async fn run_status(&self, run: &str) -> Value {
        self.api.fetch(None, &format!("/api/v1/runs/{run}")).await
    }
}

/// A task sent (`task`: the request's body), taken by a new agent `agent` with the
/// task's capabilities, which asks `question`: the task's id.
async fn blocked_task(s: &Setup, agent: &str, task: Value, question: &str) -> String {
    let capabilities = task["capabilities"].clone();
    let task = s.api.post(None, "/api/v1/tasks", task).await;
    let task_id = task["task_id"].as_str().unwrap().to_string();
    s.api
        .post(
            None,
            "/api/v1/agents",
            json!({"agent_id": agent, "capabilities": capabilities}),
        )
        .await;
    let got = s
        .api
        .post(
            None,
            &format!("/api/v1/agents/{agent}/wait"),
            json!({"timeout_seconds": 5}),
        )
        .await;
    assert_eq!(got["task"]["task_id"], task_id.as_str(), "{got}");
    s.api
        .post(
            None,
            &format!("/api/v1/tasks/{task_id}/ack"),
            json!({"agent_id": agent}),
        )
        .await;
    s.api
        .post(
            None,
            &format!("/api/v1/tasks/{task_id}/questions"),
            json!({"agent_id": agent, "question": question}),
        )
        .await;
    task_id
}

/// Wait until task `task_id` was answered (IN_PROGRESS again) and its question's
/// message `message` on `platform` says `line`, its buttons gone.
async fn answered(
    s: &Setup,
    chat: &ChatServer,
    task_id: &str,
    platform: Platform,
    message: &str,
    line: &str,
) {
    wait_for(20, "the answer to reach the task", async || {
        let task = s.api.fetch(None, &format!("/api/v1/tasks/{task_id}")).await;
        (task["status"] == "IN_PROGRESS").then_some(())
    })
    .await;
    wait_for(
        20,
        &format!("the question's message to say {line:?}"),
        async || {
            chat.message(platform, message)
                .filter(|m| m.text.contains(line) && !has_buttons(m))
        },
    )
    .await;
}

/// The message of `platform` whose current text has `needle`.
async fn message_with(chat: &ChatServer, platform: Platform, needle: &str) -> ChatMessage {
    wait_for(
        20,
        &format!("a {platform:?} message with {needle:?}"),
        async || {
            chat.messages()
                .into_iter()
                .find(|m| m.platform == platform && !m.ephemeral && m.text.contains(needle))
        },
    )
    .await
}

fn has_buttons(m: &ChatMessage) -> bool {
    let text = m.blocks.to_string();
    text.contains("\"actions\"") || text.contains("custom_id")
}

/// The action id of a message's button `prefix` (`gate.approve`).
fn button(m: &ChatMessage, prefix: &str) -> String {
    let text = m.blocks.to_string();
    let at = text
        .find(&format!("{prefix}:"))
        .unwrap_or_else(|| panic!("{prefix} in {text}"));
    text[at..].split('"').next().unwrap().to_string()
}

async fn gates_are_decided_from_slack_and_discord_and_their_messages_follow(backend: Backend) {
    let t = TestStore::new(backend).await;
    let chat = ChatServer::start().await;
    let s = setup(&t, &chat, "", "").await;
    let run = s.start_run("1.2.0").await;

    let slack = message_with(&chat, Platform::Slack, "Ship 1.2.0?").await;
    let discord = message_with(&chat, Platform::Discord, "Ship 1.2.0?").await;
    assert!(
        has_buttons(&slack) && has_buttons(&discord),
        "{slack:?}\n{discord:?}"
    );
    assert_eq!(slack.channel, SLACK_CHANNEL);
    assert_eq!(discord.channel, DISCORD_CHANNEL);
    let approve = button(&slack, "gate.approve");
    assert_eq!(approve, button(&discord, "gate.approve"));

    let click = |user: &str| {
        slack_form(&slack_block_action(
            user,
            user,
            SLACK_TEAM_ID,
            SLACK_CHANNEL,
            &slack.id,
            &approve,
            &approve,
            "1.2.3",
            &chat.slack_response_url(SLACK_CHANNEL, &slack.id),
        ))
    };

    // Requests that do not prove they come from Slack are refused, and decide nothing.
    let body = click("U0ADA");
    let forged = slack_signed_headers("not the secret", unix_now(), &body);
    assert_eq!(
        s.slack_raw("interactions", &body, &forged).await,
        StatusCode::UNAUTHORIZED
    );
    let stale = unix_now() - 600;
    assert_eq!(
        s.slack("interactions", &body, stale).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        s.slack_raw("interactions", &body, &[]).await,
        StatusCode::UNAUTHORIZED
    );

    // An unmapped user and a viewer are told no, privately.
    assert_eq!(
        s.slack("interactions", &click("U0NOBODY"), unix_now())
            .await
            .0,
        StatusCode::OK
    );
    assert_eq!(
        s.slack("interactions", &click("U0VIC"), unix_now()).await.0,
        StatusCode::OK
    );
    let refusals = wait_for(10, "two private refusals", async || {
        let found: Vec<ChatMessage> = chat
            .messages()
            .into_iter()
            .filter(|m| m.ephemeral)
            .collect();
        (found.len() == 2).then_some(found)
    })
    .await;
    assert!(
        refusals[0].text.contains("not an awl user"),
        "{:?}",
        refusals[0]
    );
    assert_eq!(refusals[0].user.as_deref(), Some("U0NOBODY"));
    assert!(refusals[1].text.contains("may not"), "{:?}", refusals[1]);
    assert_eq!(s.run_status(&run).await["status"], "WAITING");

    // ada approves; the event says so; both messages lose their buttons in place.
    let signed_at = unix_now();
    let (status, _) = s.slack("interactions", &body, signed_at).await;
    assert_eq!(status, StatusCode::OK);
    let done = wait_for(20, "the run to finish", async || {
        let view = s.run_status(&run).await;
        (view["status"] == "SUCCEEDED").then_some(view)
    })
    .await;
    assert!(
        done.to_string().contains("\"ada\""),
        "the decision records ada: {done}"
    );
    for (platform, id) in [
        (Platform::Slack, &slack.id),
        (Platform::Discord, &discord.id),
    ] {
        let edited = wait_for(20, "the message edited", async || {
            chat.message(platform, id)
                .filter(|m| m.text.contains("Approved by ada"))
        })
        .await;
        assert!(!has_buttons(&edited), "no stale buttons: {edited:?}");
        assert_eq!(
            edited.versions.len(),
            1,
            "edited once, in place: {edited:?}"
        );
    }
    // The same signed request again is a replay.
    assert_eq!(
        s.slack("interactions", &body, signed_at).await.0,
        StatusCode::UNAUTHORIZED
    );

    // A click on the decided gate from Discord says who decided it.
    let (status, answer) = s
        .discord(&discord_component(
            DISCORD_APPLICATION_ID,
            "600000000000000001",
            "token-1",
            "500000000000000001",
            "bob",
            DISCORD_CHANNEL,
            &discord.id,
            &approve,
            Some("700000000000000001"),
        ))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer["type"], 4, "{answer}");
    assert_eq!(answer["data"]["flags"], 64);
    assert!(
        answer["data"]["content"]
            .as_str()
            .unwrap()
            .contains("Already approved by ada"),
        "{answer}"
    );

    // bob rejects a second release through Discord's form: the run fails, and that is
    // posted too.
    let second = s.start_run("2.0.0").await;
    let waiting = message_with(&chat, Platform::Discord, "Ship 2.0.0?").await;
    let reject = button(&waiting, "gate.reject");
    let (_, form) = s
        .discord(&discord_component(
            DISCORD_APPLICATION_ID,
            "600000000000000002",
            "token-2",
            "500000000000000001",
            "bob",
            DISCORD_CHANNEL,
            &waiting.id,
            &reject,
            Some("700000000000000001"),
        ))
        .await;
    assert_eq!(form["type"], 9, "a form asks why: {form}");
    assert_eq!(form["data"]["custom_id"], reject.as_str());
    let (_, done) = s
        .discord(&discord_modal_submit(
            DISCORD_APPLICATION_ID,
            "600000000000000003",
            "token-3",
            "500000000000000001",
            "bob",
            DISCORD_CHANNEL,
            &reject,
            "text",
            "not on a Friday",
            Some("700000000000000001"),
        ))
        .await;
    assert_eq!(done["type"], 4, "{done}");
    wait_for(20, "the second run to fail", async || {
        (s.run_status(&second).await["status"] == "FAILED").then_some(())
    })
    .await;
    message_with(&chat, Platform::Slack, "release failed").await;
    // The workflow's own route sends its failures to Discord as well.
    message_with(&chat, Platform::Discord, "release failed").await;
    let rejected = wait_for(20, "the gate's messages say who rejected it", async || {
        chat.message(Platform::Discord, &waiting.id)
            .filter(|m| m.text.contains("Rejected by bob: not on a Friday"))
    })
    .await;
    assert!(!has_buttons(&rejected));

    // The log holds what was sent, and `awl check` finds every chat event legal.
    let events = s
        .awl
        .ok(&["events", "--stream-type", "chat", "--json"])
        .await;
    assert!(
        events.contains("chat.posted") && events.contains("chat.updated"),
        "{events}"
    );
    s.awl.ok(&["check"]).await;
}

async fn questions_reviews_and_commands_from_chat_and_a_chat_outage_holds_nothing_up(
    backend: Backend,
) {
    let t = TestStore::new(backend).await;
    let chat = ChatServer::start().await;
    chat.rate_limit_next(Platform::Slack, 1, Duration::from_secs(1));
    let s = setup(
        &t,
        &chat,
        "  down: {slack_webhook_env: TEST_DOWN_WEBHOOK}\n",
        "  - {events: [gate_waiting], channel: down}\n",
    )
    .await;

    // A task asks a question: posted with an Answer button, answered from Slack's form.
    let task_id = blocked_task(
        &s,
        "coder",
        json!({"prompt": "add a health endpoint", "capabilities": ["rust"], "review_required": true}),
        "Which port?",
    )
    .await;
    let asked = message_with(&chat, Platform::Slack, "Which port?").await;
    let waited = chat.waits_after_rate_limit(Platform::Slack);
    assert!(
        waited
            .first()
            .is_some_and(|w| *w >= Duration::from_millis(900)),
        "the 429's Retry-After was waited out: {waited:?}"
    );
    let answer = button(&asked, "question.answer");
    let (status, _) = s
        .slack(
            "interactions",
            &slack_form(&slack_block_action(
                "U0ADA",
                "ada",
                SLACK_TEAM_ID,
                SLACK_CHANNEL,
                &asked.id,
                &answer,
                &answer,
                "trigger-1",
                &chat.slack_response_url(SLACK_CHANNEL, &asked.id),
            )),
            unix_now(),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let view = wait_for(10, "the answer form", async || {
        chat.views().into_iter().next()
    })
    .await;
    assert_eq!(view.view["callback_id"], answer.as_str(), "{:?}", view.view);
    let (status, body) = s
        .slack(
            "interactions",
            &slack_form(&slack_view_submission(
                "U0ADA",
                &answer,
                SLACK_CHANNEL,
                "text",
                "text",
                "port 8080",
            )),
            unix_now(),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let view_task = s.api.fetch(None, &format!("/api/v1/tasks/{task_id}")).await;
    assert_eq!(view_task["status"], "IN_PROGRESS", "answered: {view_task}");
    wait_for(20, "the question's message says the answer", async || {
        chat.message(Platform::Slack, &asked.id)
            .filter(|m| m.text.contains("Answered by ada: port 8080") && !has_buttons(m))
    })
    .await;

    // Slack's URL check, then a second question answered by a reply in its thread
    // (an unmapped user's reply answers nothing).
    let (_, checked) = s
        .slack(
            "events",
            &slack_url_verification("the-challenge").to_string(),
            unix_now(),
        )
        .await;
    assert!(checked.contains("the-challenge"), "{checked}");
    s.api
        .post(
            None,
            &format!("/api/v1/tasks/{task_id}/questions"),
            json!({"agent_id": "coder", "question": "Which path?"}),
        )
        .await;
    let second = message_with(&chat, Platform::Slack, "Which path?").await;
    let reply = |user: &str, text: &str, ts: &str| {
        slack_message_event(
            user,
            SLACK_CHANNEL,
            text,
            ts,
            Some(&second.id),
            &format!("Ev{user}"),
        )
        .to_string()
    };
    let (status, _) = s
        .slack(
            "events",
            &reply("U0NOBODY", "/", "1800000000.000001"),
            unix_now(),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let blocked = s.api.fetch(None, &format!("/api/v1/tasks/{task_id}")).await;
    assert_eq!(
        blocked["status"], "BLOCKED",
        "an unmapped reply answers nothing: {blocked}"
    );
    s.slack(
        "events",
        &reply("U0ADA", "/health", "1800000000.000002"),
        unix_now(),
    )
    .await;
    answered(
        &s,
        &chat,
        &task_id,
        Platform::Slack,
        &second.id,
        "Answered by ada: /health",
    )
    .await;

    // Work in review, approved with a click.
    s.api
        .post(
            None,
            &format!("/api/v1/tasks/{task_id}/submit"),
            json!({"agent_id": "coder", "summary": "GET /health answers 200"}),
        )
        .await;
    let review = message_with(&chat, Platform::Slack, "GET /health answers 200").await;
    let approve = button(&review, "review.approve");
    s.slack(
        "interactions",
        &slack_form(&slack_block_action(
            "U0ADA",
            "ada",
            SLACK_TEAM_ID,
            SLACK_CHANNEL,
            &review.id,
            &approve,
            &approve,
            "trigger-2",
            &chat.slack_response_url(SLACK_CHANNEL, &review.id),
        )),
        unix_now(),
    )
    .await;
    wait_for(20, "the review's message says who approved", async || {
        chat.message(Platform::Slack, &review.id)
            .filter(|m| m.text.contains("Approved by ada") && !has_buttons(m))
    })
    .await;

    // A task cancelled while it asks: its question's buttons go too.
    let other_id = blocked_task(
        &s,
        "dba",
        json!({"prompt": "migrate the db", "capabilities": ["db"]}),
        "Which database?",
    )
    .await;
    let open = message_with(&chat, Platform::Slack, "Which database?").await;
    assert!(has_buttons(&open));
    s.api
        .post(
            None,
            &format!("/api/v1/tasks/{other_id}/cancel"),
            json!({"reason": "not now"}),
        )
        .await;
    wait_for(20, "the question's message closed", async || {
        chat.message(Platform::Slack, &open.id)
            .filter(|m| m.text.contains("cancelled before an answer") && !has_buttons(m))
    })
    .await;
    assert!(
        chat.message(Platform::Slack, &asked.id)
            .is_some_and(|m| m.text.contains("Answered by ada: port 8080")),
        "an answered question keeps its answer"
    );

    // Slash commands.
    let command = |text: &str| {
        slack_slash_command(
            "U0ADA",
            "ada",
            SLACK_TEAM_ID,
            SLACK_CHANNEL,
            "/awl",
            text,
            "",
            "trigger-3",
        )
    };
    let (_, sent) = s
        .slack("commands", &command("send write the changelog"), unix_now())
        .await;
    let sent: Value = serde_json::from_str(&sent).unwrap();
    assert!(sent["text"].as_str().unwrap().contains("queued"), "{sent}");
    let (_, listed) = s.slack("commands", &command("tasks"), unix_now()).await;
    assert!(listed.contains("write the changelog"), "{listed}");
    let (_, refused) = s
        .slack(
            "commands",
            &slack_slash_command(
                "U0NOBODY",
                "x",
                SLACK_TEAM_ID,
                SLACK_CHANNEL,
                "/awl",
                "tasks",
                "",
                "t",
            ),
            unix_now(),
        )
        .await;
    assert!(refused.contains("not an awl user"), "{refused}");

    // A workflow's notify step posts to a chat channel by name; `awl chat test` too.
    let announced = s
        .api
        .post(
            None,
            "/api/v1/runs",
            json!({"workflow": "announce", "inputs": {"version": "9.9"}}),
        )
        .await;
    let announced = announced["run_id"].as_str().unwrap().to_string();
    wait_for(20, "the announce run to succeed", async || {
        (s.run_status(&announced).await["status"] == "SUCCEEDED").then_some(())
    })
    .await;
    let posted = message_with(&chat, Platform::Discord, "Released 9.9").await;
    assert_eq!(posted.channel, DISCORD_CHANNEL);
    assert!(posted.text.contains("@release-team"), "{posted:?}");
    let tested = s
        .awl
        .command(&[
            "chat",
            "test",
            "ops",
            "--chat-config",
            &s.chat_file.to_string_lossy(),
        ])
        .env("TEST_SLACK_TOKEN", SLACK_BOT_TOKEN)
        .output()
        .await
        .unwrap();
    assert!(
        tested.status.success(),
        "{}",
        String::from_utf8_lossy(&tested.stderr)
    );
    message_with(&chat, Platform::Slack, "awl can post to `ops`").await;
    let refused = s
        .awl
        .command(&[
            "chat",
            "test",
            "nowhere",
            "--chat-config",
            &s.chat_file.to_string_lossy(),
        ])
        .output()
        .await
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("no chat channel named `nowhere`"));

    // A channel that is down: the run is not held up; the failure is recorded.
    let run = s.start_run("3.0.0").await;
    message_with(&chat, Platform::Slack, "Ship 3.0.0?").await;
    let events = wait_for(30, "the failed delivery recorded", async || {
        let events = s
            .awl
            .ok(&["events", "--stream-type", "chat", "--json"])
            .await;
        events.contains("chat.delivery_failed").then_some(events)
    })
    .await;
    assert!(events.to_string().contains("network"), "{events}");
    let status = s.run_status(&run).await;
    assert_eq!(
        status["status"], "WAITING",
        "the run waits at its gate, not for chat: {status}"
    );
}

/// Webhook channels: Slack's (its messages cannot be edited, so the outcome follows
/// as a new message) and Discord's (edited in place); a Discord 429 waited out; the
/// status of a run asked from both services.
async fn webhooks_of_both_services_a_discord_rate_limit_and_status_commands(backend: Backend) {
    let t = TestStore::new(backend).await;
    let chat = ChatServer::start().await;
    chat.rate_limit_next(Platform::Discord, 1, Duration::from_millis(600));
    let s = setup(
        &t,
        &chat,
        "  swh: {slack_webhook_env: TEST_SLACK_WEBHOOK}\n  dwh: {discord_webhook_env: TEST_DISCORD_WEBHOOK}\n",
        "  - {events: [gate_waiting], channel: swh}\n  - {events: [gate_waiting], channel: dwh}\n  - {events: [task_blocked], channel: dev}\n",
    )
    .await;
    let run = s.start_run("5.0").await;
    let slack_hook = wait_for(20, "the Slack webhook's message", async || {
        chat.messages().into_iter().find(|m| {
            m.platform == Platform::Slack && m.channel == "webhook" && m.text.contains("Ship 5.0?")
        })
    })
    .await;
    assert!(has_buttons(&slack_hook), "{slack_hook:?}");
    let discord_hook = wait_for(20, "the Discord webhook's message", async || {
        chat.messages().into_iter().find(|m| {
            m.platform == Platform::Discord
                && m.webhook_id.is_some()
                && m.text.contains("Ship 5.0?")
        })
    })
    .await;
    let waited = chat.waits_after_rate_limit(Platform::Discord);
    assert!(
        waited
            .first()
            .is_some_and(|w| *w >= Duration::from_millis(550)),
        "Discord's retry_after was waited out: {waited:?}"
    );
    let gate = button(&discord_hook, "gate.approve")
        .trim_start_matches("gate.approve:")
        .to_string();
    s.awl.ok(&["approve", &gate, "--by", "carol"]).await;
    wait_for(20, "the Discord webhook's message edited", async || {
        chat.message(Platform::Discord, &discord_hook.id)
            .filter(|m| m.text.contains("Approved by carol") && !has_buttons(m))
    })
    .await;
    let follow_up = wait_for(
        20,
        "the outcome after the Slack webhook's message",
        async || {
            chat.messages().into_iter().find(|m| {
                m.platform == Platform::Slack
                    && m.channel == "webhook"
                    && m.text.contains("Approved by carol")
            })
        },
    )
    .await;
    assert!(!has_buttons(&follow_up), "{follow_up:?}");
    assert!(
        chat.message(Platform::Slack, &slack_hook.id)
            .is_some_and(|m| m.versions.is_empty()),
        "a webhook's message is not edited"
    );
    wait_for(20, "the run to finish", async || {
        (s.run_status(&run).await["status"] == "SUCCEEDED").then_some(())
    })
    .await;

    // A question in Discord answered by a reply to its message (read back by awl: an
    // HTTP-only bot is not sent channel messages); an unmapped user's reply is told no
    // in the thread.
    let task_id = blocked_task(
        &s,
        "deployer",
        json!({"prompt": "deploy", "capabilities": ["ops"]}),
        "Which region?",
    )
    .await;
    let asked = wait_for(20, "the question in the Discord channel", async || {
        chat.messages().into_iter().find(|m| {
            m.platform == Platform::Discord
                && m.channel == DISCORD_CHANNEL
                && m.webhook_id.is_none()
                && m.text.contains("Which region?")
        })
    })
    .await;
    let stranger =
        chat.discord_user_reply(DISCORD_CHANNEL, "999000000000000001", "eu-west", &asked.id);
    wait_for(20, "the stranger told no in the thread", async || {
        chat.messages().into_iter().find(|m| {
            m.thread.as_deref() == Some(stranger.as_str()) && m.text.contains("not an awl user")
        })
    })
    .await;
    let blocked = s.api.fetch(None, &format!("/api/v1/tasks/{task_id}")).await;
    assert_eq!(blocked["status"], "BLOCKED", "{blocked}");
    chat.discord_user_reply(
        DISCORD_CHANNEL,
        "500000000000000001",
        "eu-west-3",
        &asked.id,
    );
    answered(
        &s,
        &chat,
        &task_id,
        Platform::Discord,
        &asked.id,
        "Answered by bob: eu-west-3",
    )
    .await;

    let (_, status) = s
        .slack(
            "commands",
            &slack_slash_command(
                "U0ADA",
                "ada",
                SLACK_TEAM_ID,
                SLACK_CHANNEL,
                "/awl",
                &format!("status {run}"),
                "",
                "t",
            ),
            unix_now(),
        )
        .await;
    assert!(
        status.contains(&run) && status.contains("release"),
        "{status}"
    );
    let (_, answer) = s
        .discord(&discord_command(
            DISCORD_APPLICATION_ID,
            "600000000000000009",
            "token-9",
            "500000000000000001",
            "bob",
            DISCORD_CHANNEL,
            "status",
            &[("run", json!(run))],
            Some("700000000000000001"),
        ))
        .await;
    assert_eq!(answer["type"], 4, "{answer}");
    let content = answer["data"]["content"].as_str().unwrap_or_default();
    assert!(
        content.contains(&run) && content.contains("release"),
        "{answer}"
    );
}

/// Two servers on one store: one delivers (the notifier's lease), so a gate is posted
/// once, not once per server; when it stops it gives the lease up, and the other
/// delivers at once (not after the lease would have lapsed).
async fn two_servers_post_each_notice_once(backend: Backend) {
    let t = TestStore::new(backend).await;
    let chat = ChatServer::start().await;
    let mut s = setup(&t, &chat, "", "").await;
    let port = free_port();
    let _second = s
        .awl
        .command(&[
            "serve",
            "--bind",
            &format!("127.0.0.1:{port}"),
            "--chat-config",
            &s.chat_file.to_string_lossy(),
        ])
        .env("TEST_SLACK_TOKEN", SLACK_BOT_TOKEN)
        .env("TEST_SLACK_SECRET", SIGNING_SECRET)
        .env("TEST_DISCORD_TOKEN", DISCORD_BOT_TOKEN)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start a second awl serve");
    let second = Api::at(format!("http://127.0.0.1:{port}"));
    second.wait_healthy(30).await;
    for version in ["7.0", "7.1", "7.2"] {
        s.start_run(version).await;
        message_with(&chat, Platform::Slack, &format!("Ship {version}?")).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    for version in ["7.0", "7.1", "7.2"] {
        let posted = chat
            .messages()
            .into_iter()
            .filter(|m| {
                m.platform == Platform::Slack && m.text.contains(&format!("Ship {version}?"))
            })
            .count();
        assert_eq!(posted, 1, "the gate of {version} was posted {posted} times");
    }

    // The first server stops (SIGTERM: a graceful stop); the second posts within
    // seconds, well before the 30 s lease would have lapsed.
    let pid = s._serve.id().expect("the first server's pid").to_string();
    let killed = tokio::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .await
        .unwrap();
    assert!(killed.success());
    within(20, "the first server to stop", s._serve.wait())
        .await
        .unwrap();
    let started = second
        .post(
            None,
            "/api/v1/runs",
            json!({"workflow": "release", "inputs": {"version": "7.3"}}),
        )
        .await;
    assert!(started["run_id"].is_string(), "{started}");
    wait_for(12, "the second server to post", async || {
        chat.messages()
            .into_iter()
            .find(|m| m.platform == Platform::Slack && m.text.contains("Ship 7.3?"))
    })
    .await;
}
