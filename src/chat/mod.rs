//! Chat: Slack and Discord for notifications, approvals, questions and tasks.
//!
//! - `config.rs`: the chat file (channels, routes, the apps' credentials by
//!   environment variable), checked with line and column.
//! - `notice.rs`: what awl tells, once for both services, and the buttons' actions.
//! - `send.rs`: posting, editing in place, private answers and forms over the
//!   services' HTTP APIs, waiting out 429s as long as asked.
//! - `verify.rs`: incoming requests' signatures (Slack HMAC, Discord Ed25519), their
//!   time window and replays.
//! - `notifier.rs`: the log follower that posts and edits, recording each message on
//!   its `chat` stream (`domain::chat`).
//! - `incoming.rs`: clicks, forms, slash commands and thread replies: the chat user
//!   mapped to an awl principal (`awl chat users`), the role checked as for a token,
//!   then the runs service or the board decides, recording who.
//! - `replies.rs`: replies to awl's questions in Discord, read back (an HTTP-only bot
//!   is not sent channel messages) and taken as answers.

pub mod config;
pub mod incoming;
pub mod notice;
pub mod notifier;
pub mod replies;
pub mod send;
pub mod verify;

pub use config::{ChatConfig, NoticeKind};
pub use notifier::Notifier;
pub use send::{SendError, Sender};
