//! Given / when / then tables for the task aggregate.
//!
//! `legal_transitions` and the refusal tables spell out single cases; the
//! `every_command_in_every_state` matrix builds a stream that reaches each state
//! (including "never queued") and checks every command against it, from an allowed-set
//! declared here independently of `decide.rs`.

use chrono::{DateTime, Utc};
use cqrs_es::Aggregate;
use cqrs_es::event_sink::EventSink;
use serde_json::{Value, json};
use uuid::Uuid;

use super::TaskStatus::*;
use super::*;
use crate::domain::ids::{QuestionId, RunId, StepId};
use crate::domain::testing::{Stream, assert_wire_format, case, check, fold, given_when, t, then};

impl Stream for TaskEvent {
    type Of = Task;
    const VARIANTS: usize = 15;

    fn variant(&self) -> usize {
        match self {
            TaskEvent::Queued { .. } => 0,
            TaskEvent::Assigned { .. } => 1,
            TaskEvent::Delivered { .. } => 2,
            TaskEvent::Acknowledged { .. } => 3,
            TaskEvent::Requeued { .. } => 4,
            TaskEvent::ProgressReported { .. } => 5,
            TaskEvent::ToolCallReported { .. } => 6,
            TaskEvent::QuestionAsked { .. } => 7,
            TaskEvent::QuestionAnswered { .. } => 8,
            TaskEvent::SubmittedForReview { .. } => 9,
            TaskEvent::Approved { .. } => 10,
            TaskEvent::ChangesRequested { .. } => 11,
            TaskEvent::Completed { .. } => 12,
            TaskEvent::Failed { .. } => 13,
            TaskEvent::Cancelled { .. } => 14,
        }
    }

    fn time(&self) -> DateTime<Utc> {
        self.at()
    }
}

type Then = crate::domain::testing::Then<TaskEvent>;

// ---- fixtures -------------------------------------------------------------------

/// When the matrix issues its commands: after every event of every path, and after
/// the ack deadline.
const LATE: i64 = 100;
/// The ack deadline set by the path through PENDING_ACK.
const DEADLINE: i64 = 50;

fn task_id() -> TaskId {
    TaskId::from_uuid(Uuid::from_u128(1))
}
fn q1() -> QuestionId {
    QuestionId::from_uuid(Uuid::from_u128(0x11))
}
fn q2() -> QuestionId {
    QuestionId::from_uuid(Uuid::from_u128(0x12))
}
fn a1() -> AgentId {
    AgentId::try_from("agent-1").unwrap()
}
fn a2() -> AgentId {
    AgentId::try_from("agent-2").unwrap()
}
fn run_step() -> RunStepRef {
    RunStepRef {
        run_id: RunId::from_uuid(Uuid::from_u128(0x99)),
        step_id: StepId::try_from("implement").unwrap(),
        attempt: 1,
        workflow: Some("release".into()),
    }
}
fn result() -> Value {
    json!({"pr": 42})
}

// ---- events (one helper per event, named after it) -------------------------------

fn queued(review_required: bool, at: DateTime<Utc>) -> TaskEvent {
    TaskEvent::Queued {
        task_id: task_id(),
        prompt: "add a health endpoint".into(),
        required_capabilities: Capabilities::new(["rust"]),
        workspace: Some(Workspace::repository("org/app")),
        agent_hint: Some(a1()),
        priority: 5,
        review_required,
        run_step: Some(run_step()),
        runner: Default::default(),
        at,
    }
}
fn assigned(agent: AgentId, at: DateTime<Utc>) -> TaskEvent {
    TaskEvent::Assigned {
        agent_id: agent,
        at,
    }
}
fn delivered(agent: AgentId, ack_deadline: DateTime<Utc>, at: DateTime<Utc>) -> TaskEvent {
    TaskEvent::Delivered {
        agent_id: agent,
        ack_deadline,
        at,
    }
}
fn acknowledged(agent: AgentId, at: DateTime<Utc>) -> TaskEvent {
    TaskEvent::Acknowledged {
        agent_id: agent,
        at,
    }
}
fn requeued(reason: RequeueReason, previous: AgentId, at: DateTime<Utc>) -> TaskEvent {
    TaskEvent::Requeued {
        reason,
        previous_agent: Some(previous),
        at,
    }
}
fn progress_reported(agent: AgentId, percent: Option<u8>, at: DateTime<Utc>) -> TaskEvent {
    TaskEvent::ProgressReported {
        agent_id: agent,
        message: "tests pass".into(),
        percent,
        at,
    }
}
fn tool_call_reported(agent: AgentId, at: DateTime<Utc>) -> TaskEvent {
    TaskEvent::ToolCallReported {
        agent_id: agent,
        name: "cargo_test".into(),
        parameters: json!({"package": "awl"}),
        output: None,
        duration_ms: 1200,
        success: true,
        scope: None,
        at,
    }
}
fn question_asked(agent: AgentId, question_id: QuestionId, at: DateTime<Utc>) -> TaskEvent {
    TaskEvent::QuestionAsked {
        agent_id: agent,
        question_id,
        question: "which port?".into(),
        at,
    }
}
fn question_answered(question_id: QuestionId, at: DateTime<Utc>) -> TaskEvent {
    TaskEvent::QuestionAnswered {
        question_id,
        answer: "8080".into(),
        by: "alice".into(),
        at,
    }
}
fn submitted(agent: AgentId, at: DateTime<Utc>) -> TaskEvent {
    TaskEvent::SubmittedForReview {
        agent_id: agent,
        branch: Some("feat/health".into()),
        commit: Some("abc123".into()),
        summary: "added GET /health".into(),
        at,
    }
}
fn approved(at: DateTime<Utc>) -> TaskEvent {
    TaskEvent::Approved {
        by: "bob".into(),
        at,
    }
}
fn changes_requested(feedback: &str, at: DateTime<Utc>) -> TaskEvent {
    TaskEvent::ChangesRequested {
        by: "bob".into(),
        feedback: feedback.into(),
        at,
    }
}
fn completed(by: CompletedBy, at: DateTime<Utc>) -> TaskEvent {
    TaskEvent::Completed {
        by,
        result: result(),
        at,
    }
}
fn failed(at: DateTime<Utc>) -> TaskEvent {
    TaskEvent::Failed {
        by: "awl".into(),
        reason: "agent gave up".into(),
        error_class: Some("dependency".into()),
        at,
    }
}
fn cancelled(at: DateTime<Utc>) -> TaskEvent {
    TaskEvent::Cancelled {
        by: "alice".into(),
        reason: "duplicate".into(),
        at,
    }
}

// ---- commands (one helper per command; each yields the event helper of the same name)

fn queue(review_required: bool, at: DateTime<Utc>) -> TaskCommand {
    queue_with_prompt("add a health endpoint", review_required, at)
}
fn queue_with_prompt(prompt: &str, review_required: bool, at: DateTime<Utc>) -> TaskCommand {
    TaskCommand::Queue {
        task_id: task_id(),
        prompt: prompt.into(),
        required_capabilities: Capabilities::new(["rust"]),
        workspace: Some(Workspace::repository("org/app")),
        agent_hint: Some(a1()),
        priority: 5,
        review_required,
        run_step: Some(run_step()),
        runner: Default::default(),
        at,
    }
}
fn assign(agent: AgentId, at: DateTime<Utc>) -> TaskCommand {
    TaskCommand::Assign { agent, at }
}
fn deliver(agent: AgentId, ack_deadline: DateTime<Utc>, at: DateTime<Utc>) -> TaskCommand {
    TaskCommand::Deliver {
        agent,
        ack_deadline,
        at,
    }
}
fn ack(agent: AgentId, at: DateTime<Utc>) -> TaskCommand {
    TaskCommand::Ack { agent, at }
}
fn requeue(reason: RequeueReason, at: DateTime<Utc>) -> TaskCommand {
    TaskCommand::Requeue { reason, at }
}
fn report_progress(agent: AgentId, percent: Option<u8>, at: DateTime<Utc>) -> TaskCommand {
    TaskCommand::ReportProgress {
        agent,
        message: "tests pass".into(),
        percent,
        at,
    }
}
fn report_tool_call(agent: AgentId, name: &str, at: DateTime<Utc>) -> TaskCommand {
    TaskCommand::ReportToolCall {
        agent,
        name: name.into(),
        parameters: json!({"package": "awl"}),
        output: None,
        duration_ms: 1200,
        success: true,
        scope: None,
        at,
    }
}
fn ask(agent: AgentId, question_id: QuestionId, question: &str, at: DateTime<Utc>) -> TaskCommand {
    TaskCommand::AskQuestion {
        agent,
        question_id,
        question: question.into(),
        at,
    }
}
fn answer(question_id: QuestionId, answer: &str, at: DateTime<Utc>) -> TaskCommand {
    TaskCommand::Answer {
        question_id,
        answer: answer.into(),
        by: "alice".into(),
        at,
    }
}
fn submit(agent: AgentId, at: DateTime<Utc>) -> TaskCommand {
    TaskCommand::SubmitForReview {
        agent,
        branch: Some("feat/health".into()),
        commit: Some("abc123".into()),
        summary: "added GET /health".into(),
        at,
    }
}
fn approve(at: DateTime<Utc>) -> TaskCommand {
    TaskCommand::Approve {
        by: "bob".into(),
        at,
    }
}
fn request_changes(feedback: &str, at: DateTime<Utc>) -> TaskCommand {
    TaskCommand::RequestChanges {
        by: "bob".into(),
        feedback: feedback.into(),
        at,
    }
}
fn complete(by: CompletedBy, at: DateTime<Utc>) -> TaskCommand {
    TaskCommand::Complete {
        by,
        result: result(),
        at,
    }
}
fn fail(at: DateTime<Utc>) -> TaskCommand {
    TaskCommand::Fail {
        by: "awl".into(),
        reason: "agent gave up".into(),
        error_class: Some("dependency".into()),
        at,
    }
}
fn cancel(at: DateTime<Utc>) -> TaskCommand {
    TaskCommand::Cancel {
        by: "alice".into(),
        reason: "duplicate".into(),
        at,
    }
}

fn by_agent(agent: AgentId) -> CompletedBy {
    CompletedBy::Agent(agent)
}
fn by_user() -> CompletedBy {
    CompletedBy::User("bob".into())
}

// ---- paths to every state --------------------------------------------------------

/// Events that bring a task to `status`, with agent-1 as the assignee from ASSIGNED on
/// and question q1 open in BLOCKED.
fn path(status: TaskStatus, review_required: bool) -> Vec<TaskEvent> {
    let mut events = match status {
        Queued => return vec![queued(review_required, t(0))],
        Assigned => path(Queued, review_required),
        PendingAck => path(Assigned, review_required),
        InProgress => path(PendingAck, review_required),
        Blocked | InReview => path(InProgress, review_required),
        Approved => path(InReview, review_required),
        Completed => path(Approved, review_required),
        Failed => path(InProgress, review_required),
        Cancelled => path(Queued, review_required),
    };
    events.push(match status {
        Queued => unreachable!(),
        Assigned => assigned(a1(), t(10)),
        PendingAck => delivered(a1(), t(DEADLINE), t(20)),
        InProgress => acknowledged(a1(), t(30)),
        Blocked => question_asked(a1(), q1(), t(40)),
        InReview => submitted(a1(), t(60)),
        Approved => approved(t(70)),
        Completed => completed(by_user(), t(80)),
        Failed => failed(t(80)),
        Cancelled => cancelled(t(80)),
    });
    events
}

/// How the terminal paths above end.
fn ending_of(status: TaskStatus) -> TaskEnding {
    match status {
        Completed => TaskEnding::Completed {
            by: by_user(),
            at: t(80),
        },
        Failed => TaskEnding::Failed {
            by: "awl".into(),
            reason: "agent gave up".into(),
            error_class: Some("dependency".into()),
            at: t(80),
        },
        Cancelled => TaskEnding::Cancelled {
            by: "alice".into(),
            reason: "duplicate".into(),
            at: t(80),
        },
        other => panic!("{other} is not terminal"),
    }
}

/// `path(status)` followed by `more`.
fn after(status: TaskStatus, more: impl IntoIterator<Item = TaskEvent>) -> Vec<TaskEvent> {
    then(path(status, true), more)
}

// ---- expected errors ---------------------------------------------------------------

fn invalid(status: TaskStatus, action: TaskAction, allowed: &'static [TaskStatus]) -> TaskError {
    TaskError::InvalidTransition {
        task: task_id(),
        status,
        action,
        allowed,
    }
}

fn not_assignee(action: TaskAction, agent: AgentId, assignee: Option<AgentId>) -> TaskError {
    TaskError::NotAssignee {
        task: task_id(),
        action,
        agent,
        assignee,
    }
}

fn empty(action: TaskAction, field: &'static str) -> TaskError {
    TaskError::Empty {
        task: task_id(),
        action,
        field,
    }
}

// ---- legal transitions -------------------------------------------------------------

#[test]
fn legal_transitions() {
    use RequeueReason::*;
    let now = t(LATE);
    let cases = vec![
        case(
            "queue a new task",
            vec![],
            queue(true, now),
            Ok(vec![queued(true, now)]),
        ),
        case(
            "QUEUED -> ASSIGNED",
            path(Queued, true),
            assign(a1(), now),
            Ok(vec![assigned(a1(), now)]),
        ),
        case(
            "ASSIGNED -> PENDING_ACK: deliver to the assignee",
            path(Assigned, true),
            deliver(a1(), t(130), now),
            Ok(vec![delivered(a1(), t(130), now)]),
        ),
        case(
            "PENDING_ACK -> IN_PROGRESS: the assignee acks",
            path(PendingAck, true),
            ack(a1(), t(45)),
            Ok(vec![acknowledged(a1(), t(45))]),
        ),
        case(
            "ASSIGNED -> QUEUED: delivery failed",
            path(Assigned, true),
            requeue(DeliveryFailed, now),
            Ok(vec![requeued(DeliveryFailed, a1(), now)]),
        ),
        case(
            "ASSIGNED -> QUEUED: agent lost",
            path(Assigned, true),
            requeue(AgentLost, now),
            Ok(vec![requeued(AgentLost, a1(), now)]),
        ),
        case(
            "PENDING_ACK -> QUEUED: ack timeout exactly at the deadline",
            path(PendingAck, true),
            requeue(AckTimeout, t(DEADLINE)),
            Ok(vec![requeued(AckTimeout, a1(), t(DEADLINE))]),
        ),
        case(
            "PENDING_ACK -> QUEUED: ack timeout after the deadline",
            path(PendingAck, true),
            requeue(AckTimeout, now),
            Ok(vec![requeued(AckTimeout, a1(), now)]),
        ),
        case(
            "PENDING_ACK -> QUEUED: delivery failed",
            path(PendingAck, true),
            requeue(DeliveryFailed, now),
            Ok(vec![requeued(DeliveryFailed, a1(), now)]),
        ),
        case(
            "PENDING_ACK -> QUEUED: agent lost",
            path(PendingAck, true),
            requeue(AgentLost, now),
            Ok(vec![requeued(AgentLost, a1(), now)]),
        ),
        case(
            "IN_PROGRESS -> QUEUED: agent lost",
            path(InProgress, true),
            requeue(AgentLost, now),
            Ok(vec![requeued(AgentLost, a1(), now)]),
        ),
        case(
            "BLOCKED -> QUEUED: agent lost",
            path(Blocked, true),
            requeue(AgentLost, now),
            Ok(vec![requeued(AgentLost, a1(), now)]),
        ),
        case(
            "IN_PROGRESS: progress without a percentage",
            path(InProgress, true),
            report_progress(a1(), None, now),
            Ok(vec![progress_reported(a1(), None, now)]),
        ),
        case(
            "IN_PROGRESS: progress at 0%",
            path(InProgress, true),
            report_progress(a1(), Some(0), now),
            Ok(vec![progress_reported(a1(), Some(0), now)]),
        ),
        case(
            "IN_PROGRESS: progress at 100%",
            path(InProgress, true),
            report_progress(a1(), Some(100), now),
            Ok(vec![progress_reported(a1(), Some(100), now)]),
        ),
        case(
            "IN_PROGRESS: tool call",
            path(InProgress, true),
            report_tool_call(a1(), "cargo_test", now),
            Ok(vec![tool_call_reported(a1(), now)]),
        ),
        case(
            "BLOCKED: tool call (the agent may keep working while it waits)",
            path(Blocked, true),
            report_tool_call(a1(), "cargo_test", now),
            Ok(vec![tool_call_reported(a1(), now)]),
        ),
        case(
            "IN_PROGRESS -> BLOCKED: ask a question",
            path(InProgress, true),
            ask(a1(), q1(), "which port?", now),
            Ok(vec![question_asked(a1(), q1(), now)]),
        ),
        case(
            "BLOCKED -> IN_PROGRESS: answer the open question",
            path(Blocked, true),
            answer(q1(), "8080", now),
            Ok(vec![question_answered(q1(), now)]),
        ),
        case(
            "IN_PROGRESS -> IN_REVIEW",
            path(InProgress, true),
            submit(a1(), now),
            Ok(vec![submitted(a1(), now)]),
        ),
        case(
            "IN_PROGRESS -> IN_REVIEW even when review is not required",
            path(InProgress, false),
            submit(a1(), now),
            Ok(vec![submitted(a1(), now)]),
        ),
        case(
            "IN_REVIEW -> APPROVED",
            path(InReview, true),
            approve(now),
            Ok(vec![approved(now)]),
        ),
        case(
            "IN_REVIEW -> QUEUED: changes requested",
            path(InReview, true),
            request_changes("add a test", now),
            Ok(vec![changes_requested("add a test", now)]),
        ),
        case(
            "APPROVED -> COMPLETED by a person",
            path(Approved, true),
            complete(by_user(), now),
            Ok(vec![completed(by_user(), now)]),
        ),
        case(
            "APPROVED -> COMPLETED by the assignee",
            path(Approved, true),
            complete(by_agent(a1()), now),
            Ok(vec![completed(by_agent(a1()), now)]),
        ),
        case(
            "IN_PROGRESS -> COMPLETED by the assignee when review is not required",
            path(InProgress, false),
            complete(by_agent(a1()), now),
            Ok(vec![completed(by_agent(a1()), now)]),
        ),
        case(
            "IN_PROGRESS -> COMPLETED by a person when review is not required",
            path(InProgress, false),
            complete(by_user(), now),
            Ok(vec![completed(by_user(), now)]),
        ),
        case(
            "QUEUED -> FAILED",
            path(Queued, true),
            fail(now),
            Ok(vec![failed(now)]),
        ),
        case(
            "BLOCKED -> FAILED",
            path(Blocked, true),
            fail(now),
            Ok(vec![failed(now)]),
        ),
        case(
            "APPROVED -> FAILED",
            path(Approved, true),
            fail(now),
            Ok(vec![failed(now)]),
        ),
        case(
            "QUEUED -> CANCELLED",
            path(Queued, true),
            cancel(now),
            Ok(vec![cancelled(now)]),
        ),
        case(
            "IN_REVIEW -> CANCELLED",
            path(InReview, true),
            cancel(now),
            Ok(vec![cancelled(now)]),
        ),
        case(
            "a requeued task is assigned to another agent",
            after(PendingAck, [requeued(AckTimeout, a1(), t(60))]),
            assign(a2(), now),
            Ok(vec![assigned(a2(), now)]),
        ),
        case(
            "a task sent back with feedback is assigned again",
            after(InReview, [changes_requested("add a test", t(65))]),
            assign(a2(), now),
            Ok(vec![assigned(a2(), now)]),
        ),
        case(
            "the new assignee of a requeued task acks",
            after(
                PendingAck,
                [
                    requeued(AckTimeout, a1(), t(60)),
                    assigned(a2(), t(61)),
                    delivered(a2(), t(200), t(62)),
                ],
            ),
            ack(a2(), now),
            Ok(vec![acknowledged(a2(), now)]),
        ),
        case(
            "a second question after the first was answered",
            after(Blocked, [question_answered(q1(), t(45))]),
            ask(a1(), q2(), "which host?", now),
            Ok(vec![TaskEvent::QuestionAsked {
                agent_id: a1(),
                question_id: q2(),
                question: "which host?".into(),
                at: now,
            }]),
        ),
    ];
    check(cases);
}

// ---- refusals with a specific reason ---------------------------------------------

#[test]
fn refusals_by_actor() {
    let now = t(LATE);
    let cases = vec![
        case(
            "deliver to an agent that is not the assignee",
            path(Assigned, true),
            deliver(a2(), t(130), now),
            Err(not_assignee(TaskAction::Deliver, a2(), Some(a1()))),
        ),
        case(
            "wrong agent acks",
            path(PendingAck, true),
            ack(a2(), t(45)),
            Err(not_assignee(TaskAction::Ack, a2(), Some(a1()))),
        ),
        case(
            "the previous agent acks after its task was requeued and reassigned",
            after(
                PendingAck,
                [
                    requeued(RequeueReason::AckTimeout, a1(), t(60)),
                    assigned(a2(), t(61)),
                    delivered(a2(), t(200), t(62)),
                ],
            ),
            ack(a1(), now),
            Err(not_assignee(TaskAction::Ack, a1(), Some(a2()))),
        ),
        case(
            "wrong agent reports progress",
            path(InProgress, true),
            report_progress(a2(), Some(10), now),
            Err(not_assignee(TaskAction::ReportProgress, a2(), Some(a1()))),
        ),
        case(
            "wrong agent reports a tool call",
            path(Blocked, true),
            report_tool_call(a2(), "cargo_test", now),
            Err(not_assignee(TaskAction::ReportToolCall, a2(), Some(a1()))),
        ),
        case(
            "wrong agent asks a question",
            path(InProgress, true),
            ask(a2(), q2(), "which port?", now),
            Err(not_assignee(TaskAction::AskQuestion, a2(), Some(a1()))),
        ),
        case(
            "wrong agent submits for review",
            path(InProgress, true),
            submit(a2(), now),
            Err(not_assignee(TaskAction::SubmitForReview, a2(), Some(a1()))),
        ),
        case(
            "wrong agent completes an approved task",
            path(Approved, true),
            complete(by_agent(a2()), now),
            Err(not_assignee(TaskAction::Complete, a2(), Some(a1()))),
        ),
        case(
            "wrong agent completes a task that needs no review",
            path(InProgress, false),
            complete(by_agent(a2()), now),
            Err(not_assignee(TaskAction::Complete, a2(), Some(a1()))),
        ),
    ];
    check(cases);
}

#[test]
fn refusals_by_data() {
    let now = t(LATE);
    let cases = vec![
        case(
            "queue with an empty prompt",
            vec![],
            queue_with_prompt("", true, now),
            Err(empty(TaskAction::Queue, "prompt")),
        ),
        case(
            "queue with a whitespace prompt",
            vec![],
            queue_with_prompt(" \n\t ", true, now),
            Err(empty(TaskAction::Queue, "prompt")),
        ),
        case(
            "queue a task that exists",
            path(InProgress, true),
            queue(true, now),
            Err(TaskError::AlreadyQueued {
                task: task_id(),
                status: InProgress,
            }),
        ),
        case(
            "deliver with an ack deadline equal to the delivery time",
            path(Assigned, true),
            deliver(a1(), now, now),
            Err(TaskError::DeadlineNotAfterDelivery {
                task: task_id(),
                ack_deadline: now,
                at: now,
            }),
        ),
        case(
            "deliver with an ack deadline in the past",
            path(Assigned, true),
            deliver(a1(), t(5), now),
            Err(TaskError::DeadlineNotAfterDelivery {
                task: task_id(),
                ack_deadline: t(5),
                at: now,
            }),
        ),
        case(
            "ack timeout before the deadline",
            path(PendingAck, true),
            requeue(RequeueReason::AckTimeout, t(DEADLINE - 1)),
            Err(TaskError::AckNotDue {
                task: task_id(),
                deadline: t(DEADLINE),
                at: t(DEADLINE - 1),
            }),
        ),
        case(
            "progress above 100%",
            path(InProgress, true),
            report_progress(a1(), Some(101), now),
            Err(TaskError::PercentOutOfRange {
                task: task_id(),
                percent: 101,
            }),
        ),
        case(
            "tool call without a name",
            path(InProgress, true),
            report_tool_call(a1(), " ", now),
            Err(empty(TaskAction::ReportToolCall, "tool name")),
        ),
        case(
            "empty question",
            path(InProgress, true),
            ask(a1(), q1(), "", now),
            Err(empty(TaskAction::AskQuestion, "question")),
        ),
        case(
            "answer with the wrong question id",
            path(Blocked, true),
            answer(q2(), "8080", now),
            Err(TaskError::WrongQuestion {
                task: task_id(),
                open: q1(),
                given: q2(),
            }),
        ),
        case(
            "answer an already answered question",
            after(Blocked, [question_answered(q1(), t(45))]),
            answer(q1(), "8080", now),
            Err(invalid(InProgress, TaskAction::Answer, &[Blocked])),
        ),
        case(
            "empty answer",
            path(Blocked, true),
            answer(q1(), "  ", now),
            Err(empty(TaskAction::Answer, "answer")),
        ),
        case(
            "request changes without feedback",
            path(InReview, true),
            request_changes("", now),
            Err(empty(TaskAction::RequestChanges, "feedback")),
        ),
        case(
            "complete from IN_PROGRESS when review is required",
            path(InProgress, true),
            complete(by_agent(a1()), now),
            Err(TaskError::ReviewRequired { task: task_id() }),
        ),
        case(
            "complete from IN_REVIEW when review is not required",
            path(InReview, false),
            complete(by_agent(a1()), now),
            Err(invalid(
                InReview,
                TaskAction::Complete,
                &[InProgress, Approved],
            )),
        ),
    ];
    check(cases);
}

// ---- the matrix: every command in every state --------------------------------------

/// One command, the states it is allowed in (declared here, not taken from decide.rs)
/// and the event it emits there.
struct Row {
    name: &'static str,
    when: TaskCommand,
    allowed: &'static [TaskStatus],
    emits: TaskEvent,
}

const ACTIVE: &[TaskStatus] = &[
    Queued, Assigned, PendingAck, InProgress, Blocked, InReview, Approved,
];

/// Every command, built so that only the state can make it fail: agent-1 (the
/// assignee of every path) acts, q1 (the open question) is answered, and the time is
/// after the ack deadline.
fn rows(review_required: bool) -> Vec<Row> {
    use RequeueReason::*;
    let now = t(LATE);
    vec![
        Row {
            name: "queue",
            when: queue(review_required, now),
            allowed: &[],
            emits: queued(review_required, now),
        },
        Row {
            name: "assign",
            when: assign(a1(), now),
            allowed: &[Queued],
            emits: assigned(a1(), now),
        },
        Row {
            name: "deliver",
            when: deliver(a1(), t(130), now),
            allowed: &[Assigned],
            emits: delivered(a1(), t(130), now),
        },
        Row {
            name: "ack",
            when: ack(a1(), now),
            allowed: &[PendingAck],
            emits: acknowledged(a1(), now),
        },
        Row {
            name: "requeue (ack timeout)",
            when: requeue(AckTimeout, now),
            allowed: &[PendingAck],
            emits: requeued(AckTimeout, a1(), now),
        },
        Row {
            name: "requeue (delivery failed)",
            when: requeue(DeliveryFailed, now),
            allowed: &[Assigned, PendingAck],
            emits: requeued(DeliveryFailed, a1(), now),
        },
        Row {
            name: "requeue (agent lost)",
            when: requeue(AgentLost, now),
            allowed: &[Assigned, PendingAck, InProgress, Blocked],
            emits: requeued(AgentLost, a1(), now),
        },
        Row {
            name: "report progress",
            when: report_progress(a1(), Some(50), now),
            allowed: &[InProgress],
            emits: progress_reported(a1(), Some(50), now),
        },
        Row {
            name: "report a tool call",
            when: report_tool_call(a1(), "cargo_test", now),
            allowed: &[InProgress, Blocked],
            emits: tool_call_reported(a1(), now),
        },
        Row {
            name: "ask a question",
            when: ask(a1(), q2(), "which port?", now),
            allowed: &[InProgress],
            emits: question_asked(a1(), q2(), now),
        },
        Row {
            name: "answer",
            when: answer(q1(), "8080", now),
            allowed: &[Blocked],
            emits: question_answered(q1(), now),
        },
        Row {
            name: "submit for review",
            when: submit(a1(), now),
            allowed: &[InProgress],
            emits: submitted(a1(), now),
        },
        Row {
            name: "approve",
            when: approve(now),
            allowed: &[InReview],
            emits: approved(now),
        },
        Row {
            name: "request changes",
            when: request_changes("add a test", now),
            allowed: &[InReview],
            emits: changes_requested("add a test", now),
        },
        Row {
            name: "complete (by the assignee)",
            when: complete(by_agent(a1()), now),
            allowed: if review_required {
                &[Approved]
            } else {
                &[InProgress, Approved]
            },
            emits: completed(by_agent(a1()), now),
        },
        Row {
            name: "complete (by a person)",
            when: complete(by_user(), now),
            allowed: if review_required {
                &[Approved]
            } else {
                &[InProgress, Approved]
            },
            emits: completed(by_user(), now),
        },
        Row {
            name: "fail",
            when: fail(now),
            allowed: ACTIVE,
            emits: failed(now),
        },
        Row {
            name: "cancel",
            when: cancel(now),
            allowed: ACTIVE,
            emits: cancelled(now),
        },
    ]
}

/// What a row must do in `state` (`None`: never queued).
fn expected(row: &Row, state: Option<TaskStatus>, review_required: bool) -> Then {
    let action = row.when.action();
    let is_queue = matches!(row.when, TaskCommand::Queue { .. });
    let Some(status) = state else {
        return if is_queue {
            Ok(vec![row.emits.clone()])
        } else {
            Err(TaskError::NotQueued { action })
        };
    };
    if status.is_terminal() {
        return Err(TaskError::Finished {
            task: task_id(),
            action,
            ending: ending_of(status),
        });
    }
    if is_queue {
        return Err(TaskError::AlreadyQueued {
            task: task_id(),
            status,
        });
    }
    if row.allowed.contains(&status) {
        return Ok(vec![row.emits.clone()]);
    }
    if action == TaskAction::Complete && status == InProgress && review_required {
        return Err(TaskError::ReviewRequired { task: task_id() });
    }
    Err(invalid(status, action, row.allowed))
}

#[test]
fn every_command_in_every_state() {
    let mut cases = Vec::new();
    for review_required in [true, false] {
        let states = std::iter::once(None).chain(TaskStatus::ALL.into_iter().map(Some));
        for state in states {
            for row in rows(review_required) {
                let given = state.map_or_else(Vec::new, |s| path(s, review_required));
                let name = format!(
                    "{} in {}, review required: {review_required}",
                    row.name,
                    state.map_or("no task".to_string(), |s| s.to_string()),
                );
                let then = expected(&row, state, review_required);
                cases.push((name, given, row.when, then));
            }
        }
    }
    // 18 commands x 11 states x 2 review settings.
    assert_eq!(check(cases), 18 * 11 * 2);
}

/// `awl check` judges recorded task streams with `Task::permits`: it must allow an
/// event exactly where the matrix above allows the command that records it.
#[test]
fn an_event_is_permitted_exactly_where_its_command_is_allowed() {
    let mut checked = 0;
    for review_required in [true, false] {
        let states = std::iter::once(None).chain(TaskStatus::ALL.into_iter().map(Some));
        for state in states {
            let task = state.map_or_else(Task::default, |s| fold(path(s, review_required)));
            for row in rows(review_required) {
                let expected = match state {
                    None => matches!(row.emits, TaskEvent::Queued { .. }),
                    Some(s) => row.allowed.contains(&s),
                };
                assert_eq!(
                    task.permits(&row.emits),
                    expected,
                    "{} in {state:?}, review required: {review_required}",
                    row.name
                );
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 18 * 11 * 2);
}

#[test]
fn the_paths_reach_the_states_they_are_named_after() {
    assert_eq!(Task::default().status(), None);
    for status in TaskStatus::ALL {
        for review_required in [true, false] {
            let task = fold(path(status, review_required));
            assert_eq!(task.status(), Some(status));
            assert_eq!(task.review_required(), review_required);
            if status != Queued && status != Cancelled {
                assert_eq!(task.assignee(), Some(&a1()), "{status}");
            }
            assert_eq!(
                task.ending(),
                status.is_terminal().then(|| ending_of(status)).as_ref()
            );
        }
    }
}

// ---- state kept for views -----------------------------------------------------------

#[test]
fn the_happy_path_keeps_what_views_need() {
    let task = fold(path(Completed, true));
    assert_eq!(task.id(), Some(task_id()));
    assert_eq!(task.status(), Some(Completed));
    assert!(task.is_terminal());
    assert_eq!(task.prompt(), "add a health endpoint");
    assert_eq!(task.required_capabilities(), &Capabilities::new(["rust"]));
    assert_eq!(task.workspace(), Some(&Workspace::repository("org/app")));
    assert_eq!(task.agent_hint(), Some(&a1()));
    assert_eq!(task.priority(), 5);
    assert_eq!(task.run_step(), Some(&run_step()));
    assert_eq!(task.assignee(), Some(&a1()));
    assert_eq!(task.ack_deadline(), None);
    assert_eq!(task.open_question(), None);
    assert_eq!(task.attempts(), 1);
    assert_eq!(task.review_rounds(), 1);
    assert!(task.feedback().is_empty());
    assert_eq!(task.result(), Some(&result()));
    assert_eq!(
        task.submission().map(|s| s.branch.as_deref()),
        Some(Some("feat/health"))
    );
    assert_eq!(task.queued_at(), Some(t(0)));
    assert_eq!(task.updated_at(), Some(t(80)));
}

#[test]
fn delivery_sets_the_deadline_and_ack_clears_it() {
    assert_eq!(
        fold(path(PendingAck, true)).ack_deadline(),
        Some(t(DEADLINE))
    );
    assert_eq!(fold(path(InProgress, true)).ack_deadline(), None);
}

#[test]
fn a_blocked_task_keeps_its_open_question() {
    let task = fold(path(Blocked, true));
    let open = task.open_question().unwrap();
    assert_eq!(open.question_id, q1());
    assert_eq!(open.question, "which port?");
    assert_eq!(open.asked_by, a1());
    assert_eq!(open.asked_at, t(40));
    assert_eq!(
        fold(after(Blocked, [question_answered(q1(), t(45))])).open_question(),
        None
    );
}

#[test]
fn requeue_clears_the_agent_and_counts_attempts() {
    let task = fold(after(
        Blocked,
        [requeued(RequeueReason::AgentLost, a1(), t(60))],
    ));
    assert_eq!(task.status(), Some(Queued));
    assert_eq!(task.assignee(), None);
    assert_eq!(task.ack_deadline(), None);
    assert_eq!(task.open_question(), None);
    assert_eq!(task.attempts(), 1);
    let task = fold(after(
        PendingAck,
        [
            requeued(RequeueReason::AckTimeout, a1(), t(60)),
            assigned(a2(), t(61)),
        ],
    ));
    assert_eq!(task.attempts(), 2);
    assert_eq!(task.assignee(), Some(&a2()));
}

#[test]
fn changes_requested_keep_feedback_and_clear_the_assignee() {
    let first = fold(after(InReview, [changes_requested("add a test", t(65))]));
    assert_eq!(first.status(), Some(Queued));
    assert_eq!(first.assignee(), None);
    assert_eq!(first.review_rounds(), 1);
    assert_eq!(
        first.feedback(),
        &[ReviewFeedback {
            round: 1,
            by: "bob".into(),
            feedback: "add a test".into(),
            at: t(65),
        }]
    );
    // The work handed in stays visible to the next agent.
    assert_eq!(first.submission().map(|s| &s.agent_id), Some(&a1()));

    let second = fold(after(
        InReview,
        [
            changes_requested("add a test", t(65)),
            assigned(a2(), t(70)),
            delivered(a2(), t(200), t(71)),
            acknowledged(a2(), t(72)),
            submitted(a2(), t(80)),
            changes_requested("and a doc comment", t(90)),
        ],
    ));
    assert_eq!(second.attempts(), 2);
    assert_eq!(second.review_rounds(), 2);
    let rounds: Vec<(u32, &str)> = second
        .feedback()
        .iter()
        .map(|f| (f.round, f.feedback.as_str()))
        .collect();
    assert_eq!(rounds, vec![(1, "add a test"), (2, "and a doc comment")]);
}

#[test]
fn counters_saturate_instead_of_failing_apply() {
    // apply never fails, not even on an overflow (which panics in debug builds).
    let mut state = serde_json::to_value(fold(path(InProgress, true))).unwrap();
    state["attempts"] = json!(u32::MAX);
    state["review_rounds"] = json!(u32::MAX);
    let mut task: Task = serde_json::from_value(state).unwrap();
    task.apply(submitted(a1(), t(60)));
    task.apply(changes_requested("add a test", t(65)));
    task.apply(assigned(a2(), t(70)));
    assert_eq!(task.attempts(), u32::MAX);
    assert_eq!(task.review_rounds(), u32::MAX);
    assert_eq!(task.feedback()[0].round, u32::MAX);
}

#[test]
fn failed_and_cancelled_tasks_say_how_they_ended() {
    let task = fold(after(Blocked, [cancelled(t(90))]));
    assert_eq!(task.status(), Some(Cancelled));
    assert_eq!(task.open_question(), None);
    assert_eq!(task.ending().map(TaskEnding::status), Some(Cancelled));
    for status in [Completed, Failed, Cancelled] {
        assert_eq!(ending_of(status).status(), status);
    }
}

// ---- status helpers ----------------------------------------------------------------

#[test]
fn status_helpers() {
    let all = TaskStatus::ALL;
    let distinct: std::collections::HashSet<_> = all.iter().collect();
    assert_eq!(distinct.len(), 10);
    let active: Vec<TaskStatus> = all.into_iter().filter(|s| s.is_active()).collect();
    assert_eq!(active, TaskStatus::ACTIVE.to_vec());
    assert_eq!(active, ACTIVE.to_vec());
    for status in all {
        assert_eq!(status.is_active(), !status.is_terminal(), "{status}");
        assert_eq!(
            serde_json::to_value(status).unwrap(),
            json!(status.as_str()),
            "{status}"
        );
        assert_eq!(
            serde_json::from_value::<TaskStatus>(json!(status.to_string())).unwrap(),
            status
        );
    }
    assert_eq!(PendingAck.to_string(), "PENDING_ACK");
    assert!(!fold(path(Approved, true)).is_terminal());
    assert!(!Task::default().is_terminal());
}

// ---- messages ----------------------------------------------------------------------

#[test]
fn errors_say_what_and_why() {
    let id = task_id();
    let message = |given: Vec<TaskEvent>, when: TaskCommand| {
        given_when::<Task>(given, when).unwrap_err().to_string()
    };
    assert_eq!(
        message(path(InReview, true), ack(a1(), t(LATE))),
        format!("task {id} is IN_REVIEW: cannot ack (ack is only allowed in PENDING_ACK)")
    );
    assert_eq!(
        message(
            path(InReview, true),
            requeue(RequeueReason::AgentLost, t(LATE))
        ),
        format!(
            "task {id} is IN_REVIEW: cannot requeue (agent lost) (requeue (agent lost) is only \
             allowed in ASSIGNED, PENDING_ACK, IN_PROGRESS or BLOCKED)"
        )
    );
    assert_eq!(
        message(path(Cancelled, true), ack(a1(), t(LATE))),
        format!(
            "task {id} is finished (CANCELLED by alice: duplicate): cannot ack, a finished task \
             never changes"
        )
    );
    assert_eq!(
        message(path(Failed, true), cancel(t(LATE))),
        format!(
            "task {id} is finished (FAILED (dependency) by awl: agent gave up): cannot cancel, a \
             finished task never changes"
        )
    );
    assert_eq!(
        message(vec![], ack(a1(), t(LATE))),
        "the task does not exist: cannot ack (a task must be queued first)"
    );
    assert_eq!(
        message(path(PendingAck, true), ack(a2(), t(LATE))),
        format!("task {id} is assigned to agent-1, not to agent-2: only the assignee may ack")
    );
    assert_eq!(
        message(
            path(PendingAck, true),
            requeue(RequeueReason::AckTimeout, t(DEADLINE - 1))
        ),
        format!(
            "task {id}: cannot requeue for an ack timeout at 2025-01-01 12:00:49 UTC, the agent \
             may ack until 2025-01-01 12:00:50 UTC"
        )
    );
    assert_eq!(
        message(vec![], queue_with_prompt(" ", true, t(0))),
        format!("task {id}: cannot queue with an empty prompt")
    );
}

// ---- the wire format ---------------------------------------------------------------

/// One instance of every event variant.
fn every_event() -> Vec<TaskEvent> {
    vec![
        queued(true, t(0)),
        TaskEvent::Queued {
            task_id: task_id(),
            prompt: "p".into(),
            required_capabilities: Capabilities::default(),
            workspace: None,
            agent_hint: None,
            priority: -1,
            review_required: false,
            run_step: None,
            runner: Default::default(),
            at: t(0),
        },
        assigned(a1(), t(1)),
        delivered(a1(), t(31), t(2)),
        acknowledged(a1(), t(3)),
        requeued(RequeueReason::AckTimeout, a1(), t(4)),
        TaskEvent::Requeued {
            reason: RequeueReason::AgentLost,
            previous_agent: None,
            at: t(4),
        },
        progress_reported(a1(), Some(40), t(5)),
        tool_call_reported(a1(), t(6)),
        question_asked(a1(), q1(), t(7)),
        question_answered(q1(), t(8)),
        submitted(a1(), t(9)),
        approved(t(10)),
        changes_requested("more tests", t(11)),
        completed(by_agent(a1()), t(12)),
        completed(by_user(), t(12)),
        failed(t(13)),
        cancelled(t(14)),
    ]
}

#[test]
fn every_event_is_tagged_with_its_type_and_round_trips() {
    assert_wire_format(every_event(), |_| "1");
}

#[test]
fn a_queued_payload_reads_as_documented() {
    let value = serde_json::to_value(queued(true, t(0))).unwrap();
    assert_eq!(
        value,
        json!({"task.queued": {
            "task_id": task_id().to_string(),
            "prompt": "add a health endpoint",
            "required_capabilities": ["rust"],
            "workspace": {"repository": "org/app"},
            "agent_hint": "agent-1",
            "priority": 5,
            "review_required": true,
            "run_step": {"run_id": run_step().run_id.to_string(), "step_id": "implement", "attempt": 1, "workflow": "release"},
            "at": "2025-01-01T12:00:00Z",
        }})
    );
    // A task queued before the workflow was recorded reads as it did.
    let mut older = value.clone();
    older["task.queued"]["run_step"]
        .as_object_mut()
        .unwrap()
        .remove("workflow");
    let read: TaskEvent = serde_json::from_value(older).unwrap();
    let TaskEvent::Queued { run_step, .. } = read else {
        panic!("a queued event");
    };
    assert_eq!(run_step.unwrap().workflow, None);
    let value = serde_json::to_value(completed(by_agent(a1()), t(0))).unwrap();
    assert_eq!(value["task.completed"]["by"], json!({"agent": "agent-1"}));
    let value = serde_json::to_value(requeued(RequeueReason::AckTimeout, a1(), t(0))).unwrap();
    assert_eq!(value["task.requeued"]["reason"], json!("ack_timeout"));
}

#[test]
fn the_state_round_trips_through_serde() {
    for status in TaskStatus::ALL {
        let task = fold(path(status, true));
        let json = serde_json::to_value(&task).unwrap();
        assert_eq!(
            serde_json::from_value::<Task>(json).unwrap(),
            task,
            "{status}"
        );
    }
}

#[tokio::test]
async fn cqrs_es_drives_decide_through_handle() {
    let mut task = Task::default();
    let sink = EventSink::default();
    task.handle(queue(true, t(0)), &(), &sink).await.unwrap();
    task.handle(assign(a1(), t(1)), &(), &sink).await.unwrap();
    let refused = task.handle(ack(a1(), t(2)), &(), &sink).await;
    assert_eq!(
        refused,
        Err(invalid(Assigned, TaskAction::Ack, &[PendingAck]))
    );
    assert_eq!(task.status(), Some(Assigned));
    assert_eq!(
        sink.collect().await,
        vec![queued(true, t(0)), assigned(a1(), t(1))]
    );
    assert_eq!(Task::TYPE, "task");
}

/// Read models tell finished tasks by these types alone: exactly the events that end a
/// task carry them.
#[test]
fn finished_event_types_are_the_events_that_end_a_task() {
    use cqrs_es::DomainEvent;
    let mut seen = Vec::new();
    for event in every_event() {
        let ends = matches!(
            event,
            TaskEvent::Completed { .. } | TaskEvent::Failed { .. } | TaskEvent::Cancelled { .. }
        );
        let kind = event.event_type();
        assert_eq!(
            FINISHED_EVENT_TYPES.contains(&kind.as_str()),
            ends,
            "{kind}"
        );
        if ends {
            seen.push(kind);
        }
    }
    for kind in FINISHED_EVENT_TYPES {
        assert!(
            seen.iter().any(|s| s == kind),
            "{kind} is not an event type"
        );
    }
}
