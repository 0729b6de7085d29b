//! `awl chat users add|list|remove` (chat users mapped to awl principals, straight in
//! the store, like tokens) and `awl chat test CHANNEL` (a test message through the
//! chat file's channel, as the server would send it).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::Utc;
use clap::Subcommand;

use crate::auth::Role;
use crate::chat::config::NoticeKind;
use crate::chat::notice::Notice;
use crate::chat::{ChatConfig, Sender};
use crate::store::{ChatUser, EventStore};

#[derive(Debug, Subcommand)]
pub enum ChatCommand {
    /// Chat users allowed to act from Slack or Discord, and as whom.
    #[command(subcommand)]
    Users(UsersCommand),
    /// Send a test message to CHANNEL (a channel of the chat file).
    Test {
        channel: String,
        /// The chat file (default: ./chat.yaml).
        #[arg(long, env = "AWL_CHAT_CONFIG")]
        chat_config: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub enum UsersCommand {
    /// Map a chat user to an awl principal with a role.
    Add {
        /// slack or discord.
        platform: String,
        /// The user's id on that service (Slack `U...`, a Discord snowflake).
        user: String,
        /// The awl principal they act as (recorded as `by` on what they decide).
        #[arg(long = "as")]
        principal: String,
        /// admin, operator, agent or viewer: what they may do, as for a token.
        #[arg(long, default_value = "operator")]
        role: Role,
    },
    /// Every mapping.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Remove a mapping: the user's clicks and commands are refused from now on.
    Remove { platform: String, user: String },
}

/// The chat file named, or `./chat.yaml` when it exists.
pub fn chat_file(named: Option<&Path>) -> anyhow::Result<Option<ChatConfig>> {
    let path = match named {
        Some(p) => p.to_path_buf(),
        None => {
            let default = PathBuf::from("chat.yaml");
            if !default.exists() {
                return Ok(None);
            }
            default
        }
    };
    crate::chat::config::load(&path)
        .map(Some)
        .map_err(|d| anyhow::anyhow!("{d}"))
}

fn platform(name: &str) -> anyhow::Result<String> {
    match name {
        "slack" | "discord" => Ok(name.to_string()),
        other => anyhow::bail!("unknown chat platform {other:?}: slack or discord"),
    }
}

pub async fn run(store: Option<EventStore>, command: ChatCommand) -> anyhow::Result<()> {
    match command {
        ChatCommand::Test {
            channel,
            chat_config,
        } => test(&channel, chat_config.as_deref()).await,
        ChatCommand::Users(users) => {
            let store = store.ok_or_else(|| anyhow::anyhow!("no store"))?;
            match users {
                UsersCommand::Add {
                    platform: p,
                    user,
                    principal,
                    role,
                } => {
                    let mapped = ChatUser {
                        platform: platform(&p)?,
                        user_id: user.trim().to_string(),
                        principal: principal.trim().to_string(),
                        role: role.as_str().to_string(),
                        created_at: Utc::now(),
                    };
                    if mapped.user_id.is_empty() || mapped.principal.is_empty() {
                        anyhow::bail!("the user id and --as must not be empty");
                    }
                    store.map_chat_user(&mapped).await?;
                    println!(
                        "{} user {} acts as {} ({})",
                        mapped.platform, mapped.user_id, mapped.principal, mapped.role
                    );
                }
                UsersCommand::List { json } => {
                    let users = store.chat_users().await?;
                    if json {
                        println!("{}", serde_json::to_string(&users)?);
                    } else if users.is_empty() {
                        println!("no chat users: every click and command from chat is refused");
                    } else {
                        for u in users {
                            println!(
                                "{:<8} {:<24} {:<20} {}",
                                u.platform, u.user_id, u.principal, u.role
                            );
                        }
                    }
                }
                UsersCommand::Remove { platform: p, user } => {
                    if !store.unmap_chat_user(&platform(&p)?, &user).await? {
                        anyhow::bail!("{p} user {user} was not mapped");
                    }
                    println!("{p} user {user} removed");
                }
            }
            Ok(())
        }
    }
}

async fn test(channel: &str, chat_config: Option<&Path>) -> anyhow::Result<()> {
    let config = chat_file(chat_config)?
        .ok_or_else(|| anyhow::anyhow!("no chat file: give --chat-config or write ./chat.yaml"))?;
    let sender = Sender::new(Arc::new(config))?;
    let notice = Notice {
        key: format!("test:{}", Utc::now().timestamp_micros()),
        kind: NoticeKind::RunFailed,
        workflow: None,
        title: "awl test message".into(),
        text: format!("awl can post to `{channel}`."),
        facts: Vec::new(),
        buttons: Vec::new(),
        outcome: None,
    };
    let posted = sender
        .post(channel, &notice)
        .await
        .map_err(|e| anyhow::anyhow!("cannot post to `{channel}`: {e}"))?;
    println!(
        "posted to {channel} ({} {}{})",
        posted.platform.as_str(),
        posted.channel_id,
        posted
            .message_id
            .map(|m| format!(" {m}"))
            .unwrap_or_default()
    );
    Ok(())
}
