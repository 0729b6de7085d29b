//! Carrying out one effect through the step runners, and turning the result into
//! what the engine reads back.

use std::path::Path;
use std::time::Duration;

use crate::domain::ids::RunId;
use crate::engine::{Done, Failure, Work};
use crate::runners::{Attempt, Runners, StepFailure, StepSuccess};

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
}

/// Perform `before` (a credentials hook), then `work`.
pub(crate) async fn perform(
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
    };
    if let Some(hook) = before {
        one(runners, &attempt, hook).await.map_err(|f| Failure {
            class: f.class,
            message: format!("the refresh_auth hook failed: {}", f.message),
        })?;
    }
    one(runners, &attempt, work).await
}

async fn one(runners: &Runners, attempt: &Attempt<'_>, work: &Work) -> Result<Done, Failure> {
    let result = match work {
        Work::Shell(step) => runners.shell(attempt, step).await,
        Work::Http(step) => runners.http(attempt, step).await,
        Work::Database(step) => runners.database(attempt, step).await,
        Work::Notify(step) => runners.notify(attempt, step).await,
        Work::Builtin { tool, inputs } => runners.builtin_tool(attempt, tool, inputs).await,
    };
    result.map(done).map_err(failure)
}

fn done(success: StepSuccess) -> Done {
    Done {
        output: success.output,
        cost_usd: success.cost_usd,
        tokens: success.tokens,
    }
}

fn failure(failure: StepFailure) -> Failure {
    Failure {
        class: failure.class,
        message: failure.message,
    }
}
