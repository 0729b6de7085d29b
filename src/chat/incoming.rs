//! Requests from Slack and Discord: button clicks, the forms they open, and slash
//! commands (`/awl send PROMPT`, `/awl status RUN`, `/awl tasks`). Each is checked
//! before anything in it is read (`verify.rs`: signature, time window, replay); the
//! chat user must be mapped to an awl principal (`awl chat users add`), whose role is
//! checked as a token's would be; then the runs service or the board decides, and the
//! event records the principal as `by`. The message the click came from is edited by
//! the notifier once the decision is in the log, like any other change; a click on
//! something already decided is answered, privately, with who decided it.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::auth::{Permission, Role};
use crate::board::{Board, Caller, NewTask, TaskQuery};
use crate::clock::Clock;
use crate::domain::ids::{GateId, QuestionId, RunId, TaskId};
use crate::domain::run::GateDecision as Decided;
use crate::domain::task::{Runner, TaskStatus};
use crate::domain::workspace::Capabilities;
use crate::runs::{GateDecision, Runs};
use crate::store::{ChatUser, EventStore, StoreError};

use super::notice::Action;
use super::send::Sender;
use super::verify::{self, Refused, Replays};

/// What goes back to the service.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// 200 with no body (Slack: the click is acknowledged).
    Empty,
    Json(Value),
}

#[derive(Debug, thiserror::Error)]
pub enum IncomingError {
    /// 401: not from the service (or replayed, or stale).
    #[error(transparent)]
    Refused(#[from] Refused),
    /// 400: a body the service would not send.
    #[error("{0}")]
    Malformed(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The signature headers of one request.
#[derive(Debug, Clone, Default)]
pub struct Signed<'a> {
    pub timestamp: Option<&'a str>,
    pub signature: Option<&'a str>,
    pub body: &'a [u8],
}

/// Handles what chat sends. Cheap to clone.
#[derive(Clone)]
pub struct Incoming {
    store: EventStore,
    runs: Runs,
    board: Board,
    sender: Sender,
    clock: Clock,
    replays: Arc<Replays>,
}

/// The outcome of an action, as the clicker is told.
pub type Told = Result<String, String>;

impl Incoming {
    pub fn sender(&self) -> &Sender {
        &self.sender
    }

    pub fn store(&self) -> &EventStore {
        &self.store
    }

    pub fn new(store: EventStore, runs: Runs, board: Board, sender: Sender, clock: Clock) -> Self {
        Self {
            store,
            runs,
            board,
            sender,
            clock,
            replays: Arc::default(),
        }
    }

    fn now(&self) -> DateTime<Utc> {
        (self.clock)()
    }

    /// Check a Slack request's signature and that it is not a replay.
    fn slack_checked(&self, req: &Signed<'_>) -> Result<(), IncomingError> {
        let secret = self
            .sender
            .config()
            .file
            .slack
            .as_ref()
            .and_then(|s| s.signing_secret_env.as_deref())
            .and_then(|var| std::env::var(var).ok())
            .ok_or(Refused::NotConfigured("Slack"))?;
        self.checked(req, |now| {
            verify::slack(&secret, req.timestamp, req.signature, req.body, now)
        })
    }

    /// Check a Discord request's signature and that it is not a replay.
    fn discord_checked(&self, req: &Signed<'_>) -> Result<(), IncomingError> {
        let key = self
            .sender
            .config()
            .file
            .discord
            .as_ref()
            .and_then(|d| d.public_key.clone())
            .ok_or(Refused::NotConfigured("Discord"))?;
        self.checked(req, |now| {
            verify::discord(&key, req.timestamp, req.signature, req.body, now)
        })
    }

    /// `signed` (the service's own check at `now`), then a replay check.
    fn checked(
        &self,
        req: &Signed<'_>,
        signed: impl FnOnce(DateTime<Utc>) -> Result<(), Refused>,
    ) -> Result<(), IncomingError> {
        let now = self.now();
        signed(now)?;
        self.replays.first_sight(
            req.signature.unwrap_or_default(),
            req.timestamp.unwrap_or_default(),
            now,
        )?;
        Ok(())
    }

    /// The principal `user` acts as, if mapped and allowed `permission`.
    async fn principal(
        &self,
        platform: &str,
        user: &str,
        permission: Permission,
    ) -> Result<Result<ChatUser, String>, StoreError> {
        let Some(mapped) = self.store.chat_user(platform, user).await? else {
            return Ok(Err(format!(
                "You are not an awl user here: ask an admin to map you \
                 (`awl chat users add {platform} {user} --as NAME --role operator`)."
            )));
        };
        let allowed = mapped
            .role
            .parse::<Role>()
            .map(|r| r.allows(permission))
            .unwrap_or(false);
        if !allowed {
            return Ok(Err(format!(
                "{} ({}) may not do that: it needs the operator role.",
                mapped.principal, mapped.role
            )));
        }
        Ok(Ok(mapped))
    }

    // ---- Slack ------------------------------------------------------------------

    /// Slack's interactivity endpoint: `payload=` a block action or a form.
    pub async fn slack_interaction(&self, req: Signed<'_>) -> Result<Answer, IncomingError> {
        self.slack_checked(&req)?;
        let payload = form_field(req.body, "payload")
            .ok_or_else(|| IncomingError::Malformed("no `payload` field".into()))?;
        let payload: Value = serde_json::from_str(&payload)
            .map_err(|e| IncomingError::Malformed(format!("`payload` is not JSON: {e}")))?;
        let user = payload["user"]["id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        match payload["type"].as_str() {
            Some("block_actions") => {
                let channel = payload["channel"]["id"].as_str().unwrap_or_default();
                let Some(action) = payload["actions"][0]["action_id"]
                    .as_str()
                    .and_then(Action::parse)
                else {
                    return Ok(Answer::Empty);
                };
                let told = match self.principal("slack", &user, Permission::Operate).await? {
                    Err(refused) => Err(refused),
                    Ok(who) => match action.asks_for() {
                        Some(label) => {
                            let trigger = payload["trigger_id"].as_str().unwrap_or_default();
                            match self
                                .sender
                                .slack_form(trigger, &action.id(), label, channel)
                                .await
                            {
                                Ok(()) => return Ok(Answer::Empty),
                                Err(e) => Err(format!("Cannot open the form: {e}")),
                            }
                        }
                        None => self.decide(&action, &who.principal, None).await?,
                    },
                };
                if let Err(text) = told
                    && let Err(e) = self.sender.slack_ephemeral(channel, &user, &text).await
                {
                    tracing::warn!(error = %e, "cannot answer a Slack click");
                }
                Ok(Answer::Empty)
            }
            Some("view_submission") => {
                let view = &payload["view"];
                let Some(action) = view["callback_id"].as_str().and_then(Action::parse) else {
                    return Ok(Answer::Json(json!({"response_action": "clear"})));
                };
                let text = view["state"]["values"]["text"]["text"]["value"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let told = match self.principal("slack", &user, Permission::Operate).await? {
                    Err(refused) => Err(refused),
                    Ok(who) => self.decide(&action, &who.principal, Some(text)).await?,
                };
                Ok(Answer::Json(match told {
                    Ok(_) => json!({"response_action": "clear"}),
                    Err(why) => json!({"response_action": "errors", "errors": {"text": why}}),
                }))
            }
            _ => Ok(Answer::Empty),
        }
    }

    /// Slack's slash command endpoint (`/awl ...`): answered privately.
    pub async fn slack_command(&self, req: Signed<'_>) -> Result<Answer, IncomingError> {
        self.slack_checked(&req)?;
        let user = form_field(req.body, "user_id").unwrap_or_default();
        let text = form_field(req.body, "text").unwrap_or_default();
        let reply = self.command("slack", &user, &text).await?;
        Ok(Answer::Json(
            json!({"response_type": "ephemeral", "text": reply}),
        ))
    }

    /// Slack's Events API endpoint: the URL check, and messages: a reply in the thread
    /// of a question awl posted answers that question, as the replying user.
    pub async fn slack_event(&self, req: Signed<'_>) -> Result<Answer, IncomingError> {
        self.slack_checked(&req)?;
        let body: Value = serde_json::from_slice(req.body)
            .map_err(|e| IncomingError::Malformed(format!("the body is not JSON: {e}")))?;
        match body["type"].as_str() {
            Some("url_verification") => Ok(Answer::Json(json!({"challenge": body["challenge"]}))),
            Some("event_callback") => {
                self.slack_message(&body["event"]).await?;
                Ok(Answer::Empty)
            }
            _ => Ok(Answer::Empty),
        }
    }

    /// A message event: only a person's reply in the thread of an open question of
    /// awl's counts (bots, edits and other messages are not answers).
    async fn slack_message(&self, event: &Value) -> Result<(), IncomingError> {
        if event["type"] != "message"
            || event.get("subtype").is_some()
            || event.get("bot_id").is_some()
        {
            return Ok(());
        }
        let (Some(channel), Some(thread), Some(user), Some(text)) = (
            event["channel"].as_str(),
            event["thread_ts"].as_str(),
            event["user"].as_str(),
            event["text"].as_str(),
        ) else {
            return Ok(());
        };
        if event["ts"].as_str() == Some(thread) {
            return Ok(());
        }
        let notice = self.notice_of("slack", channel, thread).await?;
        let Some(notice) = notice else {
            return Ok(());
        };
        if let Some(Err(why)) = self.answer_reply("slack", user, &notice, text).await?
            && let Err(e) = self.sender.slack_ephemeral(channel, user, &why).await
        {
            tracing::warn!(error = %e, "cannot answer a Slack thread reply");
        }
        Ok(())
    }

    /// A reply by `user` of `platform` to the message of `notice`: if the notice is a
    /// task's question, the reply answers it as the user's principal. `None`: not a
    /// question's message; else what to tell the user.
    pub async fn answer_reply(
        &self,
        platform: &str,
        user: &str,
        notice: &str,
        text: &str,
    ) -> Result<Option<Told>, IncomingError> {
        let Some((task, question)) = notice
            .strip_prefix("question:")
            .and_then(|rest| rest.split_once(':'))
        else {
            return Ok(None);
        };
        let action = Action::Answer(task.to_string(), question.to_string());
        Ok(Some(
            match self.principal(platform, user, Permission::Operate).await? {
                Err(refused) => Err(refused),
                Ok(who) => {
                    self.decide(&action, &who.principal, Some(text.to_string()))
                        .await?
                }
            },
        ))
    }

    /// The notice of a message awl posted. A reply can come before the chat
    /// projection has applied the message's `chat.posted`: then the projection is given
    /// up to two seconds to reach the log's head as it was, and asked again.
    async fn notice_of(
        &self,
        platform: &str,
        channel: &str,
        message: &str,
    ) -> Result<Option<String>, IncomingError> {
        use crate::projections::queries::{QueryError, chat_notice, checkpoint};
        let read = |e: QueryError| {
            IncomingError::Malformed(format!("cannot find the thread's message: {e}"))
        };
        if let Some(found) = chat_notice(&self.store, platform, channel, message)
            .await
            .map_err(read)?
        {
            return Ok(Some(found));
        }
        let head = self.store.head().await?;
        for _ in 0..20 {
            if checkpoint(&self.store, "chat").await.map_err(read)? >= head {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        chat_notice(&self.store, platform, channel, message)
            .await
            .map_err(read)
    }

    // ---- Discord ------------------------------------------------------------------

    /// Discord's interactions endpoint: pings, button clicks, forms, `/awl`.
    pub async fn discord_interaction(&self, req: Signed<'_>) -> Result<Answer, IncomingError> {
        self.discord_checked(&req)?;
        let i: Value = serde_json::from_slice(req.body)
            .map_err(|e| IncomingError::Malformed(format!("the body is not JSON: {e}")))?;
        let user = i["member"]["user"]["id"]
            .as_str()
            .or_else(|| i["user"]["id"].as_str())
            .unwrap_or_default()
            .to_string();
        let private =
            |text: String| Answer::Json(json!({"type": 4, "data": {"content": text, "flags": 64}}));
        match i["type"].as_u64() {
            Some(1) => Ok(Answer::Json(json!({"type": 1}))),
            Some(2) => {
                let sub = &i["data"]["options"][0];
                let mut text = sub["name"].as_str().unwrap_or_default().to_string();
                for o in sub["options"].as_array().into_iter().flatten() {
                    text.push(' ');
                    text.push_str(&value_text(&o["value"]));
                }
                Ok(private(self.command("discord", &user, &text).await?))
            }
            Some(3) => {
                let Some(action) = i["data"]["custom_id"].as_str().and_then(Action::parse) else {
                    return Ok(private("That button is not awl's.".into()));
                };
                let who = match self
                    .principal("discord", &user, Permission::Operate)
                    .await?
                {
                    Err(refused) => return Ok(private(refused)),
                    Ok(who) => who,
                };
                if let Some(label) = action.asks_for() {
                    return Ok(Answer::Json(json!({
                        "type": 9,
                        "data": {
                            "custom_id": action.id(),
                            "title": "awl",
                            "components": [{"type": 1, "components": [{
                                "type": 4, "custom_id": "text", "style": 2, "label": label,
                                "required": true, "max_length": 2000,
                            }]}],
                        },
                    })));
                }
                Ok(match self.decide(&action, &who.principal, None).await? {
                    // Acknowledged; the notifier edits the message once it is decided.
                    Ok(_) => Answer::Json(json!({"type": 6})),
                    Err(why) => private(why),
                })
            }
            Some(5) => {
                let Some(action) = i["data"]["custom_id"].as_str().and_then(Action::parse) else {
                    return Ok(private("That form is not awl's.".into()));
                };
                let text = i["data"]["components"][0]["components"][0]["value"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let who = match self
                    .principal("discord", &user, Permission::Operate)
                    .await?
                {
                    Err(refused) => return Ok(private(refused)),
                    Ok(who) => who,
                };
                Ok(private(
                    match self.decide(&action, &who.principal, Some(text)).await? {
                        Ok(done) | Err(done) => done,
                    },
                ))
            }
            _ => Err(IncomingError::Malformed(
                "an interaction type awl does not take".into(),
            )),
        }
    }

    // ---- what both do ---------------------------------------------------------------

    /// `send PROMPT`, `status RUN`, `tasks`: the answer's text.
    async fn command(&self, platform: &str, user: &str, text: &str) -> Result<String, StoreError> {
        let text = text.trim();
        let (verb, rest) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
        let rest = rest.trim();
        let needs = if verb == "send" {
            Permission::Operate
        } else {
            Permission::Read
        };
        let who = match self.principal(platform, user, needs).await? {
            Err(refused) => return Ok(refused),
            Ok(who) => who,
        };
        Ok(match verb {
            "send" if !rest.is_empty() => {
                let new = NewTask {
                    prompt: rest.to_string(),
                    capabilities: Capabilities::default(),
                    workspace: None,
                    agent_hint: None,
                    priority: 0,
                    review_required: false,
                    runner: Runner::default(),
                };
                match self
                    .board
                    .send(new, &Caller::User(who.principal.clone()), None)
                    .await
                {
                    Ok((task, _)) => format!("Task {} queued.", task.task_id),
                    Err(e) => format!("Cannot send it: {e}"),
                }
            }
            "status" if !rest.is_empty() => match rest.parse::<RunId>() {
                Err(_) => format!("`{rest}` is not a run id."),
                Ok(id) => match self.runs.get(id).await {
                    Ok((run, _)) => {
                        let status = run.status().map(|s| s.to_string()).unwrap_or_default();
                        let workflow = run.workflow().map(ToString::to_string).unwrap_or_default();
                        format!("Run {id} of {workflow}: {status}.")
                    }
                    Err(e) => format!("{e}"),
                },
            },
            "tasks" => {
                let query = TaskQuery {
                    statuses: TaskStatus::ACTIVE.to_vec(),
                    limit: 20,
                    ..TaskQuery::default()
                };
                match self.board.tasks(&query).await {
                    Ok(page) if page.tasks.is_empty() => "No open tasks.".to_string(),
                    Ok(page) => page
                        .tasks
                        .iter()
                        .map(|t| {
                            format!(
                                "{} {} {}",
                                t.status,
                                t.task_id,
                                crate::text::clip(&t.prompt, 80)
                            )
                        })
                        .collect::<Vec<_>>()
                        .join("\n"),
                    Err(e) => format!("Cannot list the tasks: {e}"),
                }
            }
            _ => "Usage: `/awl send PROMPT`, `/awl status RUN_ID`, `/awl tasks`.".to_string(),
        })
    }

    /// Carry out `action` as `by` (with the text a form gave); what to tell.
    async fn decide(
        &self,
        action: &Action,
        by: &str,
        text: Option<String>,
    ) -> Result<Told, StoreError> {
        let caller = Caller::User(by.to_string());
        let text = text.filter(|t| !t.trim().is_empty());
        Ok(match action {
            Action::ApproveGate(g) | Action::RejectGate(g) => {
                let Ok(gate) = g.parse::<GateId>() else {
                    return Ok(Err(format!("`{g}` is not a gate id.")));
                };
                let decision = match action {
                    Action::ApproveGate(_) => GateDecision::Approve { comment: text },
                    _ => match text {
                        Some(comment) => GateDecision::Reject { comment },
                        None => return Ok(Err("Rejecting a gate needs a reason.".into())),
                    },
                };
                match self.runs.decide_gate(gate, decision, by).await {
                    Ok(_) => Ok("Decided.".into()),
                    Err(e) => Err(self.why_not_gate(gate, &e.to_string()).await),
                }
            }
            Action::ApproveReview(t) | Action::RequestChanges(t) => {
                let Ok(task) = t.parse::<TaskId>() else {
                    return Ok(Err(format!("`{t}` is not a task id.")));
                };
                let done = match (action, text) {
                    (Action::ApproveReview(_), _) => self.board.approve(task, &caller).await,
                    (_, Some(feedback)) => {
                        self.board.request_changes(task, feedback, &caller).await
                    }
                    (_, None) => return Ok(Err("Requesting changes needs what to change.".into())),
                };
                match done {
                    Ok(_) => Ok("Decided.".into()),
                    Err(e) => Err(self.why_not_task(task, &e.to_string()).await),
                }
            }
            Action::Answer(t, q) => {
                let (Ok(task), Ok(question)) = (t.parse::<TaskId>(), q.parse::<QuestionId>())
                else {
                    return Ok(Err("That is not a question of a task.".into()));
                };
                let Some(answer) = text else {
                    return Ok(Err("An answer cannot be empty.".into()));
                };
                match self
                    .board
                    .answer(task, Some(question), answer, &caller)
                    .await
                {
                    Ok(_) => Ok("Answered.".into()),
                    Err(e) => Err(self.why_not_task(task, &e.to_string()).await),
                }
            }
        })
    }

    /// Why a gate could not be decided: who decided it, when it was.
    async fn why_not_gate(&self, gate: GateId, error: &str) -> String {
        let Ok(run_id) = self.runs.find_gate(gate).await else {
            return format!("No such gate: {error}");
        };
        match self
            .runs
            .get(run_id)
            .await
            .ok()
            .and_then(|(run, _)| run.gate(&gate).and_then(|g| g.decision.clone()))
        {
            Some(Decided::Approved { by, at, .. }) => format!("Already approved by {by} at {at}."),
            Some(Decided::Rejected { by, at, .. }) => format!("Already rejected by {by} at {at}."),
            Some(Decided::Expired { at }) => format!("The gate expired at {at}."),
            None => format!("Cannot decide it: {error}"),
        }
    }

    async fn why_not_task(&self, task: TaskId, error: &str) -> String {
        match self.board.task(task).await {
            Ok(view) => format!("The task is {} now: {error}", view.status),
            Err(_) => format!("Cannot do that: {error}"),
        }
    }
}

/// A field of an `application/x-www-form-urlencoded` body.
fn form_field(body: &[u8], name: &str) -> Option<String> {
    form_urlencoded::parse(body)
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl crate::error::Classified for IncomingError {
    fn kind(&self) -> crate::error::ErrorKind {
        use crate::error::ErrorKind;
        match self {
            Self::Refused(Refused::NotConfigured(_)) => ErrorKind::NotFound,
            Self::Refused(_) => ErrorKind::Unauthenticated,
            Self::Malformed(_) => ErrorKind::Invalid,
            Self::Store(e) => e.kind(),
        }
    }

    fn code(&self) -> &'static str {
        match self {
            Self::Refused(Refused::NotConfigured(_)) => "chat_not_configured",
            Self::Refused(Refused::Replayed) => "replayed",
            Self::Refused(_) => "bad_signature",
            Self::Malformed(_) => "invalid_request",
            Self::Store(e) => e.code(),
        }
    }
}
