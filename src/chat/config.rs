//! The chat configuration: a YAML file (`--chat-config`, `AWL_CHAT_CONFIG`, default
//! `./chat.yaml` when it exists) naming the chat channels awl may post to and the
//! routes saying which notices go where. Checked like a workflow file: every problem
//! at its line and column. Credentials are never in the file, only the names of the
//! environment variables that hold them, read when they are used.
//!
//! ```yaml
//! slack:
//!   bot_token_env: SLACK_BOT_TOKEN          # chat.postMessage / chat.update
//!   signing_secret_env: SLACK_SIGNING_SECRET # buttons, slash commands, thread replies
//! discord:
//!   bot_token_env: DISCORD_BOT_TOKEN
//!   application_id: "1100000000000000001"
//!   public_key: 3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c
//! channels:
//!   ops: {slack: C0AWL0001}                 # a Slack channel, through the bot
//!   alerts: {slack_webhook_env: SLACK_WEBHOOK_URL}
//!   dev: {discord: "100000000000000001"}    # a Discord channel, through the bot
//!   hook: {discord_webhook_env: DISCORD_WEBHOOK_URL}
//! notify:
//!   - {events: [gate_waiting, review_requested], channel: ops}
//!   - {events: [run_failed], channel: alerts, workflows: [release]}
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::workflow::{Diagnostic, Diagnostics, FileSchema, check_file, problem_at};

/// Slack's Web API.
pub const SLACK_API: &str = "https://slack.com/api";
/// Discord's REST API.
pub const DISCORD_API: &str = "https://discord.com/api/v10";

pub use crate::workflow::model::ChatNotice as NoticeKind;

/// The chat file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChatFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slack: Option<SlackApp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discord: Option<DiscordApp>,
    /// The channels by the name routes and `awl chat test` use.
    #[serde(default)]
    pub channels: BTreeMap<String, ChannelSpec>,
    /// Which notices go to which channel.
    #[serde(default)]
    pub notify: Vec<Route>,
}

/// awl's Slack app.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SlackApp {
    /// The environment variable holding the bot token (`xoxb-...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bot_token_env: Option<String>,
    /// The environment variable holding the app's signing secret (incoming requests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signing_secret_env: Option<String>,
    /// The Web API's base (default `https://slack.com/api`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_base: Option<String>,
}

/// awl's Discord application.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DiscordApp {
    /// The environment variable holding the bot token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bot_token_env: Option<String>,
    /// The application's id (interaction responses are edited under it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application_id: Option<String>,
    /// The application's Ed25519 public key, hex (incoming interactions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key: Option<String>,
    /// The REST API's base (default `https://discord.com/api/v10`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_base: Option<String>,
}

/// Where one named channel is: exactly one of the four.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChannelSpec {
    /// A Slack channel id, posted to with the bot token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slack: Option<String>,
    /// The environment variable holding a Slack incoming-webhook URL (its messages
    /// cannot be edited: a change is posted after them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slack_webhook_env: Option<String>,
    /// A Discord channel id, posted to with the bot token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discord: Option<String>,
    /// The environment variable holding a Discord webhook URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discord_webhook_env: Option<String>,
}

/// Notices of `events` (of `workflows`, when given) go to `channel`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Route {
    #[schemars(length(min = 1))]
    pub events: Vec<NoticeKind>,
    pub channel: String,
    /// Only these workflows (none: every workflow, and tasks sent by hand).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workflows: Vec<String>,
}

/// A checked chat configuration.
#[derive(Debug, Clone, Default)]
pub struct ChatConfig {
    pub file: ChatFile,
    pub path: Option<PathBuf>,
}

impl ChatConfig {
    /// The channels `kind` of `workflow` goes to (`None`: not a run's), by the chat
    /// file's routes and `declared`, the workflow's own.
    pub fn channels_for<'a>(
        &'a self,
        kind: NoticeKind,
        workflow: Option<&str>,
        declared: &'a [crate::workflow::model::ChatRoute],
    ) -> Vec<&'a str> {
        let mut out: Vec<&str> = self
            .file
            .notify
            .iter()
            .filter(|r| r.events.contains(&kind))
            .filter(|r| {
                r.workflows.is_empty()
                    || workflow.is_some_and(|w| r.workflows.iter().any(|x| x == w))
            })
            .map(|r| r.channel.as_str())
            .chain(
                declared
                    .iter()
                    .filter(|r| r.events.contains(&kind))
                    .map(|r| r.channel.as_str()),
            )
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    pub fn channel(&self, name: &str) -> Option<&ChannelSpec> {
        self.file.channels.get(name)
    }

    pub fn slack_api(&self) -> &str {
        self.file
            .slack
            .as_ref()
            .and_then(|s| s.api_base.as_deref())
            .unwrap_or(SLACK_API)
            .trim_end_matches('/')
    }

    pub fn discord_api(&self) -> &str {
        self.file
            .discord
            .as_ref()
            .and_then(|d| d.api_base.as_deref())
            .unwrap_or(DISCORD_API)
            .trim_end_matches('/')
    }

    /// Whether any route sends anything.
    pub fn notifies(&self) -> bool {
        !self.file.notify.is_empty()
    }
}

fn schema() -> &'static FileSchema {
    static SCHEMA: OnceLock<FileSchema> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let generator = schemars::generate::SchemaGenerator::new(
            schemars::generate::SchemaSettings::draft2020_12(),
        );
        FileSchema::new(generator.into_root_schema_for::<ChatFile>().to_value())
    })
}

/// Check a chat file: the schema, then every channel naming exactly one place, every
/// route naming a channel there is, and the app credentials the channels need.
pub fn check(path: &Path, source: &str) -> Result<ChatConfig, Diagnostics> {
    let (file, _json, map) = check_file::<ChatFile>(path, source, schema())?;
    let mut problems = Vec::new();
    let at = |pointer: &str, message: String| problem_at(path, source, &map, pointer, message);
    for (name, spec) in &file.channels {
        let pointer = format!("/channels/{name}");
        let places = [
            spec.slack.is_some(),
            spec.slack_webhook_env.is_some(),
            spec.discord.is_some(),
            spec.discord_webhook_env.is_some(),
        ]
        .iter()
        .filter(|p| **p)
        .count();
        if places != 1 {
            problems.push(at(
                &pointer,
                format!(
                    "channel `{name}` needs exactly one of `slack`, `slack_webhook_env`, \
                     `discord`, `discord_webhook_env` (it has {places})"
                ),
            ));
        }
        if spec.slack.is_some()
            && file
                .slack
                .as_ref()
                .and_then(|s| s.bot_token_env.as_ref())
                .is_none()
        {
            problems.push(at(
                &pointer,
                format!("channel `{name}` posts with the Slack bot: give `slack.bot_token_env`"),
            ));
        }
        if spec.discord.is_some()
            && file
                .discord
                .as_ref()
                .and_then(|d| d.bot_token_env.as_ref())
                .is_none()
        {
            problems.push(at(
                &pointer,
                format!(
                    "channel `{name}` posts with the Discord bot: give `discord.bot_token_env`"
                ),
            ));
        }
    }
    if let Some(key) = file.discord.as_ref().and_then(|d| d.public_key.as_ref())
        && super::verify::public_key(key).is_none()
    {
        problems.push(at(
            "/discord/public_key",
            "`public_key` must be the application's Ed25519 public key: 64 hex digits".into(),
        ));
    }
    for (i, route) in file.notify.iter().enumerate() {
        if !file.channels.contains_key(&route.channel) {
            problems.push(at(
                &format!("/notify/{i}/channel"),
                format!(
                    "unknown channel `{}` (the file names: {})",
                    route.channel,
                    file.channels.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            ));
        }
    }
    if !problems.is_empty() {
        return Err(Diagnostics(problems));
    }
    Ok(ChatConfig {
        file,
        path: Some(path.to_path_buf()),
    })
}

/// Read and check the chat file at `path`.
pub fn load(path: &Path) -> Result<ChatConfig, Diagnostics> {
    let source = std::fs::read_to_string(path).map_err(|e| {
        Diagnostics(vec![Diagnostic {
            file: path.to_path_buf(),
            position: Default::default(),
            field: String::new(),
            message: format!("cannot read the chat file: {e}"),
        }])
    })?;
    check(path, &source)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of `deploy/` loads, and says what it routes where.
    #[test]
    fn the_example_chat_file_loads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/chat.example.yaml");
        let config = load(&path).unwrap_or_else(|d| panic!("{d}"));
        assert_eq!(
            config.channels_for(NoticeKind::GateWaiting, Some("release"), &[]),
            ["approvals", "dev"]
        );
        assert_eq!(
            config.channels_for(NoticeKind::GateWaiting, Some("other"), &[]),
            ["approvals"]
        );
        assert_eq!(
            config.channels_for(NoticeKind::RunFailed, None, &[]),
            ["alerts"]
        );
    }

    #[test]
    fn problems_are_told_at_their_place() {
        let source = "channels:\n  ops: {slack: C1, discord: \"2\"}\nnotify:\n  - {events: [gate_waiting], channel: nowhere}\n  - {events: [lunch], channel: ops}\n";
        let problems = check(Path::new("chat.yaml"), source)
            .expect_err("problems")
            .to_string();
        assert!(problems.contains("lunch"), "{problems}");
        let source = "channels:\n  ops: {slack: C1, discord: \"2\"}\nnotify:\n  - {events: [gate_waiting], channel: nowhere}\n";
        let problems = check(Path::new("chat.yaml"), source)
            .expect_err("problems")
            .to_string();
        assert!(problems.contains("needs exactly one of"), "{problems}");
        assert!(problems.contains("unknown channel `nowhere`"), "{problems}");
        assert!(problems.contains("slack.bot_token_env"), "{problems}");
        assert!(problems.contains("chat.yaml:4"), "at its line: {problems}");
    }
}
