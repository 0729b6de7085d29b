//! Runs over the API: start a registered workflow, read a run, decide a gate.
//!
//! The shapes, and the operations as plain async functions that REST handlers and MCP
//! tools both call, so the two interfaces cannot drift apart.

use std::collections::BTreeMap;

use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::auth::Principal;
use crate::domain::ids::{GateId, IdError, RunId};
use crate::domain::run::{Run, RunOutcome};
use crate::executor::control::{self, GateDecision};
use crate::executor::definitions::Registered;
use crate::log::{StreamRef, StreamType};
use crate::store::domain_io;
use crate::workflow::inputs::{self, Given};

use super::AppState;
use super::error::ApiError;

/// Start a run of a registered workflow.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartRunRequest {
    /// The workflow's name; `name@version` for a given version (default: the latest).
    pub workflow: String,
    #[serde(default)]
    pub inputs: Map<String, Value>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GateDecisionRequest {
    /// Required to reject: why.
    #[serde(default)]
    pub comment: Option<String>,
}

/// A run as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RunView {
    pub run_id: Uuid,
    pub workflow: String,
    pub version: String,
    /// RUNNING, WAITING, SUCCEEDED, FAILED, CANCELLED.
    pub status: String,
    pub steps: BTreeMap<String, StepView>,
    pub open_gates: Vec<GateView>,
    pub cost_usd: f64,
    pub started_at: Option<DateTime<Utc>>,
    pub updated_at: Option<DateTime<Utc>>,
    pub outputs: Option<Value>,
    pub failure: Option<String>,
    pub version_in_log: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct StepView {
    /// scheduled, running, succeeded, failed, skipped.
    pub phase: String,
    pub attempt: u32,
    pub output: Option<Value>,
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

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct StartedRun {
    pub run_id: Uuid,
    pub workflow: String,
    pub version: String,
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

// ---- the operations -----------------------------------------------------------------

/// Names a run started with an idempotency key.
const RUN_KEY_NAMESPACE: Uuid = Uuid::from_u128(0x2f6b_8c1d_5e4a_4b9f_a7c3_1d8e_6f2a_0b54);

/// Start a run of a registered workflow for `who`. With an idempotency `key`, the run's
/// id is derived from the caller and the key, and a run already started with them is
/// returned instead of a new one. The flag says whether a run was created.
pub async fn start_run(
    app: &AppState,
    who: &Principal,
    key: Option<&str>,
    req: StartRunRequest,
) -> Result<(StartedRun, bool), ApiError> {
    let (workflow, version) = app
        .definitions
        .resolve(app.board.store(), &req.workflow)
        .await?;
    let name = req
        .workflow
        .split('@')
        .next()
        .unwrap_or(&req.workflow)
        .to_string();
    let inputs =
        inputs::resolve(&workflow.inputs, req.inputs, Given::Json).map_err(|problems| {
            ApiError::invalid(
                problems
                    .iter()
                    .map(|p| p.message.clone())
                    .collect::<Vec<_>>()
                    .join("; "),
            )
        })?;
    let run_id = match key {
        Some(k) => RunId::from_uuid(Uuid::new_v5(
            &RUN_KEY_NAMESPACE,
            format!("{}\n{k}", who.name).as_bytes(),
        )),
        None => RunId::new(),
    };
    let stream = StreamRef::new(StreamType::Run, run_id.to_string());
    // The run this key already started, if any (the same request again).
    let earlier = async || -> Result<Option<StartedRun>, ApiError> {
        let (existing, v) = domain_io::load::<Run>(app.board.store(), &stream).await?;
        if v == 0 {
            return Ok(None);
        }
        let same = existing.workflow().map(|w| w.as_str()) == Some(name.as_str())
            && *existing.inputs() == Value::Object(inputs.clone());
        if !same {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "idempotency_mismatch",
                format!(
                    "Idempotency-Key {:?} was already used for run {run_id} with a different request",
                    key.unwrap_or_default()
                ),
            ));
        }
        Ok(Some(StartedRun {
            run_id: run_id.as_uuid(),
            workflow: name.clone(),
            version: existing.workflow_version().to_string(),
        }))
    };
    if key.is_some()
        && let Some(started) = earlier().await?
    {
        return Ok((started, false));
    }
    let registered = Registered {
        name: name.clone(),
        version: version.clone(),
        content_hash: String::new(),
        workflow,
    };
    let result = control::start_run(
        app.board.store(),
        &registered,
        inputs.clone(),
        run_id,
        &who.name,
        Utc::now(),
    )
    .await;
    if let Err(e) = result {
        // A concurrent request with the same key started it first.
        if key.is_some()
            && let Some(started) = earlier().await?
        {
            return Ok((started, false));
        }
        return Err(e.into());
    }
    let started = StartedRun {
        run_id: run_id.as_uuid(),
        workflow: name,
        version,
    };
    Ok((started, true))
}

/// A run's status; `id` as the caller gave it.
pub async fn run_status(app: &AppState, id: &str) -> Result<RunView, ApiError> {
    let run_id: RunId = id
        .parse()
        .map_err(|e: IdError| ApiError::not_found("run_not_found", e.to_string()))?;
    load_run(app, run_id).await
}

async fn load_run(app: &AppState, run_id: RunId) -> Result<RunView, ApiError> {
    let stream = StreamRef::new(StreamType::Run, run_id.to_string());
    let (run, version) = domain_io::load::<Run>(app.board.store(), &stream).await?;
    if version == 0 {
        return Err(ApiError::not_found(
            "run_not_found",
            format!("no run {run_id}"),
        ));
    }
    Ok(RunView::of(&run, version))
}

/// Approve a gate, or reject it (`approve` false), which needs a comment saying why.
/// Returns the gate's run as it is after the decision.
pub async fn decide_gate(
    app: &AppState,
    who: &Principal,
    id: &str,
    approve: bool,
    comment: Option<String>,
) -> Result<RunView, ApiError> {
    let decision = if approve {
        GateDecision::Approve { comment }
    } else {
        let comment = comment
            .filter(|c| !c.trim().is_empty())
            .ok_or_else(|| ApiError::invalid("rejecting a gate needs a comment saying why"))?;
        GateDecision::Reject { comment }
    };
    let gate: GateId = id
        .parse()
        .map_err(|e: IdError| ApiError::not_found("gate_not_found", e.to_string()))?;
    let run_id =
        control::decide_gate(app.board.store(), gate, decision, &who.name, Utc::now()).await?;
    load_run(app, run_id).await
}
