//! Human approval gates: finding the run a gate belongs to, and deciding it.
//!
//! A gate id is all a person has (from the inbox, a notification, the CLI's progress
//! line). The runs projection knows every gate it has applied; a gate it has not seen
//! yet (the projection is behind, or not built) is found in the log's
//! `run.gate_opened` events, so a slow projection never hides a gate.

use crate::domain::Decide;
use crate::domain::ids::{GateId, RunId};
use crate::domain::run::{Run, RunCommand};
use crate::log::{EventFilter, Metadata, StreamType};
use crate::projections::queries;
use crate::store::command::Command;

use super::{Runs, RunsError, run_stream};

/// A person's decision on a gate.
#[derive(Debug, Clone, PartialEq)]
pub enum GateDecision {
    Approve { comment: Option<String> },
    Reject { comment: String },
}

impl GateDecision {
    /// Approve (`true`) or reject; rejecting needs a comment saying why.
    pub fn new(approve: bool, comment: Option<String>) -> Result<Self, RunsError> {
        if approve {
            return Ok(Self::Approve { comment });
        }
        let comment = comment.filter(|c| !c.trim().is_empty()).ok_or_else(|| {
            RunsError::Invalid("rejecting a gate needs a comment saying why".into())
        })?;
        Ok(Self::Reject { comment })
    }
}

impl Runs {
    /// Approve or reject `gate_id` as `by` (who must be one of its approvers, if it
    /// names any). Returns the gate's run after the decision, and its version.
    pub async fn decide_gate(
        &self,
        gate_id: GateId,
        decision: GateDecision,
        by: &str,
    ) -> Result<(Run, i64), RunsError> {
        let run_id = self.find_gate(gate_id).await?;
        let stream = run_stream(run_id);
        let now = self.now();
        let command = match decision {
            GateDecision::Approve { comment } => RunCommand::ApproveGate {
                gate_id,
                by: by.to_string(),
                comment,
                at: now,
            },
            GateDecision::Reject { comment } => RunCommand::RejectGate {
                gate_id,
                by: by.to_string(),
                comment,
                at: now,
            },
        };
        let done = Command::new(&self.store, &stream, Metadata::actor(by))
            .wakes(now, |_: &Run| vec![run_id.to_string()])
            .run(|run| run.decide(command.clone()))
            .await?;
        Ok((done.state, done.version))
    }

    /// The run a gate belongs to.
    pub async fn find_gate(&self, gate_id: GateId) -> Result<RunId, RunsError> {
        // A projection that cannot be read (not built yet) only means: ask the log.
        if let Ok(Some(run_id)) = queries::gate_run(&self.store, gate_id).await {
            return Ok(run_id);
        }
        self.scan_for_gate(gate_id).await
    }

    /// [`Runs::find_gate`] by reading the log's `run.gate_opened` events.
    async fn scan_for_gate(&self, gate_id: GateId) -> Result<RunId, RunsError> {
        let filter = EventFilter {
            stream_types: vec![StreamType::Run],
            event_types: vec!["run.gate_opened".into()],
            ..EventFilter::default()
        };
        let wanted = gate_id.to_string();
        let mut after = 0;
        loop {
            let (events, scanned) = self.store.read_page(after, 1_000, &filter).await?;
            if let Some(e) = events
                .iter()
                .find(|e| e.payload["gate_id"] == wanted.as_str())
            {
                return e.stream.id.parse().map_err(|_| RunsError::Corrupt {
                    what: format!("the run of gate {gate_id}"),
                    reason: format!("{:?} is not a run id", e.stream.id),
                });
            }
            if scanned == after {
                return Err(RunsError::GateNotFound(gate_id));
            }
            after = scanned;
        }
    }
}
