//! The chat notifier: follows the log and tells chat what the routes ask for. A gate
//! opened is posted with Approve and Reject buttons and edited in place once it is
//! decided (or expires), so no button outlives its decision; a run that failed is
//! posted; a task's question is posted with an Answer button (and answered from a
//! reply in its thread), then edited with the answer; work in review is posted with
//! Approve and Request changes buttons, then edited with the verdict.
//!
//! What was sent is recorded on each message's `chat` stream (`domain::chat`), and the
//! notifier's place in the log in `follower_checkpoints`: after a crash it reads the
//! last events again, and a notice whose message already says the same is not sent
//! twice. A chat service that is down or rate-limits is waited out per message (as
//! long as it asks, up to a cap) and a delivery that still fails is recorded as such;
//! runs and tasks never wait for chat: the notifier is its own task, behind the log.
//! A server that starts with no checkpoint starts at the log's head: history is not
//! told again, and events more than a day old when read (a checkpoint left from
//! before chat was switched off) are passed over. Of many servers one delivers at a
//! time: the holder of the notifier's lease (`store::FollowerLease`: 30 s, renewed
//! every 5 s by a task of its own, so a delivery waiting out a rate limit keeps it);
//! another takes over at once when the holder stops, or when its lease lapses.

use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use tokio::sync::watch;

use crate::clock::Clock;
use crate::definitions::Definitions;
use crate::domain::Decide;
use crate::domain::chat::{ChatCommand, ChatError, ChatMessage, Delivery, stream_id};
use crate::domain::run::{Run, RunEvent};
use crate::domain::task::{Task, TaskEvent};
use crate::log::{EventFilter, Metadata, RecordedEvent, StreamRef, StreamType};
use crate::store::command::{Command, CommandError};
use crate::store::{EventStore, FollowerLease, StoreError, domain_io, until_held};
use crate::vault::{Keys, Reveal, reveal_string};
use crate::workflow::model::ChatRoute;

use super::config::NoticeKind;
use super::notice::{Action, Button, Notice};
use super::send::Sender;

/// The notifier's name in `follower_checkpoints`.
pub const FOLLOWER: &str = "chat";
/// Who the notifier's events are recorded as.
const ACTOR: &str = "awl:chat";
/// Events recorded longer ago than this are not told (a backlog after chat was off).
fn stale() -> chrono::Duration {
    chrono::Duration::hours(24)
}

/// How long a lease lasts without renewal, and how often it is renewed.
const LEASE: Duration = Duration::from_secs(30);
const RENEW: Duration = Duration::from_secs(5);

/// What one event changes in chat.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Tell this (post it, or edit the message to say it).
    Open(Notice),
    /// The notice `key` (of `kind`, `workflow`) ended: edit its messages to say so.
    Close {
        key: String,
        kind: NoticeKind,
        workflow: Option<String>,
        outcome: String,
    },
}

/// Follows the log and delivers.
#[derive(Clone)]
pub struct Notifier {
    store: EventStore,
    sender: Sender,
    clock: Clock,
    /// Workflow definitions, for their own `chat:` routes.
    definitions: Definitions,
}

impl Notifier {
    pub fn new(store: EventStore, sender: Sender, clock: Clock) -> Self {
        Self {
            store,
            sender,
            clock,
            definitions: Definitions::default(),
        }
    }

    /// Follow the log while this process holds the notifier's lease, until `stop`;
    /// then give the lease up. The lease is kept by a task of its own, so a delivery
    /// that waits out a rate limit does not let it lapse.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        // Where a first notifier starts: the head (history is not told).
        let head = loop {
            match self.store.head().await {
                Ok(head) => break head,
                Err(e) => {
                    tracing::warn!(error = %e, "the chat notifier cannot read the log; trying again")
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = stop.changed() => return,
            }
        };
        let lease = FollowerLease::new(FOLLOWER, LEASE, RENEW, self.clock.clone());
        let (mut held, keeper) = lease.spawn(self.store.clone(), head, stop.clone());
        while until_held(&mut held, &mut stop).await {
            if let Err(e) = self.deliver_while_held(&mut held, stop.clone()).await {
                tracing::warn!(error = %e, "the chat notifier stopped; starting again");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = stop.changed() => {}
                }
            }
        }
        // The keeper gives the lease up once it sees `stop`.
        let _ = keeper.await;
    }

    /// Follow the log from the checkpoint while `held` says the lease is held, until
    /// `stop`.
    async fn deliver_while_held(
        &self,
        held: &mut watch::Receiver<bool>,
        mut stop: watch::Receiver<bool>,
    ) -> Result<(), StoreError> {
        let after = self.store.follower_checkpoint(FOLLOWER).await?.unwrap_or(0);
        let filter = EventFilter {
            stream_types: vec![StreamType::Run, StreamType::Task],
            ..EventFilter::default()
        };
        let mut events = Box::pin(self.store.tail(after, filter));
        loop {
            let next = tokio::select! {
                next = events.next() => next,
                changed = held.changed() => {
                    if changed.is_err() || !*held.borrow() {
                        return Ok(());
                    }
                    continue;
                }
                _ = stop.changed() => return Ok(()),
            };
            let Some(event) = next else {
                return Err(StoreError::Unavailable("the log's tail ended".into()));
            };
            let event = event?;
            // A backlog from long ago (chat configured again after months without it)
            // is not told: it would flood the channels with what is long over.
            if (self.clock)() - event.recorded_at > stale() {
                tracing::debug!(event = %event.describe(), "too old to tell chat");
            } else {
                self.handle(&event).await;
            }
            self.store
                .set_follower_checkpoint(FOLLOWER, event.position)
                .await?;
        }
    }

    /// Tell chat what `event` changes (failures are logged and recorded, never
    /// returned: the notifier reads on).
    pub async fn handle(&self, event: &RecordedEvent) {
        let (changes, declared) = match self.changes(event).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(event = %event.describe(), error = %e, "cannot tell chat about an event");
                return;
            }
        };
        for change in changes {
            let (kind, workflow) = match &change {
                Change::Open(n) => (n.kind, n.workflow.clone()),
                Change::Close { kind, workflow, .. } => (*kind, workflow.clone()),
            };
            let channels: Vec<String> = self
                .sender
                .config()
                .channels_for(kind, workflow.as_deref(), &declared)
                .into_iter()
                .map(str::to_string)
                .collect();
            for channel in channels {
                if let Err(e) = self.deliver(&change, &channel).await {
                    tracing::warn!(channel, error = %e, "cannot record a chat delivery");
                }
            }
        }
    }

    /// What `event` changes, read with the state of its run or task, and the chat
    /// routes the run's workflow declares.
    async fn changes(
        &self,
        event: &RecordedEvent,
    ) -> Result<(Vec<Change>, Vec<ChatRoute>), StoreError> {
        match event.stream.kind {
            StreamType::Run if run_matters(&event.event_type) => {
                let (run, _) = domain_io::load::<Run>(&self.store, &event.stream).await?;
                let changes =
                    run_changes(&run, &domain_io::decode::<Run>(event)?, &event.stream.id);
                Ok((changes, self.routes_of(&run).await))
            }
            StreamType::Task if task_matters(&event.event_type) => {
                let (task, _) = domain_io::load::<Task>(&self.store, &event.stream).await?;
                let mut changes =
                    task_changes(&task, &domain_io::decode::<Task>(event)?, &event.stream.id);
                // A task that ends while it asks: its questions' buttons go.
                if matches!(event.event_type.as_str(), "task.cancelled" | "task.failed") {
                    changes.extend(self.open_questions_closed(&task, event).await);
                }
                let routes = match task.run_step() {
                    Some(step) => {
                        let stream = StreamRef::new(StreamType::Run, step.run_id.to_string());
                        let (run, _) = domain_io::load::<Run>(&self.store, &stream).await?;
                        self.routes_of(&run).await
                    }
                    None => Vec::new(),
                };
                Ok((changes, routes))
            }
            _ => Ok((Vec::new(), Vec::new())),
        }
    }

    /// Closes for the question notices of `event`'s task (those already answered, or
    /// never posted, stay as they are: see `deliver`).
    async fn open_questions_closed(&self, task: &Task, event: &RecordedEvent) -> Vec<Change> {
        // Every question the task asked, from its own stream.
        let events = match self.store.read_current(&event.stream).await {
            Ok(events) => events,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read a task's questions");
                return Vec::new();
            }
        };
        let keys: Vec<String> = events
            .iter()
            .filter(|e| e.event_type == "task.question_asked")
            .filter_map(|e| e.payload["question_id"].as_str())
            .map(|q| format!("question:{}:{q}", event.stream.id))
            .collect();
        let outcome = if event.event_type == "task.failed" {
            "❌ The task failed before an answer"
        } else {
            "🚫 The task was cancelled before an answer"
        };
        keys.into_iter()
            .map(|key| Change::Close {
                key,
                kind: NoticeKind::TaskBlocked,
                workflow: task.run_step().and_then(|r| r.workflow.clone()),
                outcome: outcome.to_string(),
            })
            .collect()
    }

    /// The `chat:` routes of `run`'s workflow version.
    async fn routes_of(&self, run: &Run) -> Vec<ChatRoute> {
        let Some(name) = run.workflow() else {
            return Vec::new();
        };
        match self
            .definitions
            .get(&self.store, name.as_str(), run.workflow_version())
            .await
        {
            Ok(workflow) => workflow.chat.clone(),
            Err(e) => {
                tracing::warn!(workflow = %name, error = %e, "cannot read a workflow's chat routes");
                Vec::new()
            }
        }
    }

    /// Make `change` so in `channel`, and record what was done.
    async fn deliver(&self, change: &Change, channel: &str) -> Result<(), StoreError> {
        let key = match change {
            Change::Open(n) => n.key.clone(),
            Change::Close { key, .. } => key.clone(),
        };
        let stream = StreamRef::new(StreamType::Chat, stream_id(&key, channel));
        let (message, version) = domain_io::load::<ChatMessage>(&self.store, &stream).await?;
        let notice = match change {
            Change::Open(n) => n.clone(),
            Change::Close { outcome, .. } => {
                // Only a notice that was posted here is closed here.
                let Some(shown) = message
                    .content
                    .clone()
                    .and_then(|c| serde_json::from_value::<Notice>(c).ok())
                else {
                    return Ok(());
                };
                // A notice closes once: what decided it first stays.
                if shown.outcome.is_some() {
                    return Ok(());
                }
                shown.closed(outcome.clone())
            }
        };
        let digest = notice.digest();
        let content = serde_json::to_value(&notice).unwrap_or_default();
        let at = (self.clock)();
        let command = match message.delivery(&digest) {
            Delivery::Nothing => return Ok(()),
            Delivery::Post => match self.sender.post(channel, &notice).await {
                Ok(posted) => ChatCommand::Post {
                    notice: key,
                    channel: channel.to_string(),
                    message: posted,
                    content,
                    digest,
                    at,
                },
                Err(e) => failure(digest, &e, at),
            },
            Delivery::Update(posted) => match self.sender.update(channel, &posted, &notice).await {
                Ok(()) => ChatCommand::Update {
                    content,
                    digest,
                    at,
                },
                Err(e) => failure(digest, &e, at),
            },
        };
        if let ChatCommand::RecordFailure { reason, .. } = &command {
            tracing::warn!(channel, notice = %notice.key, reason, "a chat delivery failed");
        }
        let result = Command::new(&self.store, &stream, Metadata::actor(ACTOR))
            .cached(Some((message, version)))
            .run(|m: &ChatMessage| m.decide(command.clone()))
            .await;
        match result {
            Ok(_) => Ok(()),
            // Another server delivered the same meanwhile.
            Err(CommandError::Rejected(ChatError::AlreadyPosted | ChatError::Unchanged)) => Ok(()),
            Err(CommandError::Rejected(e)) => {
                tracing::warn!(error = %e, "a chat delivery could not be recorded");
                Ok(())
            }
            Err(CommandError::Store(e)) => Err(e),
            Err(CommandError::Busy(s)) => {
                tracing::warn!(stream = %s, "a chat message's stream kept changing");
                Ok(())
            }
        }
    }
}

fn failure(digest: String, e: &super::send::SendError, at: DateTime<Utc>) -> ChatCommand {
    ChatCommand::RecordFailure {
        digest,
        class: e.class.to_string(),
        reason: e.message.clone(),
        at,
    }
}

fn run_matters(event_type: &str) -> bool {
    matches!(
        event_type,
        "run.gate_opened"
            | "run.gate_approved"
            | "run.gate_rejected"
            | "run.gate_expired"
            | "run.failed"
    )
}

fn task_matters(event_type: &str) -> bool {
    matches!(
        event_type,
        "task.question_asked"
            | "task.question_answered"
            | "task.submitted_for_review"
            | "task.approved"
            | "task.changes_requested"
            | "task.cancelled"
            | "task.failed"
    )
}

/// Text as chat may see it: secrets `[redacted]`, personal data `[personal]`.
fn shown(text: &str) -> String {
    let mut text = text.to_string();
    reveal_string(&mut text, &Keys::new(), Reveal::Hidden);
    text
}

/// What a run event changes in chat. Pure.
pub fn run_changes(run: &Run, event: &RunEvent, run_id: &str) -> Vec<Change> {
    let workflow = run.workflow().map(ToString::to_string);
    let name = workflow.clone().unwrap_or_else(|| "a run".into());
    let close = |gate_id: String, outcome: String| Change::Close {
        key: format!("gate:{gate_id}"),
        kind: NoticeKind::GateWaiting,
        workflow: workflow.clone(),
        outcome,
    };
    match event {
        RunEvent::GateOpened {
            gate_id,
            step_id,
            message,
            approvers,
            expires_at,
            ..
        } => {
            let gate = gate_id.to_string();
            let mut facts = vec![
                ("run".to_string(), run_id.to_string()),
                ("step".to_string(), step_id.to_string()),
            ];
            if !approvers.is_empty() {
                facts.push(("approvers".into(), approvers.join(", ")));
            }
            if let Some(t) = expires_at {
                facts.push(("expires".into(), t.to_rfc3339()));
            }
            vec![Change::Open(Notice {
                key: format!("gate:{gate}"),
                kind: NoticeKind::GateWaiting,
                workflow: workflow.clone(),
                title: format!("{name} waits for a decision"),
                text: shown(message),
                facts,
                buttons: vec![
                    Button {
                        action: Action::ApproveGate(gate.clone()),
                        label: "Approve".into(),
                        style: "primary".into(),
                    },
                    Button {
                        action: Action::RejectGate(gate),
                        label: "Reject".into(),
                        style: "danger".into(),
                    },
                ],
                outcome: None,
            })]
        }
        RunEvent::GateApproved {
            gate_id,
            by,
            comment,
            ..
        } => vec![close(
            gate_id.to_string(),
            match comment {
                Some(c) => format!("✅ Approved by {by}: {}", shown(c)),
                None => format!("✅ Approved by {by}"),
            },
        )],
        RunEvent::GateRejected {
            gate_id,
            by,
            comment,
            ..
        } => vec![close(
            gate_id.to_string(),
            format!("❌ Rejected by {by}: {}", shown(comment)),
        )],
        RunEvent::GateExpired { gate_id, .. } => {
            vec![close(
                gate_id.to_string(),
                "⌛ Expired without a decision".into(),
            )]
        }
        RunEvent::Failed {
            reason,
            error_class,
            ..
        } => {
            let mut facts = vec![("run".to_string(), run_id.to_string())];
            if let Some(c) = error_class {
                facts.push(("class".into(), c.as_str().to_string()));
            }
            vec![Change::Open(Notice {
                key: format!("run:{run_id}:failed"),
                kind: NoticeKind::RunFailed,
                workflow,
                title: format!("{name} failed"),
                text: shown(reason),
                facts,
                buttons: Vec::new(),
                outcome: None,
            })]
        }
        _ => Vec::new(),
    }
}

/// What a task event changes in chat. Pure.
pub fn task_changes(task: &Task, event: &TaskEvent, task_id: &str) -> Vec<Change> {
    let workflow = task.run_step().and_then(|r| r.workflow.clone());
    let prompt = crate::text::clip(&shown(task.prompt()), 300);
    let review = |outcome: String| Change::Close {
        key: format!("review:{task_id}"),
        kind: NoticeKind::ReviewRequested,
        workflow: workflow.clone(),
        outcome,
    };
    match event {
        TaskEvent::QuestionAsked {
            agent_id,
            question_id,
            question,
            ..
        } => vec![Change::Open(Notice {
            key: format!("question:{task_id}:{question_id}"),
            kind: NoticeKind::TaskBlocked,
            workflow: workflow.clone(),
            title: format!("{agent_id} asks"),
            text: shown(question),
            facts: vec![
                ("task".into(), task_id.to_string()),
                ("prompt".into(), prompt),
            ],
            buttons: vec![Button {
                action: Action::Answer(task_id.to_string(), question_id.to_string()),
                label: "Answer".into(),
                style: "primary".into(),
            }],
            outcome: None,
        })],
        TaskEvent::QuestionAnswered {
            question_id,
            answer,
            by,
            ..
        } => vec![Change::Close {
            key: format!("question:{task_id}:{question_id}"),
            kind: NoticeKind::TaskBlocked,
            workflow,
            outcome: format!("💬 Answered by {by}: {}", shown(answer)),
        }],
        TaskEvent::SubmittedForReview {
            agent_id,
            branch,
            commit,
            summary,
            ..
        } => {
            let mut facts = vec![
                ("task".to_string(), task_id.to_string()),
                ("prompt".to_string(), prompt),
            ];
            if let Some(b) = branch {
                facts.push(("branch".into(), b.clone()));
            }
            if let Some(c) = commit {
                facts.push(("commit".into(), c.clone()));
            }
            vec![Change::Open(Notice {
                key: format!("review:{task_id}"),
                kind: NoticeKind::ReviewRequested,
                workflow: workflow.clone(),
                title: format!("{agent_id} submitted work for review"),
                text: shown(summary),
                facts,
                buttons: vec![
                    Button {
                        action: Action::ApproveReview(task_id.to_string()),
                        label: "Approve".into(),
                        style: "primary".into(),
                    },
                    Button {
                        action: Action::RequestChanges(task_id.to_string()),
                        label: "Request changes".into(),
                        style: "danger".into(),
                    },
                ],
                outcome: None,
            })]
        }
        TaskEvent::Approved { by, .. } => vec![review(format!("✅ Approved by {by}"))],
        TaskEvent::ChangesRequested { by, feedback, .. } => {
            vec![review(format!(
                "↩️ Changes requested by {by}: {}",
                shown(feedback)
            ))]
        }
        TaskEvent::Cancelled { .. } => vec![review("🚫 The task was cancelled".into())],
        TaskEvent::Failed { .. } => vec![review("❌ The task failed".into())],
        _ => Vec::new(),
    }
}
