//! What awl tells in chat, said once for every service: a [`Notice`] (title, text,
//! facts, buttons, and once decided, its outcome), rendered as Slack Block Kit or as a
//! Discord message with components. Buttons carry an [`Action`] whose id names what
//! it decides (`gate.approve:GATE`), so a click is understood without any lookup.
//! Pure: no I/O.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::config::NoticeKind;

/// The most characters of one text field sent (Slack's section text limit is 3,000).
const TEXT_CHARS: usize = 2_800;

/// One thing to tell, in any channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Notice {
    /// What it is about: `gate:ID`, `run:ID:failed`, `question:ID`, `review:TASK`.
    pub key: String,
    pub kind: NoticeKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    pub title: String,
    pub text: String,
    /// Short facts shown under the text (run, step, agent...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub facts: Vec<(String, String)>,
    /// What can be decided from the message (none once it is decided).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub buttons: Vec<Button>,
    /// How it ended, once it did ("Approved by ada: ship it").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Button {
    pub action: Action,
    pub label: String,
    /// `primary` (green) or `danger` (red).
    pub style: String,
}

/// What a click decides.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    ApproveGate(String),
    /// Asks for the reason first (a form).
    RejectGate(String),
    ApproveReview(String),
    /// Asks for the feedback first (a form).
    RequestChanges(String),
    /// Asks for the answer first (a form): task and question.
    Answer(String, String),
}

impl Action {
    /// The id a button carries (Slack `action_id`, Discord `custom_id`: at most 100
    /// characters, which two UUIDs and a name fit).
    pub fn id(&self) -> String {
        match self {
            Self::ApproveGate(g) => format!("gate.approve:{g}"),
            Self::RejectGate(g) => format!("gate.reject:{g}"),
            Self::ApproveReview(t) => format!("review.approve:{t}"),
            Self::RequestChanges(t) => format!("review.changes:{t}"),
            Self::Answer(t, q) => format!("question.answer:{t}:{q}"),
        }
    }

    /// The action a button's id names.
    pub fn parse(id: &str) -> Option<Self> {
        let (name, rest) = id.split_once(':')?;
        let arg = || (!rest.is_empty()).then(|| rest.to_string());
        Some(match name {
            "gate.approve" => Self::ApproveGate(arg()?),
            "gate.reject" => Self::RejectGate(arg()?),
            "review.approve" => Self::ApproveReview(arg()?),
            "review.changes" => Self::RequestChanges(arg()?),
            "question.answer" => {
                let (t, q) = rest.split_once(':')?;
                Self::Answer(t.to_string(), q.to_string())
            }
            _ => return None,
        })
    }

    /// Whether a text must be asked for before it is decided, and its label.
    pub fn asks_for(&self) -> Option<&'static str> {
        match self {
            Self::RejectGate(_) => Some("Why reject it?"),
            Self::RequestChanges(_) => Some("What should change?"),
            Self::Answer(..) => Some("Your answer"),
            Self::ApproveGate(_) | Self::ApproveReview(_) => None,
        }
    }
}

impl Notice {
    /// A digest of what it says: the same notice sent again is recognised.
    pub fn digest(&self) -> String {
        let bytes = serde_json::to_vec(self).unwrap_or_default();
        let hash = Sha256::digest(&bytes);
        hex::encode(&hash[..12])
    }

    /// The same notice, decided: no buttons, and how it ended.
    pub fn closed(mut self, outcome: impl Into<String>) -> Self {
        self.buttons.clear();
        self.outcome = Some(outcome.into());
        self
    }

    /// Plain text (notifications, and services that show no blocks).
    pub fn plain(&self) -> String {
        let mut out = format!("{}\n{}", self.title, self.text);
        if let Some(o) = &self.outcome {
            out.push_str(&format!("\n{o}"));
        }
        clip(&out)
    }

    /// Slack Block Kit: a section, its facts as context, then the buttons or the
    /// outcome.
    pub fn slack_blocks(&self) -> Value {
        let mut blocks = vec![json!({
            "type": "section",
            "text": {"type": "mrkdwn", "text": clip(&format!("*{}*\n{}", escape_slack(&self.title), escape_slack(&self.text)))},
        })];
        if !self.facts.is_empty() {
            let elements: Vec<Value> = self
                .facts
                .iter()
                .take(10)
                .map(|(k, v)| json!({"type": "mrkdwn", "text": format!("*{}:* {}", escape_slack(k), escape_slack(v))}))
                .collect();
            blocks.push(json!({"type": "context", "elements": elements}));
        }
        if !self.buttons.is_empty() {
            let elements: Vec<Value> = self
                .buttons
                .iter()
                .map(|b| {
                    json!({
                        "type": "button",
                        "text": {"type": "plain_text", "text": b.label},
                        "action_id": b.action.id(),
                        "value": b.action.id(),
                        "style": b.style,
                    })
                })
                .collect();
            blocks.push(json!({"type": "actions", "block_id": "awl", "elements": elements}));
        }
        if let Some(o) = &self.outcome {
            blocks.push(json!({
                "type": "context",
                "elements": [{"type": "mrkdwn", "text": clip(&escape_slack(o))}],
            }));
        }
        Value::Array(blocks)
    }

    /// A Discord message: content, and an action row of buttons (an empty row list
    /// once decided, which removes the buttons when the message is edited).
    pub fn discord_message(&self) -> Value {
        let mut content = format!("**{}**\n{}", self.title, self.text);
        for (k, v) in &self.facts {
            content.push_str(&format!("\n{k}: {v}"));
        }
        if let Some(o) = &self.outcome {
            content.push_str(&format!("\n{o}"));
        }
        let components: Vec<Value> = if self.buttons.is_empty() {
            Vec::new()
        } else {
            vec![json!({
                "type": 1,
                "components": self.buttons.iter().map(|b| json!({
                    "type": 2,
                    "style": if b.style == "danger" { 4 } else { 3 },
                    "label": b.label,
                    "custom_id": b.action.id(),
                })).collect::<Vec<_>>(),
            })]
        };
        json!({
            "content": clip_to(&content, 1_900),
            "components": components,
            "allowed_mentions": {"parse": []},
        })
    }
}

/// Slack's three control characters, escaped as its docs ask.
fn escape_slack(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn clip(text: &str) -> String {
    clip_to(text, TEXT_CHARS)
}

fn clip_to(text: &str, chars: usize) -> String {
    crate::text::clip(text, chars)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate() -> Notice {
        Notice {
            key: "gate:g1".into(),
            kind: NoticeKind::GateWaiting,
            workflow: Some("release".into()),
            title: "release waits for a decision".into(),
            text: "Ship <1.2.0> & tell?".into(),
            facts: vec![("run".into(), "r1".into())],
            buttons: vec![
                Button {
                    action: Action::ApproveGate("g1".into()),
                    label: "Approve".into(),
                    style: "primary".into(),
                },
                Button {
                    action: Action::RejectGate("g1".into()),
                    label: "Reject".into(),
                    style: "danger".into(),
                },
            ],
            outcome: None,
        }
    }

    #[test]
    fn action_ids_round_trip() {
        for a in [
            Action::ApproveGate("g".into()),
            Action::RejectGate("g".into()),
            Action::ApproveReview("t".into()),
            Action::RequestChanges("t".into()),
            Action::Answer("t".into(), "q".into()),
        ] {
            assert_eq!(Action::parse(&a.id()), Some(a.clone()));
        }
        for bad in [
            "",
            "gate.approve",
            "gate.approve:",
            "other:x",
            "question.answer:t",
        ] {
            assert_eq!(Action::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_notice_renders_with_buttons_and_closed_without() {
        let open = gate();
        let blocks = open.slack_blocks();
        let text = blocks[0]["text"]["text"].as_str().unwrap();
        assert!(text.contains("Ship &lt;1.2.0&gt; &amp; tell?"), "{text}");
        assert_eq!(blocks[2]["elements"][0]["action_id"], "gate.approve:g1");
        assert_eq!(blocks[2]["elements"][1]["style"], "danger");
        let discord = open.discord_message();
        assert_eq!(
            discord["components"][0]["components"][1]["custom_id"],
            "gate.reject:g1"
        );
        assert_eq!(discord["components"][0]["components"][1]["style"], 4);
        let closed = open.clone().closed("Approved by ada");
        assert_ne!(closed.digest(), open.digest());
        assert_eq!(
            closed.digest(),
            open.clone().closed("Approved by ada").digest()
        );
        assert!(
            closed
                .slack_blocks()
                .as_array()
                .unwrap()
                .iter()
                .all(|b| b["type"] != "actions")
        );
        assert_eq!(closed.discord_message()["components"], json!([]));
        assert!(closed.plain().ends_with("Approved by ada"));
    }
}
