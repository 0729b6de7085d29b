//! Carrying out one effect through the step runners, and turning the result into
//! what the engine reads back. Each attempt is a span under its run's trace (whichever
//! worker performs it) and a sample of the step-duration metric.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use tracing::Instrument;

use crate::domain::ids::RunId;
use crate::engine::{Done, Failure, Work};
use crate::runners::{
    Attempt, ExternalTools, Runners, StepFailure, StepSuccess, no_external_tools,
};
use crate::telemetry;

/// The tools whose result depends only on their inputs: a worker may run them at once
/// and decide the next step in the same transaction (re-running one after a crash
/// gives the same result).
pub(crate) fn is_pure(work: &Work) -> bool {
    matches!(work, Work::Builtin { tool, .. } if matches!(tool.as_str(), "noop" | "echo" | "fail"))
}

pub(crate) struct Call<'a> {
    pub run_id: RunId,
    pub step_id: &'a str,
    pub attempt: u32,
    /// The idempotency key the work sees (the same for every attempt of a step).
    pub key: &'a str,
    pub timeout_ms: Option<u64>,
    /// The run's trace (from the `traceparent` of its first event).
    pub trace: &'a telemetry::Parent,
    /// The run's secrets, masked in what the attempt's spans record.
    pub mask: &'a crate::vault::Mask,
    /// What performs registry tools ([`Work::External`]), if this worker has one.
    pub tools: Option<&'a dyn ExternalTools>,
    /// The declared tool's cost per call, charged when the attempt reports none.
    pub cost_usd: Option<f64>,
}

/// What kind of work this is, as spans and metrics name it.
fn kind(work: &Work) -> &'static str {
    match work {
        Work::Shell(_) => "shell",
        Work::Http(_) => "http",
        Work::Database(_) => "database",
        Work::Notify(_) => "notify",
        Work::Builtin { .. } | Work::External { .. } => "tool",
    }
}

/// Perform `before` (a credentials hook), then `work`.
pub(crate) async fn perform(
    runners: &Runners,
    call: &Call<'_>,
    work: &Work,
    before: Option<&Work>,
) -> Result<Done, Failure> {
    let kind = kind(work);
    let span = tracing::info_span!(
        "awl.step",
        otel.name = tracing::field::Empty,
        awl.run.id = %call.run_id,
        awl.step.id = call.step_id,
        awl.step.type = kind,
        awl.step.attempt = call.attempt,
        error.type = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    if !span.is_disabled() {
        span.record("otel.name", format!("step {}", call.step_id));
        call.trace.adopt(&span);
    }
    let started = Instant::now();
    let result = attempt(runners, call, work, before)
        .instrument(span.clone())
        .await;
    if let Err(f) = &result {
        span.record("error.type", f.class.as_str());
        span.record("otel.status_code", "ERROR");
    }
    telemetry::step_finished(kind, result.is_ok(), started.elapsed().as_secs_f64());
    result
}

async fn attempt(
    runners: &Runners,
    call: &Call<'_>,
    work: &Work,
    before: Option<&Work>,
) -> Result<Done, Failure> {
    let attempt = Attempt {
        run_id: call.run_id,
        step_id: call.step_id,
        attempt: call.attempt,
        idempotency_key: call.key,
        timeout: call.timeout_ms.map(Duration::from_millis),
        base_dir: Path::new("."),
        mask: call.mask,
    };
    if let Some(hook) = before {
        one(runners, call.tools, &attempt, hook)
            .await
            .map_err(|f| Failure {
                class: f.class,
                message: format!("the refresh_auth hook failed: {}", f.message),
            })?;
    }
    one(runners, call.tools, &attempt, work)
        .await
        .map(|success| done(success, call.cost_usd))
        .map_err(failure)
}

async fn one(
    runners: &Runners,
    tools: Option<&dyn ExternalTools>,
    attempt: &Attempt<'_>,
    work: &Work,
) -> Result<StepSuccess, StepFailure> {
    // Each runner's future boxed: inline, this function's future is as large as the
    // largest runner's (6,688 bytes against 376 boxed, debug build), and a worker
    // moves one into every step it spawns.
    match work {
        Work::Shell(step) => Box::pin(runners.shell(attempt, step)).await,
        Work::Http(step) => Box::pin(runners.http(attempt, step)).await,
        Work::Database(step) => Box::pin(runners.database(attempt, step)).await,
        Work::Notify(step) => Box::pin(runners.notify(attempt, step)).await,
        Work::Builtin { tool, inputs } => {
            Box::pin(runners.builtin_tool(attempt, tool, inputs)).await
        }
        Work::External { tool, inputs } => match tools {
            Some(tools) => tools.call(attempt, tool, inputs).await,
            None => Err(no_external_tools(tool)),
        },
    }
}

/// The attempt's result as the engine reads it. Its cost: what the runner says, else
/// what the output reports, else the declared tool's cost per call.
fn done(success: StepSuccess, declared_cost: Option<f64>) -> Done {
    let (cost_usd, tokens) = reported_cost(&success.output);
    Done {
        cost_usd: success.cost_usd.or(cost_usd).or(declared_cost),
        tokens: success.tokens.or(tokens),
        output: std::sync::Arc::new(success.output),
    }
}

/// What a step says it cost, in its output: `cost_usd` and `tokens` at the top of a
/// JSON result, of a shell step's JSON stdout (`json`), or of an HTTP response's JSON
/// body (`body`). Budgets are charged from these.
pub(crate) fn reported_cost(output: &Value) -> (Option<f64>, Option<u64>) {
    for place in [Some(output), output.get("json"), output.get("body")]
        .into_iter()
        .flatten()
    {
        let usd = place
            .get("cost_usd")
            .and_then(Value::as_f64)
            .filter(|c| c.is_finite() && *c >= 0.0);
        let tokens = place.get("tokens").and_then(Value::as_u64);
        if usd.is_some() || tokens.is_some() {
            return (usd, tokens);
        }
    }
    (None, None)
}

fn failure(failure: StepFailure) -> Failure {
    Failure {
        class: failure.class,
        message: failure.message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A registry that answers every tool with its name and inputs, at a cost.
    struct Answering;

    #[async_trait::async_trait]
    impl ExternalTools for Answering {
        async fn call(
            &self,
            attempt: &Attempt<'_>,
            tool: &str,
            inputs: &serde_json::Map<String, Value>,
        ) -> Result<StepSuccess, StepFailure> {
            Ok(StepSuccess {
                output: json!({"tool": tool, "inputs": inputs, "timeout_ms": attempt.timeout.map(|t| t.as_millis() as u64)}),
                cost_usd: Some(0.25),
                tokens: None,
            })
        }
    }

    #[tokio::test]
    async fn registry_tools_go_to_the_worker_s_registry_and_declared_costs_are_charged() {
        let runners = Runners::new(crate::runners::RunnersConfig::default());
        let trace = telemetry::Parent::default();
        let mask = crate::vault::Mask::default();
        let mut call = Call {
            run_id: RunId::new(),
            step_id: "sum",
            attempt: 1,
            key: "k",
            timeout_ms: Some(1_500),
            trace: &trace,
            mask: &mask,
            tools: None,
            cost_usd: None,
        };
        let work = Work::External {
            tool: "py__add".into(),
            inputs: json!({"a": 1}).as_object().cloned().unwrap_or_default(),
        };
        let without = perform(&runners, &call, &work, None).await.unwrap_err();
        assert_eq!(without.class, crate::domain::run::ErrorClass::Dependency);
        assert!(
            without.message.contains("--tools-dir"),
            "{}",
            without.message
        );

        call.tools = Some(&Answering);
        let done = perform(&runners, &call, &work, None).await.unwrap();
        assert_eq!(
            *done.output,
            json!({"tool": "py__add", "inputs": {"a": 1}, "timeout_ms": 1_500})
        );
        assert_eq!(done.cost_usd, Some(0.25), "the registry's cost");

        // A declared tool's cost per call, when the attempt reports none.
        call.cost_usd = Some(0.5);
        let echo = Work::Builtin {
            tool: "echo".into(),
            inputs: json!({"message": "hi"})
                .as_object()
                .cloned()
                .unwrap_or_default(),
        };
        let done = perform(&runners, &call, &echo, None).await.unwrap();
        assert_eq!(done.cost_usd, Some(0.5));
    }

    #[test]
    fn costs_are_read_where_steps_report_them() {
        assert_eq!(
            reported_cost(&json!({"cost_usd": 0.5, "tokens": 10})),
            (Some(0.5), Some(10))
        );
        assert_eq!(
            reported_cost(&json!({"stdout": "...", "json": {"cost_usd": 0.25}})),
            (Some(0.25), None)
        );
        assert_eq!(
            reported_cost(&json!({"status": 200, "body": {"tokens": 7}})),
            (None, Some(7))
        );
        assert_eq!(
            reported_cost(&json!({"cost_usd": -1.0})),
            (None, None),
            "a negative cost is ignored"
        );
        assert_eq!(reported_cost(&json!("text")), (None, None));
    }
}
