//! What can be asked of a workflow. Every command carries the time it was issued
//! (`at`) and, when a person acts, who (`by`). The content hash is computed at the edge,
//! where the file is read; the domain only compares it.
//!
//! There is no command to register a learned version directly: a learned version only
//! comes from [`WorkflowCommand::ApproveProposal`], so nothing can bypass approval.

use std::fmt;

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::domain::ids::{ProposalId, WorkflowName};

use super::types::{ContentHash, Evidence, Version};

/// A request to change one workflow's versions or proposals.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkflowCommand {
    /// Register a user-submitted version. Idempotent: the same version with the same
    /// hash records nothing; with another hash it is refused (versions are immutable).
    Register {
        workflow: WorkflowName,
        version: Version,
        definition: Value,
        content_hash: ContentHash,
        by: String,
        at: DateTime<Utc>,
    },
    /// The learner proposes a workflow found in history. Idempotent per proposal id:
    /// the same id with the same hash records nothing, whatever became of it. An open
    /// proposal of the same scope is superseded by the new one.
    Propose {
        workflow: WorkflowName,
        proposal_id: ProposalId,
        definition: Value,
        content_hash: ContentHash,
        confidence: f64,
        evidence: Evidence,
        /// Whose history it was learned from (`team:NAME`, `user:NAME`).
        scope: Option<String>,
        at: DateTime<Utc>,
    },
    /// A person approves an open proposal: it becomes `version`, runnable, learned.
    ApproveProposal {
        proposal_id: ProposalId,
        version: Version,
        /// Suggested to every scope, not only the one it was learned from.
        shared: bool,
        by: String,
        at: DateTime<Utc>,
    },
    /// A person rejects an open proposal.
    RejectProposal {
        proposal_id: ProposalId,
        by: String,
        reason: String,
        at: DateTime<Utc>,
    },
    /// Stop new runs of one version.
    RetireVersion {
        version: Version,
        by: String,
        reason: String,
        at: DateTime<Utc>,
    },
    /// Stop new runs, versions and proposals of the whole workflow.
    RetireWorkflow {
        by: String,
        reason: String,
        at: DateTime<Utc>,
    },
    /// Hold every run of the workflow: no new step starts, new runs queue.
    Pause {
        by: String,
        reason: String,
        at: DateTime<Utc>,
    },
    /// Let a paused workflow's runs go on.
    Resume { by: String, at: DateTime<Utc> },
}

impl WorkflowCommand {
    /// What the command attempts, for error messages.
    pub fn action(&self) -> WorkflowAction {
        match self {
            Self::Register { .. } => WorkflowAction::Register,
            Self::Propose { .. } => WorkflowAction::Propose,
            Self::ApproveProposal { .. } => WorkflowAction::ApproveProposal,
            Self::RejectProposal { .. } => WorkflowAction::RejectProposal,
            Self::RetireVersion { .. } => WorkflowAction::RetireVersion,
            Self::RetireWorkflow { .. } => WorkflowAction::RetireWorkflow,
            Self::Pause { .. } => WorkflowAction::Pause,
            Self::Resume { .. } => WorkflowAction::Resume,
        }
    }
}

/// The kind of a [`WorkflowCommand`], without its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WorkflowAction {
    Register,
    Propose,
    ApproveProposal,
    RejectProposal,
    RetireVersion,
    RetireWorkflow,
    Pause,
    Resume,
}

impl WorkflowAction {
    pub const ALL: [WorkflowAction; 8] = [
        Self::Register,
        Self::Propose,
        Self::ApproveProposal,
        Self::RejectProposal,
        Self::RetireVersion,
        Self::RetireWorkflow,
        Self::Pause,
        Self::Resume,
    ];
}

impl fmt::Display for WorkflowAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Register => "register a version",
            Self::Propose => "propose a workflow",
            Self::ApproveProposal => "approve a proposal",
            Self::RejectProposal => "reject a proposal",
            Self::RetireVersion => "retire a version",
            Self::RetireWorkflow => "retire the workflow",
            Self::Pause => "pause the workflow",
            Self::Resume => "resume the workflow",
        })
    }
}
