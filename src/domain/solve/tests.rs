//! Given / when / then tables for a solve: the loop's order, what a restart does next,
//! timings and spending, and the wire format.

use chrono::{DateTime, Utc};
use serde_json::json;

use super::*;
use crate::domain::testing::{Stream, assert_wire_format, case, check, fold, t};

impl Stream for SolveEvent {
    type Of = Solve;
    const VARIANTS: usize = 5;

    fn variant(&self) -> usize {
        match self {
            SolveEvent::Started { .. } => 0,
            SolveEvent::ModelReplied { .. } => 1,
            SolveEvent::ToolFinished { .. } => 2,
            SolveEvent::Finished { .. } => 3,
            SolveEvent::Failed { .. } => 4,
        }
    }

    fn time(&self) -> DateTime<Utc> {
        self.at()
    }
}

// ---- fixtures -------------------------------------------------------------------

fn setup(max_iterations: u32, budget_usd: Option<f64>) -> Setup {
    Setup {
        agent: "researcher".into(),
        model: "small".into(),
        system_prompt: Some("Be brief.".into()),
        tools: vec!["echo".into(), "word_count".into()],
        max_iterations,
        budget_usd,
    }
}

fn started(max_iterations: u32) -> SolveEvent {
    SolveEvent::Started {
        setup: setup(max_iterations, Some(0.10)),
        prompt: "How many words?".into(),
        origin: Origin::default(),
        by: "user:ada".into(),
        at: t(0),
    }
}

fn call(id: &str, tool: &str) -> PlannedCall {
    PlannedCall {
        id: id.into(),
        tool: tool.into(),
        arguments: r#"{"text":"a b c"}"#.into(),
    }
}

fn reply(
    iteration: u32,
    phase: Phase,
    calls: Vec<PlannedCall>,
    content: Option<&str>,
) -> ModelReply {
    ModelReply {
        iteration,
        phase,
        model: "small-v1".into(),
        content: content.map(str::to_string),
        tool_calls: calls,
        tokens_in: 100,
        tokens_out: 20,
        cost_usd: 0.01,
        latency_ms: 300,
        attempts: 1,
    }
}

fn replied(iteration: u32, calls: Vec<PlannedCall>, content: Option<&str>, s: i64) -> SolveEvent {
    let phase = if iteration <= 2 {
        Phase::Plan
    } else {
        Phase::Solve
    };
    SolveEvent::ModelReplied {
        reply: reply(iteration, phase, calls, content),
        at: t(s),
    }
}

fn result(iteration: u32, id: &str, tool: &str, ms: u64) -> ToolResult {
    ToolResult {
        iteration,
        call_id: id.into(),
        tool: tool.into(),
        outcome: ToolOutcome::Output(json!({"words": 3})),
        duration_ms: ms,
        cost_usd: 0.001,
    }
}

fn finished_tool(iteration: u32, id: &str, tool: &str, ms: u64, s: i64) -> SolveEvent {
    SolveEvent::ToolFinished {
        result: result(iteration, id, tool, ms),
        at: t(s),
    }
}

// ---- what comes next ------------------------------------------------------------

#[test]
fn the_loop_plans_executes_and_solves_in_order() {
    let mut events = vec![started(2)];
    assert_eq!(
        fold(events.clone()).next(),
        Next::CallModel {
            iteration: 1,
            phase: Phase::Plan
        }
    );
    events.push(replied(
        1,
        vec![call("c1", "word_count"), call("c2", "echo")],
        None,
        1,
    ));
    assert_eq!(
        fold(events.clone()).next(),
        Next::RunTools {
            iteration: 1,
            calls: vec![call("c1", "word_count"), call("c2", "echo")]
        }
    );
    // A restart after one of the two calls was recorded runs only the other.
    events.push(finished_tool(1, "c2", "echo", 40, 2));
    assert_eq!(
        fold(events.clone()).next(),
        Next::RunTools {
            iteration: 1,
            calls: vec![call("c1", "word_count")]
        }
    );
    events.push(finished_tool(1, "c1", "word_count", 70, 2));
    assert_eq!(
        fold(events.clone()).next(),
        Next::CallModel {
            iteration: 2,
            phase: Phase::Plan
        }
    );
    events.push(replied(2, vec![call("c3", "echo")], None, 3));
    events.push(finished_tool(2, "c3", "echo", 10, 3));
    assert_eq!(
        fold(events.clone()).next(),
        Next::CallModel {
            iteration: 3,
            phase: Phase::Solve
        },
        "past the limit the tools are withheld"
    );
    events.push(replied(3, vec![], Some("Three words."), 4));
    let solve = fold(events.clone());
    assert_eq!(solve.next(), Next::Finish);
    let finished = solve.decide(SolveCommand::Finish { at: t(5) }).unwrap();
    assert_eq!(
        finished,
        vec![SolveEvent::Finished {
            message: "Three words.".into(),
            timings: Timings {
                plan_ms: 600,
                execute_ms: 80,
                solve_ms: 300,
                total_ms: 5_000
            },
            tokens_in: 300,
            tokens_out: 60,
            cost_usd: solve.spent_usd(),
            at: t(5),
        }]
    );
    assert!((solve.spent_usd() - 0.033).abs() < 1e-9);
    assert_eq!(solve.tools_used(), vec!["echo", "word_count"]);
    events.extend(finished);
    let done = fold(events);
    assert_eq!(done.next(), Next::Done);
    assert_eq!(done.status, Status::Finished);
    assert_eq!(done.message.as_deref(), Some("Three words."));
}

#[test]
fn a_model_that_answers_at_once_finishes_with_no_plan_time() {
    let solve = fold(vec![started(2), replied(1, vec![], Some("Hi."), 1)]);
    assert_eq!(solve.next(), Next::Finish);
    assert_eq!(
        solve.timings_at(t(2)),
        Timings {
            plan_ms: 0,
            execute_ms: 0,
            solve_ms: 300,
            total_ms: 2_000
        }
    );
}

#[test]
fn a_model_that_asks_for_tools_when_told_to_answer_gives_up() {
    let solve = fold(vec![
        started(1),
        replied(1, vec![call("c1", "echo")], None, 1),
        finished_tool(1, "c1", "echo", 5, 1),
        SolveEvent::ModelReplied {
            reply: reply(2, Phase::Solve, vec![call("c2", "echo")], None),
            at: t(2),
        },
    ]);
    assert!(
        matches!(solve.next(), Next::GiveUp { reason } if reason.contains("after 1 iterations"))
    );
}

#[test]
fn no_iterations_means_one_solve_phase() {
    let solve = fold(vec![SolveEvent::Started {
        setup: setup(0, None),
        prompt: "x".into(),
        origin: Origin::default(),
        by: "u".into(),
        at: t(0),
    }]);
    assert_eq!(
        solve.next(),
        Next::CallModel {
            iteration: 1,
            phase: Phase::Solve
        }
    );
    assert_eq!(solve.remaining_usd(), None, "no budget, no limit");
}

#[test]
fn the_remaining_budget_counts_every_recorded_call() {
    let solve = fold(vec![
        started(2),
        replied(1, vec![call("c1", "echo")], None, 1),
        finished_tool(1, "c1", "echo", 5, 1),
    ]);
    let left = solve.remaining_usd().unwrap();
    assert!((left - (0.10 - 0.011)).abs() < 1e-9, "{left}");
}

// ---- what is refused ------------------------------------------------------------

#[test]
fn commands_out_of_turn_are_refused() {
    let planning = vec![started(2), replied(1, vec![call("c1", "echo")], None, 1)];
    let cases = vec![
        case(
            "start twice",
            vec![started(2)],
            SolveCommand::Start {
                setup: setup(2, None),
                prompt: "again".into(),
                origin: Origin::default(),
                by: "u".into(),
                at: t(1),
            },
            Err(SolveError::AlreadyStarted),
        ),
        case(
            "no model",
            vec![],
            SolveCommand::Start {
                setup: Setup {
                    model: " ".into(),
                    ..setup(2, None)
                },
                prompt: "x".into(),
                origin: Origin::default(),
                by: "u".into(),
                at: t(0),
            },
            Err(SolveError::NoModel),
        ),
        case(
            "a negative budget",
            vec![],
            SolveCommand::Start {
                setup: setup(2, Some(-1.0)),
                prompt: "x".into(),
                origin: Origin::default(),
                by: "u".into(),
                at: t(0),
            },
            Err(SolveError::BadBudget(-1.0)),
        ),
        case(
            "a reply before the start",
            vec![],
            SolveCommand::RecordReply {
                reply: reply(1, Phase::Plan, vec![], Some("x")),
                at: t(1),
            },
            Err(SolveError::NotStarted),
        ),
        case(
            "a reply while calls are outstanding (a second model call)",
            planning.clone(),
            SolveCommand::RecordReply {
                reply: reply(2, Phase::Plan, vec![], Some("x")),
                at: t(2),
            },
            Err(SolveError::OutOfTurn {
                expected: "the results of iteration 1's calls (c1)".into(),
                got: "a model reply of iteration 2 (plan)".into(),
            }),
        ),
        case(
            "the same reply recorded twice",
            vec![started(2)],
            SolveCommand::RecordReply {
                reply: reply(2, Phase::Plan, vec![], Some("x")),
                at: t(2),
            },
            Err(SolveError::OutOfTurn {
                expected: "a model reply of iteration 1 (plan)".into(),
                got: "a model reply of iteration 2 (plan)".into(),
            }),
        ),
        case(
            "a call the model did not ask for",
            planning.clone(),
            SolveCommand::RecordTool {
                result: result(1, "c9", "echo", 1),
                at: t(2),
            },
            Err(SolveError::UnknownCall("c9".into())),
        ),
        case(
            "a call recorded twice",
            then(planning.clone(), [finished_tool(1, "c1", "echo", 1, 2)]),
            SolveCommand::RecordTool {
                result: result(1, "c1", "echo", 1),
                at: t(2),
            },
            Err(SolveError::AlreadyRecorded("c1".into())),
        ),
        case(
            "an answer while calls are outstanding",
            planning.clone(),
            SolveCommand::Finish { at: t(2) },
            Err(SolveError::OutOfTurn {
                expected: "the results of iteration 1's calls (c1)".into(),
                got: "the answer".into(),
            }),
        ),
        case(
            "anything after the end",
            then(
                planning,
                [SolveEvent::Failed {
                    class: ErrorClass::Budget,
                    reason: "spent".into(),
                    at: t(2),
                }],
            ),
            SolveCommand::Fail {
                class: ErrorClass::Unknown,
                reason: "again".into(),
                at: t(3),
            },
            Err(SolveError::Ended("failed")),
        ),
    ];
    check(cases);
}

fn then(
    mut events: Vec<SolveEvent>,
    more: impl IntoIterator<Item = SolveEvent>,
) -> Vec<SolveEvent> {
    events.extend(more);
    events
}

// ---- the wire format ------------------------------------------------------------

fn every_event() -> Vec<SolveEvent> {
    vec![
        started(2),
        replied(1, vec![call("c1", "echo")], None, 1),
        finished_tool(1, "c1", "echo", 5, 2),
        SolveEvent::ToolFinished {
            result: ToolResult {
                outcome: ToolOutcome::Error(StepError {
                    class: ErrorClass::Validation,
                    message: "arguments are not JSON".into(),
                }),
                ..result(1, "c2", "echo", 1)
            },
            at: t(2),
        },
        SolveEvent::Finished {
            message: "done".into(),
            timings: Timings::default(),
            tokens_in: 1,
            tokens_out: 2,
            cost_usd: 0.5,
            at: t(3),
        },
        SolveEvent::Failed {
            class: ErrorClass::Budget,
            reason: "the next call could cost more than the 0.01 USD left".into(),
            at: t(3),
        },
    ]
}

#[test]
fn every_event_keeps_its_wire_format() {
    assert_wire_format(every_event(), |_| "1");
}

#[test]
fn a_tool_result_reads_as_documented() {
    let event = finished_tool(1, "c1", "echo", 5, 2);
    assert_eq!(
        serde_json::to_value(&event).unwrap(),
        json!({"solve.tool_finished": {
            "iteration": 1, "call_id": "c1", "tool": "echo",
            "output": {"words": 3}, "duration_ms": 5, "cost_usd": 0.001,
            "at": "2025-01-01T12:00:02Z"}})
    );
}
