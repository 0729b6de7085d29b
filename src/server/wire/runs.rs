//! Runs and gates on the wire.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::domain::run::{Run, RunOutcome};
use crate::runs::{StartRun, Started};

/// Start a run of a registered workflow.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartRunRequest {
    /// The workflow's name; `name@version` for a given version (default: the latest).
    pub workflow: String,
    #[serde(default)]
    pub inputs: Map<String, Value>,
    /// The run's priority, -1000 to 1000 (default: the workflow's, else 0): higher
    /// runs are claimed first, and take a free concurrency slot first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
}

impl From<StartRunRequest> for StartRun {
    fn from(r: StartRunRequest) -> Self {
        StartRun {
            workflow: r.workflow,
            inputs: r.inputs,
            priority: r.priority,
            scope: None,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GateDecisionRequest {
    /// Required to reject: why.
    #[serde(default)]
    pub comment: Option<String>,
}

/// Pausing or cancelling a run: why (recorded with who).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunActionRequest {
    #[serde(default)]
    pub reason: Option<String>,
}

/// Start a finished run again from one of its top-level steps (the steps before it keep
/// their outputs); with `inputs`, a fork with those inputs changed.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RerunRequest {
    pub from_step: String,
    #[serde(default)]
    pub inputs: Option<serde_json::Map<String, Value>>,
}

/// A run as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RunView {
    pub run_id: Uuid,
    pub workflow: String,
    pub version: String,
    /// RUNNING, WAITING, PAUSED, COMPENSATING, SUCCEEDED, FAILED, CANCELLED.
    pub status: String,
    /// Who paused the run and why, while it is paused.
    #[serde(default)]
    pub paused: Option<PauseView>,
    /// The run this one reruns or forks, and the step it started again at.
    #[serde(default)]
    pub origin: Option<OriginView>,
    /// Reruns and forks made from this run.
    #[serde(default)]
    pub derived: Vec<OriginView>,
    pub steps: BTreeMap<String, StepView>,
    pub open_gates: Vec<GateView>,
    pub cost_usd: f64,
    pub started_at: Option<DateTime<Utc>>,
    pub updated_at: Option<DateTime<Utc>>,
    pub outputs: Option<Value>,
    pub failure: Option<String>,
    pub version_in_log: i64,
}

/// One end of a rerun or fork: the other run, the step, and how.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct OriginView {
    pub run_id: Uuid,
    pub from_step: String,
    /// `rerun` or `fork`.
    pub kind: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct PauseView {
    pub by: String,
    pub reason: String,
    pub at: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct StepView {
    /// scheduled, running, succeeded, failed, skipped.
    pub phase: String,
    pub attempt: u32,
    pub output: Option<Value>,
    /// The run this step was kept from (a rerun's or fork's steps before its start).
    #[serde(default)]
    pub carried_from: Option<Uuid>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct GateView {
    pub gate_id: Uuid,
    pub step_id: String,
    pub message: String,
    pub approvers: Vec<String>,
    pub opened_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
}

/// A run that was started (or, for a repeated idempotent request, found).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct StartedRun {
    pub run_id: Uuid,
    pub workflow: String,
    pub version: String,
}

impl From<&Started> for StartedRun {
    fn from(s: &Started) -> Self {
        StartedRun {
            run_id: s.run_id.as_uuid(),
            workflow: s.workflow.clone(),
            version: s.version.clone(),
        }
    }
}

impl RunView {
    pub fn of(run: &Run, version: i64) -> Self {
        let (outputs, failure) = match run.outcome() {
            Some(RunOutcome::Succeeded { outputs, .. }) => (Some(outputs.clone()), None),
            Some(RunOutcome::Failed { reason, .. }) => (None, Some(reason.clone())),
            Some(RunOutcome::Cancelled { reason, by, .. }) => {
                (None, Some(format!("cancelled by {by}: {reason}")))
            }
            _ => (None, None),
        };
        RunView {
            run_id: run.id().unwrap_or_default().as_uuid(),
            workflow: run.workflow().map(|w| w.to_string()).unwrap_or_default(),
            version: run.workflow_version().to_string(),
            status: run
                .status()
                .map(|s| s.as_str().to_string())
                .unwrap_or_default(),
            origin: run.origin().map(|o| OriginView {
                run_id: o.run_id.as_uuid(),
                from_step: o.from_step.to_string(),
                kind: o.kind.as_str().to_string(),
            }),
            derived: run
                .derived()
                .iter()
                .map(|d| OriginView {
                    run_id: d.run_id.as_uuid(),
                    from_step: d.from_step.to_string(),
                    kind: d.kind.as_str().to_string(),
                })
                .collect(),
            paused: run.paused().map(|p| PauseView {
                by: p.by.clone(),
                reason: p.reason.clone(),
                at: p.at,
            }),
            steps: run
                .steps()
                .iter()
                .map(|(id, s)| {
                    (
                        id.to_string(),
                        StepView {
                            phase: s.phase().as_str().to_string(),
                            attempt: s.attempt(),
                            output: run.succeeded_output(id).cloned(),
                            carried_from: run.carried_from(id).map(|r| r.as_uuid()),
                        },
                    )
                })
                .collect(),
            open_gates: run
                .open_gates()
                .map(|g| GateView {
                    gate_id: g.gate_id.as_uuid(),
                    step_id: g.step_id.to_string(),
                    message: g.message.clone(),
                    approvers: g.approvers.clone(),
                    opened_at: g.opened_at,
                    expires_at: g.expires_at,
                })
                .collect(),
            cost_usd: run.total_cost_usd(),
            started_at: run.started_at(),
            updated_at: run.updated_at(),
            outputs,
            failure,
            version_in_log: version,
        }
    }
}

/// One action over every run a filter selects.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkRequest {
    /// `cancel`, `pause`, `resume`, `retry` (from the step each run stopped at) or
    /// `rerun` (from `from_step`).
    pub action: String,
    /// The top-level step a `rerun` starts each run again at (a rerun only).
    #[serde(default)]
    pub from_step: Option<String>,
    #[serde(default)]
    pub workflow: Option<String>,
    /// Upper-case run statuses; empty: any.
    #[serde(default)]
    pub statuses: Vec<String>,
    #[serde(default)]
    pub since: Option<DateTime<Utc>>,
    #[serde(default)]
    pub until: Option<DateTime<Utc>>,
    /// Inputs that must have these values.
    #[serde(default)]
    pub inputs: serde_json::Map<String, Value>,
    /// Only these runs (picked by hand); empty: any the filter selects.
    #[serde(default)]
    pub run_ids: Vec<Uuid>,
    #[serde(default)]
    pub reason: Option<String>,
    /// Only say how many runs it would touch.
    #[serde(default)]
    pub dry_run: bool,
}

/// A workflow paused or resumed, with the bulk action over its runs (none when a
/// resume found no run the pause held).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct WorkflowControlView {
    pub workflow: String,
    /// Whether the workflow is paused now.
    pub paused: bool,
    pub bulk: Option<BulkView>,
}

/// The registered workflows.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct WorkflowList {
    pub workflows: Vec<WorkflowSummary>,
}

/// One registered workflow: its versions, which new runs start, whether it is paused.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct WorkflowSummary {
    pub workflow: String,
    /// The version a run naming none starts (none when every version is retired).
    pub latest: Option<String>,
    /// Who paused the whole workflow, when and why, while it is paused.
    pub paused: Option<String>,
    /// Oldest first.
    pub versions: Vec<WorkflowVersion>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct WorkflowVersion {
    pub version: String,
    pub registered_by: String,
    pub registered_at: DateTime<Utc>,
    /// Who retired it, when and why.
    pub retired: Option<String>,
}

impl WorkflowList {
    pub fn of(entries: Vec<crate::runs::CatalogEntry>) -> Self {
        Self {
            workflows: entries.into_iter().map(WorkflowSummary::of).collect(),
        }
    }
}

impl WorkflowSummary {
    pub fn of(e: crate::runs::CatalogEntry) -> Self {
        Self {
            workflow: e.workflow,
            latest: e.latest,
            paused: e.paused,
            versions: e
                .versions
                .into_iter()
                .map(|v| WorkflowVersion {
                    version: v.version,
                    registered_by: v.registered_by,
                    registered_at: v.registered_at,
                    retired: v.retired,
                })
                .collect(),
        }
    }
}

/// Retire a version of a workflow (it takes no new runs; its runs finish on it).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetireRequest {
    /// Why (recorded with who).
    pub reason: String,
}

/// Move runs that finished long enough ago out of the hot log into the archive.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ArchiveRequest {
    /// Runs that finished more than this many seconds ago.
    pub older_than_seconds: u64,
    /// Only say how many runs would move.
    #[serde(default)]
    pub dry_run: bool,
}

/// What an archive pass found and moved.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ArchiveView {
    /// Runs that finished before this time were selected.
    pub finished_before: chrono::DateTime<chrono::Utc>,
    /// Finished runs before that time still in the hot log when the pass began
    /// (for a dry run: what a pass would move).
    pub selected: usize,
    /// Runs moved (0 for a dry run; the run holding the log's head waits for the next
    /// pass).
    pub archived: usize,
    /// Finished board tasks of those runs moved with them.
    pub tasks: usize,
    /// Events moved, the runs' and their tasks'.
    pub events: u64,
    /// The hot log's run partitions moved whole (Postgres; their runs are counted
    /// in `archived`).
    pub partitions: Vec<String>,
    pub dry_run: bool,
}

/// A bulk action: what, over how many runs, how far it is.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct BulkView {
    /// Absent for a dry run.
    pub bulk_id: Option<Uuid>,
    pub action: String,
    /// The step a rerun starts from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_step: Option<String>,
    /// SELECTING, RUNNING, COMPLETED; DRY_RUN for a dry run.
    pub status: String,
    pub total: u64,
    pub through: u64,
    pub acted: u64,
    pub skipped: u64,
    /// For a dry run, the first runs it would touch (up to 100).
    #[serde(default)]
    pub runs: Vec<Uuid>,
}

impl BulkView {
    /// What a dry run answers: how many runs it would touch, and the first 100.
    pub fn dry_run(
        action: crate::domain::bulk::BulkAction,
        from_step: Option<String>,
        selected: &[crate::domain::ids::RunId],
    ) -> Self {
        BulkView {
            bulk_id: None,
            action: action.as_str().to_string(),
            from_step,
            status: "DRY_RUN".into(),
            total: selected.len() as u64,
            through: 0,
            acted: 0,
            skipped: 0,
            runs: selected.iter().take(100).map(|r| r.as_uuid()).collect(),
        }
    }

    pub fn of(bulk: &crate::domain::bulk::Bulk) -> Self {
        BulkView {
            bulk_id: bulk.id(),
            action: bulk
                .action()
                .map(|a| a.as_str())
                .unwrap_or_default()
                .to_string(),
            from_step: bulk.from_step().map(str::to_string),
            status: bulk
                .status()
                .map(|s| format!("{s:?}").to_uppercase())
                .unwrap_or_default(),
            total: bulk.total(),
            through: bulk.through(),
            acted: bulk.acted(),
            skipped: bulk.skipped().len() as u64,
            runs: Vec::new(),
        }
    }
}
