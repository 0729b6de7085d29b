use chrono::{TimeZone, Utc};
use cqrs_es::Aggregate;
use serde_json::json;

use super::*;

fn at(s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 26, 9, 0, s).unwrap()
}

fn slack(ts: &str) -> MessageRef {
    MessageRef {
        platform: Platform::Slack,
        channel_id: "C0AWL0001".into(),
        message_id: Some(ts.into()),
    }
}

fn post(digest: &str) -> ChatCommand {
    ChatCommand::Post {
        notice: "gate:g1".into(),
        channel: "ops".into(),
        message: slack("1.1"),
        content: json!({"title": "Release?"}),
        digest: digest.into(),
        at: at(0),
    }
}

fn fold(events: Vec<ChatEvent>, into: &mut ChatMessage) {
    for e in events {
        into.apply(e);
    }
}

#[test]
fn a_notice_is_posted_once_then_updated_only_when_it_changes() {
    let mut m = ChatMessage::default();
    assert_eq!(m.delivery("a"), Delivery::Post);
    assert_eq!(
        m.decide(ChatCommand::Update {
            content: json!({}),
            digest: "a".into(),
            at: at(1)
        }),
        Err(ChatError::NotPosted)
    );
    fold(m.decide(post("a")).unwrap(), &mut m);
    assert_eq!(m.decide(post("b")), Err(ChatError::AlreadyPosted));
    assert_eq!(
        m.delivery("a"),
        Delivery::Nothing,
        "the same content is not sent again"
    );
    assert_eq!(m.delivery("b"), Delivery::Update(slack("1.1")));
    let same = m.decide(ChatCommand::Update {
        content: json!({}),
        digest: "a".into(),
        at: at(2),
    });
    assert_eq!(same, Err(ChatError::Unchanged));
    fold(
        m.decide(ChatCommand::RecordFailure {
            digest: "b".into(),
            class: "rate_limit".into(),
            reason: "429".into(),
            at: at(3),
        })
        .unwrap(),
        &mut m,
    );
    assert_eq!(m.failures, 1);
    assert_eq!(
        m.delivery("b"),
        Delivery::Update(slack("1.1")),
        "a failed update is tried again"
    );
    fold(
        m.decide(ChatCommand::Update {
            content: json!({"title": "Release? approved"}),
            digest: "b".into(),
            at: at(4),
        })
        .unwrap(),
        &mut m,
    );
    assert_eq!((m.failures, m.digest.as_deref()), (0, Some("b")));
}

#[test]
fn events_round_trip_and_name_their_command() {
    let events = vec![
        ChatEvent::Posted {
            notice: "gate:g1".into(),
            channel: "ops".into(),
            message: MessageRef {
                platform: Platform::Slack,
                channel_id: "webhook".into(),
                message_id: None,
            },
            content: json!({"title": "x"}),
            digest: "a".into(),
            at: at(0),
        },
        ChatEvent::Updated {
            content: json!({"title": "y"}),
            digest: "b".into(),
            at: at(1),
        },
        ChatEvent::DeliveryFailed {
            digest: "b".into(),
            class: "dependency".into(),
            reason: "503".into(),
            at: at(2),
        },
    ];
    let mut m = ChatMessage::default();
    for e in events {
        let json = serde_json::to_value(&e).unwrap();
        let back: ChatEvent = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(back, e, "{json}");
        assert_eq!(m.decide(e.clone().command()), Ok(vec![e.clone()]), "{json}");
        m.apply(e);
    }
    let posted = serde_json::to_value(ChatEvent::Updated {
        content: json!({}),
        digest: "d".into(),
        at: at(0),
    })
    .unwrap();
    assert_eq!(posted["chat.updated"]["digest"], "d");
    assert_ne!(stream_id("gate:g1", "ops"), stream_id("gate:g1", "dev"));
    assert_eq!(stream_id("gate:g1", "ops"), stream_id("gate:g1", "ops"));
}
