//! Proposals: every workflow the learner proposed and how a person decided it
//! (`proposals`, the "Learned" inbox), and each workflow's latest version with its tool
//! sequence, source and scope (`workflow_tools`), which suggestions match against:
//! user-submitted workflows first, then learned ones of the caller's scope or shared.

use async_trait::async_trait;
use serde_json::Value;

use crate::domain::learning::tools_of;
use crate::domain::workflow::{Version, VersionSource, WorkflowEvent};
use crate::log::{RecordedEvent, StreamType};
use crate::store::domain_io;
use crate::store::rows::Param;

use super::{Projection, ProjectionError, Writer, micros};

pub struct Proposals;

#[async_trait]
impl Projection for Proposals {
    fn name(&self) -> &'static str {
        "proposals"
    }
    fn version(&self) -> i32 {
        // 2: a conditional's branches count in a workflow's tool sequence.
        2
    }
    fn ddl(&self) -> &'static str {
        include_str!("../../projections/proposals.sql")
    }
    fn tables(&self) -> &'static [&'static str] {
        &["proposals", "workflow_tools"]
    }
    fn stream_types(&self) -> Vec<StreamType> {
        vec![StreamType::Workflow]
    }

    async fn apply(
        &self,
        w: &mut Writer<'_>,
        events: &[RecordedEvent],
    ) -> Result<(), ProjectionError> {
        for e in events
            .iter()
            .filter(|e| e.stream.kind == StreamType::Workflow)
        {
            let event = domain_io::decode::<crate::domain::workflow::WorkflowDefinition>(e)?;
            apply_one(w, &e.stream.id, event).await?;
        }
        Ok(())
    }
}

fn json(v: &impl serde::Serialize) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".into())
}

async fn apply_one(
    w: &mut Writer<'_>,
    workflow: &str,
    event: WorkflowEvent,
) -> Result<(), ProjectionError> {
    match event {
        WorkflowEvent::Proposed {
            proposal_id,
            definition,
            confidence,
            evidence,
            scope,
            at,
            ..
        } => {
            let row = vec![
                Param::from(proposal_id.to_string()),
                Param::from(workflow),
                Param::from(scope.unwrap_or_default()),
                Param::from("OPEN"),
                Param::from(confidence),
                Param::from(i64::from(evidence.successes)),
                Param::from(i64::from(evidence.executions)),
                Param::from(json(&evidence.tool_sequence)),
                Param::from(json(&evidence)),
                Param::from(json(&definition)),
                Param::from(evidence.mean_ms.and_then(|m| i64::try_from(m).ok())),
                Param::from(micros(at)),
                Param::from(0i64),
            ];
            w.upsert(
                "{proposals}",
                &[
                    "proposal_id",
                    "workflow",
                    "scope",
                    "status",
                    "confidence",
                    "successes",
                    "executions",
                    "tools",
                    "evidence",
                    "definition",
                    "mean_ms",
                    "proposed_at",
                    "shared",
                ],
                &["proposal_id"],
                vec![row],
            )
            .await
        }
        WorkflowEvent::ProposalSuperseded {
            proposal_id,
            superseded_by,
            at,
        } => {
            decide(
                w,
                &proposal_id.to_string(),
                "SUPERSEDED",
                None,
                Some(format!("superseded by {superseded_by}")),
                at,
            )
            .await
        }
        WorkflowEvent::ProposalRejected {
            proposal_id,
            by,
            reason,
            at,
        } => {
            decide(
                w,
                &proposal_id.to_string(),
                "REJECTED",
                Some(by),
                Some(reason),
                at,
            )
            .await
        }
        WorkflowEvent::ProposalApproved {
            proposal_id,
            version,
            shared,
            by,
            at,
        } => {
            let id = proposal_id.to_string();
            decide(w, &id, "APPROVED", Some(by), None, at).await?;
            w.execute(
                "UPDATE {proposals} SET version = ?, shared = ? WHERE proposal_id = ?",
                &[
                    Param::from(version.to_string()),
                    Param::from(i64::from(shared)),
                    Param::from(id),
                ],
            )
            .await
            .map(|_| ())
        }
        WorkflowEvent::VersionRegistered {
            version,
            definition,
            source,
            ..
        } => registered(w, workflow, version, &definition, source).await,
        WorkflowEvent::VersionRetired { version, .. } => w
            .execute(
                "UPDATE {workflow_tools} SET retired = 1 WHERE workflow = ? AND version = ?",
                &[Param::from(workflow), Param::from(version.to_string())],
            )
            .await
            .map(|_| ()),
        WorkflowEvent::Retired { .. } => w
            .execute(
                "UPDATE {workflow_tools} SET retired = 1 WHERE workflow = ?",
                &[Param::from(workflow)],
            )
            .await
            .map(|_| ()),
        WorkflowEvent::Paused { .. } | WorkflowEvent::Resumed { .. } => Ok(()),
    }
}

async fn decide(
    w: &mut Writer<'_>,
    proposal_id: &str,
    status: &str,
    by: Option<String>,
    reason: Option<String>,
    at: chrono::DateTime<chrono::Utc>,
) -> Result<(), ProjectionError> {
    w.execute(
        "UPDATE {proposals} SET status = ?, decided_by = ?, decided_at = ?, reason = ? \
         WHERE proposal_id = ?",
        &[
            Param::from(status),
            Param::from(by),
            Param::from(micros(at)),
            Param::from(reason),
            Param::from(proposal_id),
        ],
    )
    .await
    .map(|_| ())
}

/// A version registered: it becomes the workflow's row if it is the latest.
async fn registered(
    w: &mut Writer<'_>,
    workflow: &str,
    version: Version,
    definition: &Value,
    source: VersionSource,
) -> Result<(), ProjectionError> {
    let current = w
        .query(
            "SELECT version FROM {workflow_tools} WHERE workflow = ?",
            &[Param::from(workflow)],
        )
        .await?;
    let newer = current
        .first()
        .and_then(|row| row.get("version").and_then(Value::as_str))
        .and_then(|v| v.parse::<Version>().ok())
        .is_none_or(|stored| version > stored);
    if !newer {
        return Ok(());
    }
    let description = definition
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let (learned, scope, shared, confidence, tools) = match source {
        VersionSource::UserSubmitted => (0i64, None, 0i64, 1.0, json(&tools_of(definition))),
        VersionSource::Learned { proposal_id } => {
            let rows = w
                .query(
                    "SELECT scope, shared, confidence, tools FROM {proposals} WHERE proposal_id = ?",
                    &[Param::from(proposal_id.to_string())],
                )
                .await?;
            let row = rows.first();
            let text = |k: &str| {
                row.and_then(|r| r.get(k).and_then(Value::as_str))
                    .map(str::to_string)
            };
            (
                1i64,
                text("scope"),
                row.and_then(|r| r.get("shared").and_then(Value::as_i64))
                    .unwrap_or(0),
                row.and_then(|r| r.get("confidence").and_then(Value::as_f64))
                    .unwrap_or(0.0),
                text("tools").unwrap_or_else(|| json(&tools_of(definition))),
            )
        }
    };
    w.upsert(
        "{workflow_tools}",
        &[
            "workflow",
            "version",
            "learned",
            "scope",
            "shared",
            "confidence",
            "tools",
            "description",
            "retired",
        ],
        &["workflow"],
        vec![vec![
            Param::from(workflow),
            Param::from(version.to_string()),
            Param::from(learned),
            Param::from(scope),
            Param::from(shared),
            Param::from(confidence),
            Param::from(tools),
            Param::from(description),
            Param::from(0i64),
        ]],
    )
    .await
}
