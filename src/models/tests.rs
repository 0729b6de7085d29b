use chrono::TimeZone;
use serde_json::json;

use super::stream::Assembler;
use super::*;

fn request() -> ChatRequest {
    ChatRequest {
        model: "gpt-4.1-mini".into(),
        messages: vec![
            Message::System {
                content: "be brief".into(),
            },
            Message::User {
                content: "weather in Oslo?".into(),
            },
            Message::Assistant {
                content: None,
                tool_calls: vec![ToolCall {
                    id: "call_1".into(),
                    name: "weather".into(),
                    arguments: r#"{"city":"Oslo"}"#.into(),
                }],
            },
            Message::Tool {
                tool_call_id: "call_1".into(),
                content: "rain".into(),
            },
            Message::Assistant {
                content: Some("It rains.".into()),
                tool_calls: vec![],
            },
        ],
        tools: vec![ToolSpec {
            name: "weather".into(),
            description: "The weather in a city".into(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        }],
        tool_choice_none: true,
        max_tokens: Some(100),
        temperature: Some(0.5),
    }
}

// ---------------------------------------------------------------- request shape

#[test]
fn the_request_has_openais_shape() {
    assert_eq!(
        request_body(&request(), false),
        json!({
            "model": "gpt-4.1-mini",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "weather in Oslo?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
                {"role": "assistant", "content": "It rains."},
            ],
            "tools": [{"type": "function", "function": {
                "name": "weather",
                "description": "The weather in a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            }}],
            "tool_choice": "none",
            "max_tokens": 100,
            "temperature": 0.5,
        })
    );
}

#[test]
fn no_tools_no_tools_key_and_no_tool_choice() {
    let mut r = request();
    r.tools.clear();
    r.max_tokens = None;
    r.temperature = None;
    let body = request_body(&r, false);
    let keys: Vec<&String> = body.as_object().expect("an object").keys().collect();
    assert_eq!(keys, ["messages", "model"]);
}

#[test]
fn tools_without_tool_choice_none_send_tool_choice_auto() {
    // Said explicitly: llama.cpp's Python server takes a missing tool_choice for none.
    let mut r = request();
    r.tool_choice_none = false;
    let body = request_body(&r, false);
    assert!(body.get("tools").is_some());
    assert_eq!(body["tool_choice"], "auto");
}

#[test]
fn a_streamed_request_asks_for_the_usage() {
    let body = request_body(&request(), true);
    assert_eq!(body["stream"], json!(true));
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    assert!(request_body(&request(), false).get("stream").is_none());
}

#[test]
fn messages_are_recorded_in_their_own_simple_shape() {
    let m = Message::Assistant {
        content: None,
        tool_calls: vec![ToolCall {
            id: "c".into(),
            name: "n".into(),
            arguments: "{not json".into(),
        }],
    };
    let recorded = serde_json::to_value(&m).expect("serialise");
    assert_eq!(
        recorded,
        json!({"role": "assistant", "content": null,
               "tool_calls": [{"id": "c", "name": "n", "arguments": "{not json"}]})
    );
    let back: Message = serde_json::from_value(recorded).expect("deserialise");
    assert_eq!(back, m);
    // An assistant message recorded without tool calls reads back.
    let plain: Message =
        serde_json::from_value(json!({"role": "assistant", "content": "hi"})).expect("read");
    assert_eq!(
        plain,
        Message::Assistant {
            content: Some("hi".into()),
            tool_calls: vec![]
        }
    );
    for m in request().messages {
        let text = serde_json::to_string(&m).expect("serialise");
        assert_eq!(serde_json::from_str::<Message>(&text).expect("read"), m);
    }
}

// ---------------------------------------------------------------- replies

#[test]
fn a_text_reply_is_parsed() {
    let body = json!({
        "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4.1-mini-2025-04-14",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello."},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
    });
    let reply = parse_reply(body.to_string().as_bytes()).expect("a reply");
    assert_eq!(
        reply,
        ChatReply {
            content: Some("Hello.".into()),
            tool_calls: vec![],
            finish_reason: Some("stop".into()),
            usage: Usage {
                prompt_tokens: 12,
                completion_tokens: 3
            },
            model: "gpt-4.1-mini-2025-04-14".into(),
        }
    );
}

#[test]
fn a_tool_call_reply_keeps_arguments_as_written() {
    let body = json!({
        "model": "m",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null, "tool_calls": [
                {"id": "call_a", "type": "function",
                 "function": {"name": "search", "arguments": "{\"q\": \"rust\"}"}},
                {"id": "call_b", "type": "function",
                 "function": {"name": "broken", "arguments": "{\"q\": "}},
            ]}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2},
    });
    let reply = parse_reply(body.to_string().as_bytes()).expect("a reply");
    assert_eq!(reply.content, None);
    assert_eq!(reply.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(
        reply.tool_calls,
        vec![
            ToolCall {
                id: "call_a".into(),
                name: "search".into(),
                arguments: r#"{"q": "rust"}"#.into()
            },
            ToolCall {
                id: "call_b".into(),
                name: "broken".into(),
                arguments: r#"{"q": "#.into()
            },
        ]
    );
}

#[test]
fn lenient_replies_object_arguments_missing_ids_no_usage_content_parts() {
    let body = json!({
        "choices": [{"message": {
            "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}],
        }}],
    });
    let reply = parse_reply(body.to_string().as_bytes()).expect("a reply");
    assert_eq!(reply.content.as_deref(), Some("ab"));
    assert_eq!(reply.tool_calls[0].id, "call_0");
    assert_eq!(reply.tool_calls[0].arguments, r#"{"x":1}"#);
    assert_eq!(reply.usage, Usage::default());
    assert_eq!(reply.model, "");
}

#[test]
fn unreadable_replies_are_malformed() {
    for body in [
        "{not json".to_string(),
        json!({"choices": []}).to_string(),
        json!({"object": "chat.completion"}).to_string(),
        String::new(),
    ] {
        let err = parse_reply(body.as_bytes()).expect_err(&body);
        assert!(
            matches!(err, ModelError::Malformed { .. }),
            "{body}: {err:?}"
        );
        assert_eq!(err.class(), ErrorClass::Dependency);
    }
    let err = parse_reply(br#"{"error": {"message": "context too long", "type": "x"}}"#)
        .expect_err("an error body");
    assert!(err.to_string().contains("context too long"), "{err}");
}

// ---------------------------------------------------------------- streams

/// The events of a streamed reply with two tool calls whose arguments come in pieces.
fn tool_call_stream() -> String {
    let chunks = [
        json!({"model": "gpt-4o-2024-08-06", "choices": [{"index": 0, "delta": {"role": "assistant", "content": null}}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": "call_x", "type": "function", "function": {"name": "search", "arguments": ""}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"q\":"}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": " \"ørret\"}"}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 1, "id": "call_y", "type": "function", "function": {"name": "open", "arguments": "{\"u"}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 1, "function": {"arguments": "rl\": 1}"}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        json!({"choices": [], "usage": {"prompt_tokens": 40, "completion_tokens": 9, "total_tokens": 49}}),
    ];
    let mut text = String::from(": keep-alive\n\n");
    for c in chunks {
        text.push_str(&format!("data: {c}\n\n"));
    }
    text.push_str("data: [DONE]\n\n");
    text
}

/// Feed `body` in pieces of `size` bytes (cutting lines and characters anywhere).
fn assemble(body: &[u8], size: usize) -> (Result<ChatReply, ModelError>, Vec<String>) {
    let mut deltas = Vec::new();
    let mut on_delta = |t: &str| deltas.push(t.to_string());
    let mut a = Assembler::default();
    for piece in body.chunks(size) {
        match a.push(piece, &mut on_delta) {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => return (Err(e), deltas),
        }
    }
    let reply = a.finish(&mut on_delta);
    (reply, deltas)
}

#[test]
fn streamed_tool_call_pieces_are_joined_by_index_however_the_bytes_are_cut() {
    let body = tool_call_stream();
    for size in [1, 2, 3, 7, 64, body.len()] {
        let (reply, deltas) = assemble(body.as_bytes(), size);
        let reply = reply.unwrap_or_else(|e| panic!("pieces of {size}: {e}"));
        assert!(deltas.is_empty());
        assert_eq!(
            reply,
            ChatReply {
                content: None,
                tool_calls: vec![
                    ToolCall {
                        id: "call_x".into(),
                        name: "search".into(),
                        arguments: r#"{"q": "ørret"}"#.into()
                    },
                    ToolCall {
                        id: "call_y".into(),
                        name: "open".into(),
                        arguments: r#"{"url": 1}"#.into()
                    },
                ],
                finish_reason: Some("tool_calls".into()),
                usage: Usage {
                    prompt_tokens: 40,
                    completion_tokens: 9
                },
                model: "gpt-4o-2024-08-06".into(),
            },
            "pieces of {size}"
        );
    }
}

#[test]
fn streamed_text_reaches_on_delta_in_order() {
    let mut body = String::new();
    for piece in ["", "Hel", "lo, ", "wörld"] {
        let c = json!({"model": "m", "choices": [{"index": 0, "delta": {"content": piece}}]});
        body.push_str(&format!("data: {c}\r\n\r\n"));
    }
    let end = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
    // No blank line between these two, and no line break after [DONE].
    body.push_str(&format!("data:{end}\ndata: [DONE]"));
    let (reply, deltas) = assemble(body.as_bytes(), 5);
    let reply = reply.expect("a reply");
    assert_eq!(deltas, ["Hel", "lo, ", "wörld"]);
    assert_eq!(reply.content.as_deref(), Some("Hello, wörld"));
    assert_eq!(reply.finish_reason.as_deref(), Some("stop"));
    assert_eq!(reply.usage, Usage::default());
}

#[test]
fn pieces_without_index_continue_the_last_call_until_a_new_id() {
    let mut body = String::new();
    let pieces = [
        json!({"id": "a", "function": {"name": "f", "arguments": "{"}}),
        json!({"function": {"arguments": "}"}}),
        json!({"id": "b", "function": {"name": "g", "arguments": "[]"}}),
    ];
    for p in pieces {
        let c = json!({"choices": [{"delta": {"tool_calls": [p]}}]});
        body.push_str(&format!("data: {c}\n\n"));
    }
    body.push_str("data: [DONE]\n\n");
    let (reply, _) = assemble(body.as_bytes(), 1000);
    let calls = reply.expect("a reply").tool_calls;
    let got: Vec<(&str, &str, &str)> = calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
        .collect();
    assert_eq!(got, [("a", "f", "{}"), ("b", "g", "[]")]);
}

#[test]
fn a_stream_cut_off_is_malformed() {
    let c = json!({"choices": [{"index": 0, "delta": {"content": "half"}}]});
    let (reply, deltas) = assemble(format!("data: {c}\n\n").as_bytes(), 10);
    assert!(
        matches!(reply, Err(ModelError::Malformed { .. })),
        "{reply:?}"
    );
    assert_eq!(deltas, ["half"]);
    // A finish_reason without [DONE] is a whole reply.
    let c =
        json!({"choices": [{"index": 0, "delta": {"content": "all"}, "finish_reason": "stop"}]});
    let (reply, _) = assemble(format!("data: {c}\n\n").as_bytes(), 10);
    assert_eq!(reply.expect("a reply").content.as_deref(), Some("all"));
}

#[test]
fn broken_streams_are_malformed() {
    for body in [
        "data: {not json\n\n".to_string(),
        "data: [DONE]\n\n".to_string(),
        String::new(),
        format!(
            "data: {}\n\n",
            json!({"error": {"message": "overloaded", "type": "server_error"}})
        ),
    ] {
        let (reply, _) = assemble(body.as_bytes(), 4);
        let err = reply.expect_err(&body);
        assert!(
            matches!(err, ModelError::Malformed { .. }),
            "{body}: {err:?}"
        );
    }
    let mut a = Assembler::default();
    let err = a
        .push(&[0xff, 0xfe, b'\n'], &mut |_| {})
        .and_then(|_| a.push(b"data: \xff\n", &mut |_| {}))
        .expect_err("not UTF-8");
    assert!(err.to_string().contains("UTF-8"), "{err}");
}

#[test]
fn an_endless_line_is_cut_at_the_cap() {
    let mut a = Assembler::default();
    let piece = vec![b'x'; 1024 * 1024];
    let mut result = Ok(false);
    for _ in 0..9 {
        result = a.push(&piece, &mut |_| {});
        if result.is_err() {
            break;
        }
    }
    assert!(
        matches!(result, Err(ModelError::Malformed { .. })),
        "{result:?}"
    );
}

// ---------------------------------------------------------------- errors and retries

#[test]
fn retry_after_reads_seconds_and_http_dates() {
    let now = Utc
        .with_ymd_and_hms(2026, 3, 1, 12, 0, 0)
        .single()
        .expect("a time");
    assert_eq!(parse_retry_after("7", now), Some(Duration::from_secs(7)));
    assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
    assert_eq!(
        parse_retry_after("Sun, 01 Mar 2026 12:00:42 GMT", now),
        Some(Duration::from_secs(42))
    );
    // A date already past: no wait.
    assert_eq!(
        parse_retry_after("Sun, 01 Mar 2026 11:00:00 GMT", now),
        Some(Duration::ZERO)
    );
    for bad in ["", "soon", "-3", "1.5", "Sun, 99 Mar 2026 12:00:00 GMT"] {
        assert_eq!(parse_retry_after(bad, now), None, "{bad:?}");
    }
}

#[test]
fn backoff_doubles_from_250_ms_up_to_8_s() {
    let waits: Vec<u128> = (0..8).map(|n| backoff(n).as_millis()).collect();
    assert_eq!(waits, [250, 500, 1000, 2000, 4000, 8000, 8000, 8000]);
    assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
}

fn failure(error: ModelError, retry_after: Option<Duration>) -> Failure {
    Failure {
        error,
        retry_after,
        started: false,
    }
}

#[test]
fn retries_wait_as_asked_up_to_the_cap_and_stop_when_told() {
    let endpoint = Endpoint::new("http://127.0.0.1:1/v1");
    let server = |status| ModelError::Server {
        status,
        message: "x".into(),
    };
    // Back-off by attempt, retries counted.
    let f = failure(server(503), None);
    assert_eq!(
        wait_before_retry(&f, 1, &endpoint),
        Some(Duration::from_millis(250))
    );
    assert_eq!(
        wait_before_retry(&f, 3, &endpoint),
        Some(Duration::from_millis(1000))
    );
    assert_eq!(wait_before_retry(&f, 4, &endpoint), None);
    // Retry-After wins, and one over the cap is final.
    let limited = |secs| {
        failure(
            ModelError::RateLimited {
                retry_after: Some(Duration::from_secs(secs)),
                message: "x".into(),
            },
            Some(Duration::from_secs(secs)),
        )
    };
    assert_eq!(
        wait_before_retry(&limited(2), 1, &endpoint),
        Some(Duration::from_secs(2))
    );
    assert_eq!(wait_before_retry(&limited(31), 1, &endpoint), None);
    // Back-off never waits past the cap.
    let short = Endpoint {
        max_retry_wait: Duration::from_millis(300),
        max_retries: 10,
        ..endpoint.clone()
    };
    assert_eq!(
        wait_before_retry(&f, 5, &short),
        Some(Duration::from_millis(300))
    );
    // Not retried: other statuses, a started stream.
    assert_eq!(
        wait_before_retry(&failure(server(501), None), 1, &endpoint),
        None
    );
    let refused = ModelError::Refused {
        status: 400,
        message: "x".into(),
    };
    assert_eq!(
        wait_before_retry(&failure(refused, None), 1, &endpoint),
        None
    );
    let started = Failure {
        started: true,
        ..failure(
            ModelError::Timeout {
                after: Duration::from_secs(1),
            },
            None,
        )
    };
    assert_eq!(wait_before_retry(&started, 1, &endpoint), None);
}

#[test]
fn errors_are_classified_and_marked_retryable() {
    let m = || "m".to_string();
    let cases = [
        (
            ModelError::RateLimited {
                retry_after: None,
                message: m(),
            },
            ErrorClass::RateLimit,
            true,
        ),
        (
            ModelError::Server {
                status: 500,
                message: m(),
            },
            ErrorClass::Dependency,
            true,
        ),
        (
            ModelError::Server {
                status: 502,
                message: m(),
            },
            ErrorClass::Dependency,
            true,
        ),
        (
            ModelError::Server {
                status: 503,
                message: m(),
            },
            ErrorClass::Dependency,
            true,
        ),
        (
            ModelError::Server {
                status: 504,
                message: m(),
            },
            ErrorClass::Dependency,
            true,
        ),
        (
            ModelError::Server {
                status: 501,
                message: m(),
            },
            ErrorClass::Dependency,
            false,
        ),
        (
            ModelError::Refused {
                status: 401,
                message: m(),
            },
            ErrorClass::Authentication,
            false,
        ),
        (
            ModelError::Refused {
                status: 403,
                message: m(),
            },
            ErrorClass::Authentication,
            false,
        ),
        (
            ModelError::Refused {
                status: 400,
                message: m(),
            },
            ErrorClass::Validation,
            false,
        ),
        (
            ModelError::Refused {
                status: 404,
                message: m(),
            },
            ErrorClass::Validation,
            false,
        ),
        (
            ModelError::Timeout {
                after: Duration::from_secs(1),
            },
            ErrorClass::Timeout,
            true,
        ),
        (
            ModelError::Transport { message: m() },
            ErrorClass::Network,
            true,
        ),
        (
            ModelError::Malformed { message: m() },
            ErrorClass::Dependency,
            false,
        ),
        (
            ModelError::Setup { message: m() },
            ErrorClass::Dependency,
            false,
        ),
    ];
    for (error, class, retryable) in cases {
        assert_eq!(error.class(), class, "{error:?}");
        assert_eq!(error.retryable(), retryable, "{error:?}");
    }
}

#[test]
fn messages_carry_the_servers_words_clipped_and_the_attempts() {
    let body = json!({"error": {"message": "Rate limit reached for gpt-4o", "type": "requests"}});
    assert_eq!(
        server_message(body.to_string().as_bytes(), "Too Many Requests"),
        "Rate limit reached for gpt-4o"
    );
    assert_eq!(server_message(b"  upstream down \n", "x"), "upstream down");
    assert_eq!(server_message(b"", "Bad Gateway"), "Bad Gateway");
    assert_eq!(server_message(br#"{"error": "plain"}"#, "x"), "plain");
    let long = "é".repeat(400);
    let clipped = server_message(long.as_bytes(), "x");
    assert!(clipped.starts_with(&"é".repeat(250)), "{clipped}");
    assert!(clipped.ends_with("(800 bytes in all)"), "{clipped}");

    let e = ModelError::RateLimited {
        retry_after: Some(Duration::from_secs(20)),
        message: "slow down".into(),
    }
    .after_attempts(4);
    assert_eq!(
        e.to_string(),
        "the model server is rate limiting (Retry-After: 20s): slow down (4 attempts)"
    );
    let e = ModelError::Refused {
        status: 401,
        message: "bad key".into(),
    }
    .after_attempts(1);
    assert_eq!(
        e.to_string(),
        "the model server refused the request with status 401: bad key (1 attempt)"
    );
}

#[test]
fn endpoints_check_their_url_and_hide_their_key() {
    let mut endpoint = Endpoint::new("http://127.0.0.1:8080/v1/");
    assert_eq!(endpoint.timeout, Duration::from_secs(120));
    assert_eq!(endpoint.max_retries, 3);
    assert_eq!(endpoint.max_retry_wait, Duration::from_secs(30));
    assert_eq!(
        endpoint.chat_url().expect("a URL").as_str(),
        "http://127.0.0.1:8080/v1/chat/completions"
    );
    endpoint.api_key = Some("sk-secret-123".into());
    let shown = format!("{endpoint:?}");
    assert!(!shown.contains("sk-secret-123"), "{shown}");
    assert!(shown.contains("[redacted]"), "{shown}");
    for bad in ["not a url", "ftp://example.com/v1", ""] {
        let err = Endpoint::new(bad).chat_url().expect_err(bad);
        assert!(matches!(err, ModelError::Setup { .. }), "{bad}: {err:?}");
    }
}

#[test]
fn the_client_builds_and_its_futures_are_send() {
    fn send<T: Send>(_: &T) {}
    let client = ModelClient::new().expect("a client");
    let endpoint = Endpoint::new("http://127.0.0.1:1/v1");
    let r = request();
    send(&client.chat(&endpoint, &r));
    let mut on_delta = |_: &str| {};
    send(&client.chat_stream(&endpoint, &r, &mut on_delta));
}

// ---------------------------------------------------------------- prices

#[test]
fn costs_are_tokens_times_price_per_million() {
    let price = Price {
        input_per_million: 2.0,
        output_per_million: 8.0,
    };
    assert_eq!(price.cost_of(0, 0), 0.0);
    assert_eq!(price.cost_of(1_000_000, 0), 2.0);
    assert_eq!(price.cost_of(0, 1_000_000), 8.0);
    let usage = Usage {
        prompt_tokens: 1_000,
        completion_tokens: 500,
    };
    assert!(
        (price.cost(usage) - 0.006).abs() < 1e-12,
        "{}",
        price.cost(usage)
    );
    assert_eq!(price.cost(usage), price.cost_of(1_000, 500));
}

#[test]
fn known_prices_match_exactly_or_by_the_longest_prefix() {
    let p = |m| known_price(m).map(|p| (p.input_per_million, p.output_per_million));
    assert_eq!(p("gpt-4o"), Some((2.5, 10.0)));
    assert_eq!(p("gpt-4o-2024-08-06"), Some((2.5, 10.0)));
    assert_eq!(p("gpt-4o-2024-05-13"), Some((5.0, 15.0)));
    assert_eq!(p("gpt-4o-mini-2024-07-18"), Some((0.15, 0.6)));
    assert_eq!(p("gpt-4.1"), Some((2.0, 8.0)));
    assert_eq!(p("gpt-4.1-mini-2025-04-14"), Some((0.4, 1.6)));
    assert_eq!(p("gpt-4.1-nano"), Some((0.1, 0.4)));
    assert_eq!(p("o3-mini-2025-01-31"), Some((1.1, 4.4)));
    assert_eq!(p("o3"), Some((2.0, 8.0)));
    assert_eq!(p("llama3.1:8b"), None);
    assert_eq!(p(""), None);
    assert_eq!(p("gpt-4"), None);
}
