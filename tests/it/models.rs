//! The model client against a scripted OpenAI-compatible server (`support::openai`):
//! replies whole and streamed, tool calls and the request shape the server received,
//! retries (Retry-After, back-off, the cap), refusals, a wrong key, a server that
//! hangs, one that cannot be reached and answers that cannot be read. No database.

use std::time::{Duration, Instant};

use awl::domain::run::ErrorClass;
use awl::models::{
    ChatRequest, Completion, Endpoint, Message, ModelClient, ModelError, ToolCall, ToolSpec, Usage,
};
use serde_json::json;

use crate::support::openai::{Scripted, ScriptedServer, completion_tokens, prompt_tokens};
use crate::support::server::free_port;
use crate::support::within;

fn client() -> ModelClient {
    ModelClient::new().expect("a model client")
}

fn ask(text: &str) -> ChatRequest {
    ChatRequest {
        model: "gpt-4.1-mini".into(),
        messages: vec![
            Message::System {
                content: "You are terse.".into(),
            },
            Message::User {
                content: text.into(),
            },
        ],
        tools: vec![],
        tool_choice_none: false,
        max_tokens: None,
        temperature: None,
    }
}

fn search_tool() -> ToolSpec {
    ToolSpec {
        name: "search".into(),
        description: "Search the web".into(),
        parameters: json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}),
    }
}

async fn chat(endpoint: &Endpoint, request: &ChatRequest) -> Result<Completion, ModelError> {
    within(60, "the model call", client().chat(endpoint, request)).await
}

/// A streamed call; the text pieces `on_delta` got, in order.
async fn chat_stream(
    endpoint: &Endpoint,
    request: &ChatRequest,
) -> (Result<Completion, ModelError>, Vec<String>) {
    let mut deltas = Vec::new();
    let mut on_delta = |t: &str| deltas.push(t.to_string());
    let result = within(
        60,
        "the streamed model call",
        client().chat_stream(endpoint, request, &mut on_delta),
    )
    .await;
    (result, deltas)
}

#[tokio::test]
async fn models_a_text_reply() {
    let server = ScriptedServer::start([Scripted::text("Oslo is rainy today.")]).await;
    let done = chat(&server.endpoint(), &ask("Weather in Oslo?"))
        .await
        .expect("a reply");
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(done.reply.content.as_deref(), Some("Oslo is rainy today."));
    assert_eq!(done.reply.tool_calls, vec![]);
    assert_eq!(done.reply.finish_reason.as_deref(), Some("stop"));
    assert_eq!(done.reply.model, "gpt-4.1-mini");
    assert_eq!(
        done.reply.usage,
        Usage {
            prompt_tokens: prompt_tokens(&requests[0]),
            completion_tokens: completion_tokens("Oslo is rainy today."),
        }
    );
    assert_eq!((done.attempts, done.waited), (1, Duration::ZERO));
    assert!(done.latency > Duration::ZERO);
    assert_eq!(
        requests[0],
        json!({"model": "gpt-4.1-mini", "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Weather in Oslo?"},
        ]})
    );
}

#[tokio::test]
async fn models_tool_calls_and_the_request_shape_the_server_received() {
    let server = ScriptedServer::start([
        Scripted::tool_calls(&[("search", r#"{"q": "rust"}"#), ("search", r#"{"q": "#)]),
        Scripted::text("Found it."),
    ])
    .await;
    let endpoint = server.endpoint();
    let mut request = ask("Find rust.");
    request.tools = vec![search_tool()];
    request.max_tokens = Some(64);
    request.temperature = Some(0.0);
    let first = chat(&endpoint, &request).await.expect("a reply");
    assert_eq!(first.reply.content, None);
    assert_eq!(first.reply.finish_reason.as_deref(), Some("tool_calls"));
    // Arguments as the model wrote them, broken JSON too.
    assert_eq!(
        first.reply.tool_calls,
        vec![
            ToolCall {
                id: "call_1".into(),
                name: "search".into(),
                arguments: r#"{"q": "rust"}"#.into()
            },
            ToolCall {
                id: "call_2".into(),
                name: "search".into(),
                arguments: r#"{"q": "#.into()
            },
        ]
    );

    // The next turn: the calls and their results go back, and no more tools.
    request.messages.push(Message::Assistant {
        content: None,
        tool_calls: first.reply.tool_calls.clone(),
    });
    for call in &first.reply.tool_calls {
        request.messages.push(Message::Tool {
            tool_call_id: call.id.clone(),
            content: format!("result of {}", call.id),
        });
    }
    request.tool_choice_none = true;
    let second = chat(&endpoint, &request).await.expect("a reply");
    assert_eq!(second.reply.content.as_deref(), Some("Found it."));

    let requests = server.requests();
    let tools = json!([{"type": "function", "function": {
        "name": "search",
        "description": "Search the web",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
    }}]);
    assert_eq!(requests[0]["tools"], tools);
    assert_eq!(requests[0]["tool_choice"], json!("auto"), "{}", requests[0]);
    assert_eq!(requests[0]["max_tokens"], json!(64));
    assert_eq!(requests[0]["temperature"], json!(0.0));
    assert_eq!(requests[1]["tools"], tools);
    assert_eq!(requests[1]["tool_choice"], json!("none"));
    assert_eq!(
        requests[1]["messages"].as_array().expect("messages")[2..],
        [
            json!({"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": "{\"q\": \"rust\"}"}},
                {"id": "call_2", "type": "function", "function": {"name": "search", "arguments": "{\"q\": "}},
            ]}),
            json!({"role": "tool", "tool_call_id": "call_1", "content": "result of call_1"}),
            json!({"role": "tool", "tool_call_id": "call_2", "content": "result of call_2"}),
        ]
    );
}

#[tokio::test]
async fn models_a_model_that_never_stops_calling_tools() {
    let server = ScriptedServer::always(Scripted::tool_calls(&[("search", "{}")])).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let done = chat(&server.endpoint(), &ask("again"))
            .await
            .expect("a reply");
        assert_eq!(done.reply.tool_calls.len(), 1);
        ids.push(done.reply.tool_calls[0].id.clone());
    }
    assert_eq!(ids, ["call_1", "call_2", "call_3"]);
}

#[tokio::test]
async fn models_streamed_text_arrives_in_order() {
    let text = "Streams arrive in pieces, and the pieces join up.";
    let server = ScriptedServer::start([Scripted::text(text)]).await;
    let (result, deltas) = chat_stream(&server.endpoint(), &ask("Stream, please.")).await;
    let done = result.expect("a reply");
    assert!(deltas.len() > 1, "{deltas:?}");
    assert_eq!(deltas.concat(), text);
    assert_eq!(done.reply.content.as_deref(), Some(text));
    assert_eq!(done.reply.finish_reason.as_deref(), Some("stop"));
    assert_eq!(done.reply.model, "gpt-4.1-mini");
    let requests = server.requests();
    assert_eq!(requests[0]["stream"], json!(true));
    assert_eq!(
        requests[0]["stream_options"],
        json!({"include_usage": true})
    );
    assert_eq!(
        done.reply.usage,
        Usage {
            prompt_tokens: prompt_tokens(&requests[0]),
            completion_tokens: completion_tokens(text),
        }
    );
}

#[tokio::test]
async fn models_streamed_tool_calls_are_assembled_from_fragments() {
    let arguments = r#"{"q": "the quick brown fox jumps over the lazy dog"}"#;
    let server = ScriptedServer::start([Scripted::tool_calls(&[
        ("search", arguments),
        ("open", r#"{"url": "https://example.com"}"#),
    ])])
    .await;
    let mut request = ask("Use tools.");
    request.tools = vec![search_tool()];
    let (result, deltas) = chat_stream(&server.endpoint(), &request).await;
    let done = result.expect("a reply");
    assert!(deltas.is_empty(), "{deltas:?}");
    assert_eq!(done.reply.content, None);
    assert_eq!(done.reply.finish_reason.as_deref(), Some("tool_calls"));
    let calls: Vec<(&str, &str, &str)> = done
        .reply
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
        .collect();
    assert_eq!(
        calls,
        [
            ("call_1", "search", arguments),
            ("call_2", "open", r#"{"url": "https://example.com"}"#),
        ]
    );
    assert!(done.reply.usage.completion_tokens > 1);
}

#[tokio::test]
async fn models_a_stream_is_retried_before_it_starts_and_a_cut_one_is_malformed() {
    let server = ScriptedServer::start([
        Scripted::error(503, None, "warming up"),
        Scripted::text("ready now"),
    ])
    .await;
    let (result, deltas) = chat_stream(&server.endpoint(), &ask("hi")).await;
    let done = result.expect("a reply");
    assert_eq!(done.attempts, 2);
    assert_eq!(deltas.concat(), "ready now");

    let chunk = json!({"choices": [{"index": 0, "delta": {"content": "half an ans"}}]});
    server.push(Scripted::Sse(format!("data: {chunk}\n\n")));
    let (result, deltas) = chat_stream(&server.endpoint(), &ask("hi")).await;
    let err = result.expect_err("a stream cut off");
    assert!(matches!(err, ModelError::Malformed { .. }), "{err:?}");
    assert_eq!(deltas, ["half an ans"]);
    // Not tried again: the caller has seen part of the answer.
    assert_eq!(server.requests().len(), 3);

    // A server that ignores `stream` and answers whole is read all the same.
    let whole = json!({"model": "m", "choices": [{"index": 0, "finish_reason": "stop",
        "message": {"role": "assistant", "content": "all at once"}}]});
    server.push(Scripted::Status {
        status: 200,
        retry_after: None,
        body: whole.to_string(),
    });
    let (result, deltas) = chat_stream(&server.endpoint(), &ask("hi")).await;
    assert_eq!(
        result.expect("a reply").reply.content.as_deref(),
        Some("all at once")
    );
    assert_eq!(deltas, ["all at once"]);
}

#[tokio::test]
async fn models_429_with_retry_after_then_success() {
    let server = ScriptedServer::start([
        Scripted::error(429, Some("1"), "Rate limit reached"),
        Scripted::text("ok"),
    ])
    .await;
    let started = Instant::now();
    let done = chat(&server.endpoint(), &ask("hi")).await.expect("a reply");
    assert_eq!(done.attempts, 2);
    assert!(done.waited >= Duration::from_secs(1), "{:?}", done.waited);
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(done.reply.content.as_deref(), Some("ok"));
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn models_a_retry_after_over_the_cap_fails_at_once() {
    let server = ScriptedServer::start([
        Scripted::error(429, Some("120"), "Rate limit reached for requests"),
        Scripted::text("never asked for"),
    ])
    .await;
    let started = Instant::now();
    let err = chat(&server.endpoint(), &ask("hi"))
        .await
        .expect_err("rate limited");
    assert!(started.elapsed() < Duration::from_secs(10));
    let ModelError::RateLimited {
        retry_after,
        message,
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!(*retry_after, Some(Duration::from_secs(120)));
    assert!(
        message.contains("Rate limit reached for requests"),
        "{message}"
    );
    assert!(message.contains("1 attempt"), "{message}");
    assert_eq!(err.class(), ErrorClass::RateLimit);
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn models_500_three_times_then_success() {
    let server = ScriptedServer::start([
        Scripted::error(500, None, "boom"),
        Scripted::error(500, None, "boom"),
        Scripted::error(500, None, "boom"),
        Scripted::text("fine"),
    ])
    .await;
    let done = chat(&server.endpoint(), &ask("hi")).await.expect("a reply");
    assert_eq!(done.attempts, 4);
    // 250 ms, 500 ms, 1 s: deterministic back-off.
    assert_eq!(done.waited, Duration::from_millis(1750));
    assert_eq!(server.requests().len(), 4);

    // One 500 too many: the server's message and the attempts are in the error.
    for _ in 0..4 {
        server.push(Scripted::error(500, None, "still boom"));
    }
    let err = chat(&server.endpoint(), &ask("hi"))
        .await
        .expect_err("500s");
    assert!(
        matches!(err, ModelError::Server { status: 500, .. }),
        "{err:?}"
    );
    assert_eq!(err.class(), ErrorClass::Dependency);
    assert!(err.to_string().contains("still boom (4 attempts)"), "{err}");
}

#[tokio::test]
async fn models_400_is_not_retried() {
    let server = ScriptedServer::start([Scripted::Status {
        status: 400,
        retry_after: None,
        body: json!({"error": {"message": "Invalid value for 'temperature'", "type": "invalid_request_error"}})
            .to_string(),
    }])
    .await;
    let err = chat(&server.endpoint(), &ask("hi"))
        .await
        .expect_err("refused");
    assert!(
        matches!(err, ModelError::Refused { status: 400, .. }),
        "{err:?}"
    );
    assert_eq!(err.class(), ErrorClass::Validation);
    assert!(!err.retryable());
    assert!(
        err.to_string().contains("Invalid value for 'temperature'"),
        "{err}"
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn models_a_wrong_api_key_is_an_authentication_failure() {
    let server = ScriptedServer::start([Scripted::text("welcome")])
        .await
        .with_api_key("sk-right");
    let mut endpoint = server.endpoint();
    endpoint.api_key = Some("sk-wrong".into());
    let err = chat(&endpoint, &ask("hi")).await.expect_err("refused");
    assert!(
        matches!(err, ModelError::Refused { status: 401, .. }),
        "{err:?}"
    );
    assert_eq!(err.class(), ErrorClass::Authentication);
    assert!(err.to_string().contains("Incorrect API key"), "{err}");
    assert!(!err.to_string().contains("sk-wrong"), "{err}");
    assert_eq!(server.requests().len(), 1);
    // The right key is sent as a bearer token.
    let done = chat(&server.endpoint(), &ask("hi")).await.expect("a reply");
    assert_eq!(done.reply.content.as_deref(), Some("welcome"));
}

#[tokio::test]
async fn models_a_hanging_server_times_out_after_the_endpoint_timeout() {
    let server = ScriptedServer::start([
        Scripted::Hang(Duration::from_secs(30)),
        Scripted::Hang(Duration::from_secs(30)),
    ])
    .await;
    let mut endpoint = Endpoint::new(server.base_url());
    endpoint.timeout = Duration::from_millis(300);
    endpoint.max_retries = 1;
    let started = Instant::now();
    let err = chat(&endpoint, &ask("hi")).await.expect_err("a timeout");
    let took = started.elapsed();
    assert_eq!(
        err,
        ModelError::Timeout {
            after: Duration::from_millis(300)
        }
    );
    assert_eq!(err.class(), ErrorClass::Timeout);
    // Two attempts of 300 ms and a back-off of 250 ms between them.
    assert!(took >= Duration::from_millis(850), "{took:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn models_an_unreachable_server_is_a_network_failure() {
    let mut endpoint = Endpoint::new(format!("http://127.0.0.1:{}/v1", free_port()));
    endpoint.max_retries = 1;
    let err = chat(&endpoint, &ask("hi")).await.expect_err("no server");
    assert!(matches!(err, ModelError::Transport { .. }), "{err:?}");
    assert_eq!(err.class(), ErrorClass::Network);
    assert!(err.to_string().contains("(2 attempts)"), "{err}");
}

#[tokio::test]
async fn models_a_malformed_body_is_malformed() {
    let ok_status = |body: String| Scripted::Status {
        status: 200,
        retry_after: None,
        body,
    };
    let server = ScriptedServer::start([
        ok_status("{\"choices\": [".into()),
        ok_status(json!({"id": "x", "choices": []}).to_string()),
        ok_status(format!("\"{}\"", "x".repeat(9 * 1024 * 1024))),
    ])
    .await;
    for (what, says) in [
        ("not JSON", "not a chat completion"),
        ("no choices", "no choices"),
        ("too big", "larger than 8 MiB"),
    ] {
        let err = chat(&server.endpoint(), &ask("hi")).await.expect_err(what);
        assert!(
            matches!(err, ModelError::Malformed { .. }),
            "{what}: {err:?}"
        );
        assert!(err.to_string().contains(says), "{what}: {err}");
        assert_eq!(err.class(), ErrorClass::Dependency);
    }
    // None of them was tried again.
    assert_eq!(server.requests().len(), 3);
}
