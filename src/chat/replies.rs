//! Replies to awl's questions in Discord. An HTTP-only Discord bot is not sent the
//! messages of its channels (those come over the Gateway, a websocket awl does not
//! hold), so awl reads them: every few seconds, for each open question it posted to a
//! Discord channel through the bot, the channel's messages after it (Get Channel
//! Messages), and a person's reply to it (`message_reference`) answers the question
//! as that person's principal, like a Slack thread reply. A refused reply (an unmapped
//! user, a role that may not) is answered in the thread. Once the question is
//! answered its message is closed and no longer read. The Answer button's form works
//! as well.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

use crate::domain::chat::{MessageRef, Platform};
use crate::projections::queries::{OpenChatMessage, open_questions};

use super::incoming::Incoming;

/// How often open questions are looked under.
pub const EVERY: Duration = Duration::from_secs(2);

/// Read replies until `stop`.
pub async fn read_every(incoming: Incoming, every: Duration, mut stop: watch::Receiver<bool>) {
    let mut seen: HashSet<String> = HashSet::new();
    loop {
        if let Err(e) = round(&incoming, &mut seen).await {
            tracing::warn!(error = %e, "cannot read Discord replies");
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
    }
}

/// The most pages of a channel read in one round (100 messages each).
const PAGES: usize = 5;

/// One look: each channel's messages since its oldest open question, read once for
/// all its questions (a request per channel, not per question: Discord's limits are
/// per route).
async fn round(incoming: &Incoming, seen: &mut HashSet<String>) -> Result<(), String> {
    let questions = open_questions(incoming.store(), "discord")
        .await
        .map_err(|e| e.to_string())?;
    let sender = incoming.sender();
    let mut by_channel: BTreeMap<String, Vec<OpenChatMessage>> = BTreeMap::new();
    for q in questions {
        // Only channels the bot posts to (a webhook's channel may not be readable).
        let bot_channel = sender
            .config()
            .channel(&q.channel)
            .and_then(|c| c.discord.as_ref())
            .is_some();
        if bot_channel {
            by_channel.entry(q.channel_id.clone()).or_default().push(q);
        }
    }
    for (channel_id, questions) in by_channel {
        let messages = match read_since(incoming, &channel_id, &questions).await {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(channel = channel_id, error = %e, "cannot read a Discord channel");
                continue;
            }
        };
        for q in &questions {
            answer_from(incoming, q, &messages, seen).await?;
        }
    }
    Ok(())
}

/// The messages of `channel_id` after the oldest of `questions`, oldest first.
async fn read_since(
    incoming: &Incoming,
    channel_id: &str,
    questions: &[OpenChatMessage],
) -> Result<Vec<Value>, super::SendError> {
    let oldest = questions
        .iter()
        .filter_map(|q| q.message_id.parse::<u128>().ok())
        .min()
        .unwrap_or(0);
    let mut after = oldest.to_string();
    let mut all = Vec::new();
    for _ in 0..PAGES {
        let page = incoming
            .sender()
            .discord_messages_after(channel_id, &after)
            .await?;
        let full = page.len() >= 100;
        match page.last().and_then(|m| m["id"].as_str()) {
            Some(last) => after = last.to_string(),
            None => break,
        }
        all.extend(page);
        if !full {
            break;
        }
    }
    Ok(all)
}

/// The first reply to `q` among `messages` that answers it; refusals told in the
/// thread.
async fn answer_from(
    incoming: &Incoming,
    q: &OpenChatMessage,
    messages: &[Value],
    seen: &mut HashSet<String>,
) -> Result<(), String> {
    for m in messages.iter().filter(|m| is_reply_to(m, &q.message_id)) {
        let (Some(id), Some(user), Some(text)) = (
            m["id"].as_str(),
            m["author"]["id"].as_str(),
            m["content"].as_str(),
        ) else {
            continue;
        };
        if !seen.insert(id.to_string()) {
            continue;
        }
        let told = incoming
            .answer_reply("discord", user, &q.notice, text)
            .await
            .map_err(|e| e.to_string())?;
        match told {
            Some(Err(why)) => {
                let thread = MessageRef {
                    platform: Platform::Discord,
                    channel_id: q.channel_id.clone(),
                    message_id: Some(id.to_string()),
                };
                if let Err(e) = incoming.sender().reply_in_thread(&thread, &why).await {
                    tracing::warn!(error = %e, "cannot answer a Discord reply");
                }
            }
            // Answered: the rest of this question's replies are not answers.
            Some(Ok(_)) => return Ok(()),
            None => {}
        }
    }
    Ok(())
}

/// A person's (not a bot's or a webhook's) reply to message `to`.
fn is_reply_to(message: &Value, to: &str) -> bool {
    message["message_reference"]["message_id"].as_str() == Some(to)
        && message["author"]["bot"] != true
        && message.get("webhook_id").is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_a_persons_reply_to_the_message_counts() {
        let reply = json!({"id": "2", "content": "8080", "author": {"id": "5"},
                           "message_reference": {"message_id": "1"}});
        assert!(is_reply_to(&reply, "1"));
        assert!(!is_reply_to(&reply, "3"), "a reply to another message");
        let mut bot = reply.clone();
        bot["author"]["bot"] = json!(true);
        assert!(!is_reply_to(&bot, "1"));
        let mut hook = reply.clone();
        hook["webhook_id"] = json!("9");
        assert!(!is_reply_to(&hook, "1"));
        assert!(!is_reply_to(
            &json!({"id": "4", "author": {"id": "5"}}),
            "1"
        ));
    }
}
