//! The Slack and Discord stand-in (`support::chat`) itself: its answers to real HTTP
//! requests, its errors and 429s, and its signing helpers against Slack's documented
//! example and ring's Ed25519. No database.

use std::time::{Duration, Instant};

use ring::signature::{ED25519, UnparsedPublicKey};
use serde_json::{Value, json};

use crate::support::chat::{
    ChatServer, DISCORD_APPLICATION_ID, DISCORD_BOT_TOKEN, DISCORD_WEBHOOK_CHANNEL, DiscordKey,
    Platform, SLACK_BOT_TOKEN, SLACK_WEBHOOK_CHANNEL, Source, discord_command, discord_component,
    discord_verify, form_decode, slack_block_action, slack_form, slack_signature,
    slack_slash_command,
};

fn http() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// `POST {slack_api_base}/{method}` with the bot token and a JSON body.
async fn slack_call(server: &ChatServer, method: &str, token: Option<&str>, body: Value) -> Value {
    let mut request = http()
        .post(format!("{}/{method}", server.slack_api_base()))
        .header("content-type", "application/json; charset=utf-8")
        .body(body.to_string());
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("the Slack stand-in answers");
    assert_eq!(response.status(), 200, "Slack answers errors with HTTP 200");
    response.json().await.expect("JSON")
}

async fn discord_call(
    server: &ChatServer,
    method: reqwest::Method,
    path: &str,
    token: &str,
    body: Value,
) -> (u16, Value) {
    let response = http()
        .request(method, format!("{}{path}", server.discord_api_base()))
        .header("authorization", format!("Bot {token}"))
        .json(&body)
        .send()
        .await
        .expect("the Discord stand-in answers");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[tokio::test]
async fn a_slack_message_is_posted_then_updated_in_place() {
    let server = ChatServer::start().await;
    let blocks = json!([{"type": "section", "text": {"type": "mrkdwn", "text": "*deploy* waits"}},
                        {"type": "actions", "elements": [{"type": "button", "action_id": "approve",
                         "text": {"type": "plain_text", "text": "Approve"}, "value": "run-1"}]}]);
    let posted = slack_call(
        &server,
        "chat.postMessage",
        Some(SLACK_BOT_TOKEN),
        json!({"channel": "C0AWL0001", "text": "deploy waits", "blocks": blocks}),
    )
    .await;
    assert_eq!(posted["ok"], json!(true), "{posted}");
    assert_eq!(posted["channel"], json!("C0AWL0001"));
    let ts = posted["ts"].as_str().unwrap().to_string();
    assert_eq!(ts, "1700000000.000100");
    assert_eq!(posted["message"]["ts"], json!(ts));
    assert_eq!(posted["message"]["blocks"], blocks);

    let reply = slack_call(
        &server,
        "chat.postMessage",
        Some(SLACK_BOT_TOKEN),
        json!({"channel": "C0AWL0001", "text": "started", "thread_ts": ts}),
    )
    .await;
    let reply_ts = reply["ts"].as_str().unwrap();
    assert!(reply_ts > ts.as_str(), "{reply_ts} after {ts}");
    assert_eq!(reply["message"]["thread_ts"], json!(ts));

    let updated = slack_call(
        &server,
        "chat.update",
        Some(SLACK_BOT_TOKEN),
        json!({"channel": "C0AWL0001", "ts": ts, "text": "approved by ada", "blocks": []}),
    )
    .await;
    assert_eq!(
        (&updated["ok"], &updated["ts"], &updated["text"]),
        (&json!(true), &json!(ts), &json!("approved by ada"))
    );

    let messages = server.messages();
    assert_eq!(messages.len(), 2);
    let first = &messages[0];
    assert_eq!(
        (first.platform, first.channel.as_str()),
        (Platform::Slack, "C0AWL0001")
    );
    assert_eq!(first.text, "approved by ada");
    assert_eq!(first.blocks, json!([]));
    assert_eq!(first.versions.len(), 1);
    assert_eq!(first.versions[0].text, "deploy waits");
    assert_eq!(first.versions[0].blocks, blocks);
    assert_eq!(messages[1].thread.as_deref(), Some(ts.as_str()));

    let missing = slack_call(
        &server,
        "chat.update",
        Some(SLACK_BOT_TOKEN),
        json!({"channel": "C0AWL0001", "ts": "1600000000.000100", "text": "x"}),
    )
    .await;
    assert_eq!(missing, json!({"ok": false, "error": "message_not_found"}));
    let elsewhere = slack_call(
        &server,
        "chat.postMessage",
        Some(SLACK_BOT_TOKEN),
        json!({"channel": "C0NOWHERE", "text": "x"}),
    )
    .await;
    assert_eq!(
        elsewhere,
        json!({"ok": false, "error": "channel_not_found"})
    );

    let ephemeral = slack_call(
        &server,
        "chat.postEphemeral",
        Some(SLACK_BOT_TOKEN),
        json!({"channel": "C0AWL0002", "user": "U0ADA", "text": "only you"}),
    )
    .await;
    assert_eq!(ephemeral["ok"], json!(true));
    let ephemeral = server
        .message(Platform::Slack, ephemeral["message_ts"].as_str().unwrap())
        .unwrap();
    assert!(ephemeral.ephemeral);
    assert_eq!(ephemeral.user.as_deref(), Some("U0ADA"));

    let view = json!({"type": "modal", "callback_id": "reject", "title": {"type": "plain_text", "text": "Reject"},
                      "blocks": [], "private_metadata": "run-1"});
    let opened = slack_call(
        &server,
        "views.open",
        Some(SLACK_BOT_TOKEN),
        json!({"trigger_id": "1.2.abc", "view": view}),
    )
    .await;
    assert_eq!(opened["ok"], json!(true));
    assert!(opened["view"]["id"].as_str().unwrap().starts_with('V'));
    let views = server.views();
    assert_eq!(
        (views[0].trigger.as_str(), &views[0].view),
        ("1.2.abc", &view)
    );

    let requests = server.requests();
    assert_eq!(requests[0].route, "api/chat.postMessage");
    assert_eq!(
        requests[0].header("Authorization"),
        Some(format!("Bearer {SLACK_BOT_TOKEN}").as_str())
    );
    assert_eq!(requests[0].body["channel"], json!("C0AWL0001"));
    assert!(requests.iter().all(|r| r.status == 200));
}

#[tokio::test]
async fn slack_refuses_a_wrong_or_missing_token_as_slack_does() {
    let server = ChatServer::start().await;
    let body = json!({"channel": "C0AWL0001", "text": "hi"});
    let wrong = slack_call(
        &server,
        "chat.postMessage",
        Some("xoxb-wrong"),
        body.clone(),
    )
    .await;
    assert_eq!(wrong, json!({"ok": false, "error": "invalid_auth"}));
    let none = slack_call(&server, "chat.postMessage", None, body).await;
    assert_eq!(none, json!({"ok": false, "error": "not_authed"}));
    assert!(server.messages().is_empty());

    // A form body, with the token as a field and the blocks as JSON text.
    let form = crate::support::chat::form_encode(&[
        ("token", SLACK_BOT_TOKEN),
        ("channel", "C0AWL0002"),
        ("text", "from a form"),
        ("blocks", r#"[{"type":"divider"}]"#),
    ]);
    let response = http()
        .post(format!("{}/chat.postMessage", server.slack_api_base()))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form)
        .send()
        .await
        .unwrap();
    let posted: Value = response.json().await.unwrap();
    assert_eq!(posted["ok"], json!(true), "{posted}");
    let message = &server.messages()[0];
    assert_eq!(message.text, "from a form");
    assert_eq!(message.blocks, json!([{"type": "divider"}]));

    let auth = slack_call(&server, "auth.test", Some(SLACK_BOT_TOKEN), json!({})).await;
    assert_eq!(
        (&auth["ok"], &auth["team_id"]),
        (&json!(true), &json!("T0AWL"))
    );
}

#[tokio::test]
async fn the_slack_incoming_webhook_answers_in_plain_text() {
    let server = ChatServer::start().await;
    let post = |url: String, body: &'static str| async move {
        let response = http()
            .post(url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    };
    let url = server.slack_webhook_url();
    assert_eq!(
        post(url.clone(), r#"{"text": "hello"}"#).await,
        (200, "ok".into())
    );
    assert_eq!(
        post(url.clone(), "{not json").await,
        (400, "invalid_payload".into())
    );
    assert_eq!(
        post(url.clone(), r#"{"username": "x"}"#).await,
        (400, "no_text".into())
    );
    let other = format!("{}/slack/hooks/T0AWL/B0AWL/YYYY", server.base_url());
    assert_eq!(
        post(other, r#"{"text": "hello"}"#).await,
        (404, "no_service".into())
    );
    let messages = server.messages();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].channel, SLACK_WEBHOOK_CHANNEL);
    assert_eq!(messages[0].source, Source::Webhook);
}

#[tokio::test]
async fn a_discord_message_is_created_then_edited() {
    let server = ChatServer::start().await;
    let components = json!([{"type": 1, "components": [
        {"type": 2, "style": 3, "label": "Approve", "custom_id": "awl:approve:run-1"}]}]);
    let (status, created) = discord_call(
        &server,
        reqwest::Method::POST,
        "/channels/100000000000000001/messages",
        DISCORD_BOT_TOKEN,
        json!({"content": "deploy waits", "components": components}),
    )
    .await;
    assert_eq!(status, 200, "{created}");
    let id = created["id"].as_str().unwrap().to_string();
    assert_eq!(created["channel_id"], json!("100000000000000001"));
    assert_eq!(created["content"], json!("deploy waits"));
    assert_eq!(created["components"], components);
    assert_eq!(created["edited_timestamp"], Value::Null);
    assert_eq!(created["author"]["bot"], json!(true));

    let (_, second) = discord_call(
        &server,
        reqwest::Method::POST,
        "/channels/100000000000000001/messages",
        DISCORD_BOT_TOKEN,
        json!({"content": "reply", "message_reference": {"message_id": id}}),
    )
    .await;
    let second_id: u64 = second["id"].as_str().unwrap().parse().unwrap();
    assert!(second_id > id.parse::<u64>().unwrap());
    assert_eq!(second["message_reference"]["message_id"], json!(id));

    let (status, edited) = discord_call(
        &server,
        reqwest::Method::PATCH,
        &format!("/channels/100000000000000001/messages/{id}"),
        DISCORD_BOT_TOKEN,
        json!({"content": "approved by ada", "components": []}),
    )
    .await;
    assert_eq!(status, 200, "{edited}");
    assert_eq!(edited["content"], json!("approved by ada"));
    assert!(edited["edited_timestamp"].is_string());
    let message = server.message(Platform::Discord, &id).unwrap();
    assert_eq!(message.text, "approved by ada");
    assert_eq!(message.versions.len(), 1);
    assert_eq!(message.versions[0].text, "deploy waits");
    assert_eq!(message.versions[0].blocks, components);
    assert_eq!(server.messages()[1].thread.as_deref(), Some(id.as_str()));

    let errors = [
        (
            "/channels/999/messages",
            DISCORD_BOT_TOKEN,
            404,
            json!({"message": "Unknown Channel", "code": 10003}),
        ),
        (
            "/channels/100000000000000001/messages",
            "wrong",
            401,
            json!({"message": "401: Unauthorized", "code": 0}),
        ),
    ];
    for (path, token, expected, body) in errors {
        let got = discord_call(
            &server,
            reqwest::Method::POST,
            path,
            token,
            json!({"content": "x"}),
        )
        .await;
        assert_eq!(got, (expected, body), "{path}");
    }
    let unknown = discord_call(
        &server,
        reqwest::Method::PATCH,
        "/channels/100000000000000001/messages/1",
        DISCORD_BOT_TOKEN,
        json!({"content": "x"}),
    )
    .await;
    assert_eq!(
        unknown,
        (404, json!({"message": "Unknown Message", "code": 10008}))
    );
    let empty = discord_call(
        &server,
        reqwest::Method::POST,
        "/channels/100000000000000001/messages",
        DISCORD_BOT_TOKEN,
        json!({"content": ""}),
    )
    .await;
    assert_eq!(
        empty,
        (
            400,
            json!({"message": "Cannot send an empty message", "code": 50006})
        )
    );
}

#[tokio::test]
async fn discord_webhooks_and_interaction_responses() {
    let server = ChatServer::start().await;
    let client = http();
    let hook = server.discord_webhook_url();
    let quiet = client
        .post(&hook)
        .json(&json!({"content": "one"}))
        .send()
        .await
        .unwrap();
    assert_eq!(quiet.status(), 204);
    let waited = client
        .post(format!("{hook}?wait=true"))
        .json(&json!({"content": "two"}))
        .send()
        .await
        .unwrap();
    assert_eq!(waited.status(), 200);
    let waited: Value = waited.json().await.unwrap();
    assert_eq!(waited["channel_id"], json!(DISCORD_WEBHOOK_CHANNEL));
    let edit = client
        .patch(format!(
            "{hook}/messages/{}",
            waited["id"].as_str().unwrap()
        ))
        .json(&json!({"content": "two, edited"}))
        .send()
        .await
        .unwrap();
    assert_eq!(edit.status(), 200);
    let edited: Value = edit.json().await.unwrap();
    assert_eq!(edited["content"], json!("two, edited"));

    // A button pressed on a bot message: the interaction is deferred, then its
    // original message is edited through the application's webhook.
    let (_, created) = discord_call(
        &server,
        reqwest::Method::POST,
        "/channels/100000000000000002/messages",
        DISCORD_BOT_TOKEN,
        json!({"content": "approve?"}),
    )
    .await;
    let message_id = created["id"].as_str().unwrap();
    let payload = discord_component(
        DISCORD_APPLICATION_ID,
        "800000000000000001",
        "itoken",
        "900000000000000001",
        "ada",
        "100000000000000002",
        message_id,
        "awl:approve:run-1",
        Some("110000000000000001"),
    );
    assert_eq!(payload["type"], json!(3));
    assert_eq!(payload["member"]["user"]["id"], json!("900000000000000001"));
    server.register_interaction(
        "800000000000000001",
        "itoken",
        "100000000000000002",
        Some(message_id),
    );
    let callback = format!(
        "{}/interactions/800000000000000001/itoken/callback",
        server.discord_api_base()
    );
    let acked = client
        .post(&callback)
        .json(&json!({"type": 6}))
        .send()
        .await
        .unwrap();
    assert_eq!(acked.status(), 204);
    let again = client
        .post(&callback)
        .json(&json!({"type": 6}))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 400);
    let original = client
        .patch(format!(
            "{}/webhooks/{DISCORD_APPLICATION_ID}/itoken/messages/@original",
            server.discord_api_base()
        ))
        .json(&json!({"content": "approved by ada", "components": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(original.status(), 200);
    let message = server.message(Platform::Discord, message_id).unwrap();
    assert_eq!(message.text, "approved by ada");
    assert_eq!(message.versions[0].text, "approve?");
    let callbacks = server.interaction_callbacks();
    assert_eq!((callbacks.len(), callbacks[0].kind), (1, 6));

    let command = discord_command(
        DISCORD_APPLICATION_ID,
        "800000000000000002",
        "ctoken",
        "900000000000000001",
        "ada",
        "100000000000000002",
        "approve",
        &[("run", json!("run-1"))],
        None,
    );
    assert_eq!(
        command["data"]["options"][0]["options"][0]["type"],
        json!(3)
    );
    assert_eq!(command["user"]["username"], json!("ada"));
}

#[tokio::test]
async fn a_rate_limit_then_success_on_each_platform() {
    let server = ChatServer::start().await;
    let client = http();

    server.rate_limit_next(Platform::Slack, 1, Duration::from_millis(300));
    let url = format!("{}/chat.postMessage", server.slack_api_base());
    let body = json!({"channel": "C0AWL0001", "text": "hi"}).to_string();
    let send = || {
        client
            .post(&url)
            .bearer_auth(SLACK_BOT_TOKEN)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
    };
    let refused = send().await.unwrap();
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["retry-after"], "1");
    let refused: Value = refused.json().await.unwrap();
    assert_eq!(refused, json!({"ok": false, "error": "ratelimited"}));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let posted: Value = send().await.unwrap().json().await.unwrap();
    assert_eq!(posted["ok"], json!(true));
    let waits = server.waits_after_rate_limit(Platform::Slack);
    assert_eq!(waits.len(), 1);
    assert!(waits[0] >= Duration::from_secs(1), "{waits:?}");

    server.rate_limit_next(Platform::Discord, 2, Duration::from_millis(250));
    let url = format!(
        "{}/channels/100000000000000001/messages",
        server.discord_api_base()
    );
    let started = Instant::now();
    let mut statuses = Vec::new();
    loop {
        let response = client
            .post(&url)
            .header("authorization", format!("Bot {DISCORD_BOT_TOKEN}"))
            .json(&json!({"content": "hi"}))
            .send()
            .await
            .unwrap();
        statuses.push(response.status().as_u16());
        if response.status() != 429 {
            break;
        }
        let headers = response.headers().clone();
        assert_eq!(headers["retry-after"], "1");
        assert_eq!(headers["x-ratelimit-remaining"], "0");
        assert_eq!(headers["x-ratelimit-reset-after"], "0.250");
        assert_eq!(headers["x-ratelimit-scope"], "user");
        assert!(headers.contains_key("x-ratelimit-limit"));
        let body: Value = response.json().await.unwrap();
        assert_eq!(
            body,
            json!({"message": "You are being rate limited.", "retry_after": 0.25, "global": false})
        );
        let wait = body["retry_after"].as_f64().unwrap();
        tokio::time::sleep(Duration::from_secs_f64(wait)).await;
    }
    assert_eq!(statuses, vec![429, 429, 200]);
    assert!(started.elapsed() >= Duration::from_millis(500));
    let waits = server.waits_after_rate_limit(Platform::Discord);
    assert_eq!(waits.len(), 2);
    assert!(
        waits.iter().all(|w| *w >= Duration::from_millis(250)),
        "{waits:?}"
    );
    let statuses: Vec<u16> = server.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses, vec![429, 200, 429, 429, 200]);
}

#[test]
fn the_slack_signature_matches_slacks_documented_example() {
    // "Verifying requests from Slack": this secret, timestamp and slash-command body
    // give this signature.
    let body = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    assert_eq!(
        slack_signature("8f742231b10e8888abcd99yyyzzz85a5", 1531420618, body),
        "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
    );
    // The form encoding writes that body's fields the way Slack did.
    let fields = form_decode(body);
    let fields: Vec<(&str, &str)> = fields
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    assert_eq!(crate::support::chat::form_encode(&fields), body);
}

#[test]
fn the_slack_payload_builders_encode_as_slack_sends() {
    let command = slack_slash_command(
        "U0ADA",
        "ada",
        "T0AWL",
        "C0AWL0001",
        "/awl",
        "approve run-1",
        "https://hooks.slack.com/commands/T0AWL/1/abc",
        "1.2.abc",
    );
    let fields = form_decode(&command);
    let field = |name: &str| {
        fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(field("command"), Some("/awl"));
    assert_eq!(field("text"), Some("approve run-1"));
    assert!(
        command.contains("command=%2Fawl&text=approve+run-1&"),
        "{command}"
    );

    let action = slack_block_action(
        "U0ADA",
        "ada",
        "T0AWL",
        "C0AWL0001",
        "1700000000.000100",
        "approve",
        "run-1",
        "1.2.abc",
        "https://hooks.slack.com/actions/T0AWL/1/abc",
    );
    let form = slack_form(&action);
    let payload = form_decode(&form);
    assert_eq!(payload[0].0, "payload");
    let decoded: Value = serde_json::from_str(&payload[0].1).unwrap();
    assert_eq!(decoded, action);
    assert_eq!(decoded["actions"][0]["action_id"], json!("approve"));
    assert_eq!(
        decoded["container"]["message_ts"],
        json!("1700000000.000100")
    );
}

#[test]
fn a_discord_signature_verifies_with_ring_and_not_for_another_body() {
    let key = DiscordKey::generate();
    let body = r#"{"type":1}"#;
    let timestamp = "1700000000";
    let signature = key.sign(timestamp, body);
    assert_eq!(signature.len(), 128);
    let public = key.public_key_hex();
    assert_eq!(public.len(), 64);
    let bytes = |hex: &str| -> Vec<u8> {
        (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect()
    };
    let verifier = UnparsedPublicKey::new(&ED25519, bytes(&public));
    let message = format!("{timestamp}{body}");
    verifier
        .verify(message.as_bytes(), &bytes(&signature))
        .expect("the signature verifies");
    assert!(
        verifier
            .verify(b"1700000000{\"type\":2}", &bytes(&signature))
            .is_err()
    );
    assert!(discord_verify(&public, timestamp, body, &signature));
    assert!(!discord_verify(&public, "1700000001", body, &signature));

    // A fixed seed gives the same key, and Ed25519 the same signature, every time.
    let fixed = DiscordKey::from_seed([7; 32]);
    assert_eq!(
        fixed.public_key_hex(),
        DiscordKey::from_seed([7; 32]).public_key_hex()
    );
    assert_eq!(
        fixed.sign(timestamp, body),
        DiscordKey::from_seed([7; 32]).sign(timestamp, body)
    );
}
