//! The events of a `workflow` stream: a permanent wire format.
//!
//! Each variant's serde tag is its dotted event type (`workflow.version_registered`),
//! which the store keeps as the row's event type while the inner object becomes the
//! payload. Every event is at schema version [`SCHEMA_VERSION`]; reshaping a payload
//! needs a new version and an upcaster.

use chrono::{DateTime, Utc};
use cqrs_es::DomainEvent;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::domain::ids::{ProposalId, WorkflowName};

use super::types::{ContentHash, Evidence, Version, VersionSource};

/// The schema version of every `workflow.*` event written today.
pub const SCHEMA_VERSION: i32 = 1;

/// Something that happened to one workflow's versions and proposals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum WorkflowEvent {
    /// A version became runnable: submitted by a user, or a learned proposal approved
    /// (then it follows `workflow.proposal_approved`).
    #[serde(rename = "workflow.version_registered")]
    VersionRegistered {
        workflow: WorkflowName,
        version: Version,
        definition: Value,
        content_hash: ContentHash,
        source: VersionSource,
        by: String,
        at: DateTime<Utc>,
    },
    /// The learner proposed a workflow found in history. It is not runnable.
    #[serde(rename = "workflow.proposed")]
    Proposed {
        workflow: WorkflowName,
        proposal_id: ProposalId,
        definition: Value,
        content_hash: ContentHash,
        confidence: f64,
        evidence: Evidence,
        /// Whose history it was learned from (absent in proposals made before scopes).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        scope: Option<String>,
        at: DateTime<Utc>,
    },
    /// A newer proposal of the same scope replaced an open one (more evidence changed
    /// the generated file): the old one can no longer be approved.
    #[serde(rename = "workflow.proposal_superseded")]
    ProposalSuperseded {
        proposal_id: ProposalId,
        superseded_by: ProposalId,
        at: DateTime<Utc>,
    },
    /// A person approved a proposal as `version` (registered by the next event).
    #[serde(rename = "workflow.proposal_approved")]
    ProposalApproved {
        proposal_id: ProposalId,
        version: Version,
        /// Suggested to every scope (absent: only to the one it was learned from).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        shared: bool,
        by: String,
        at: DateTime<Utc>,
    },
    /// A person rejected a proposal.
    #[serde(rename = "workflow.proposal_rejected")]
    ProposalRejected {
        proposal_id: ProposalId,
        by: String,
        reason: String,
        at: DateTime<Utc>,
    },
    /// One version takes no new runs (runs already started finish).
    #[serde(rename = "workflow.version_retired")]
    VersionRetired {
        version: Version,
        by: String,
        reason: String,
        at: DateTime<Utc>,
    },
    /// The whole workflow takes no new runs, versions or proposals (runs already
    /// started finish).
    #[serde(rename = "workflow.retired")]
    Retired {
        by: String,
        reason: String,
        at: DateTime<Utc>,
    },
    /// A person paused the whole workflow: its runs are paused (by a bulk action), and
    /// runs started while it is paused start paused (queued) until it is resumed.
    #[serde(rename = "workflow.paused")]
    Paused {
        by: String,
        reason: String,
        at: DateTime<Utc>,
    },
    /// A person resumed a paused workflow: the runs its pause held go on.
    #[serde(rename = "workflow.resumed")]
    Resumed { by: String, at: DateTime<Utc> },
}

impl WorkflowEvent {
    /// When the event happened (the time carried by the command that caused it).
    pub fn at(&self) -> DateTime<Utc> {
        match self {
            Self::VersionRegistered { at, .. }
            | Self::Proposed { at, .. }
            | Self::ProposalSuperseded { at, .. }
            | Self::ProposalApproved { at, .. }
            | Self::ProposalRejected { at, .. }
            | Self::VersionRetired { at, .. }
            | Self::Retired { at, .. }
            | Self::Paused { at, .. }
            | Self::Resumed { at, .. } => *at,
        }
    }
}

impl DomainEvent for WorkflowEvent {
    fn event_type(&self) -> String {
        match self {
            Self::VersionRegistered { .. } => "workflow.version_registered",
            Self::Proposed { .. } => "workflow.proposed",
            Self::ProposalSuperseded { .. } => "workflow.proposal_superseded",
            Self::ProposalApproved { .. } => "workflow.proposal_approved",
            Self::ProposalRejected { .. } => "workflow.proposal_rejected",
            Self::VersionRetired { .. } => "workflow.version_retired",
            Self::Retired { .. } => "workflow.retired",
            Self::Paused { .. } => "workflow.paused",
            Self::Resumed { .. } => "workflow.resumed",
        }
        .to_string()
    }

    fn event_version(&self) -> String {
        SCHEMA_VERSION.to_string()
    }
}
