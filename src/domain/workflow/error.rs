//! Why a command on a workflow was refused, and why a version cannot start a run.
//! Each message names the workflow, what was attempted and why it cannot be done, so it
//! can be shown to a person as is.

use crate::domain::ids::{ProposalId, WorkflowName};

use super::commands::WorkflowAction;
use super::state::{ProposalDecision, Retirement};
use super::types::{ContentHash, Version};

/// A refused workflow command.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum WorkflowError {
    #[error(
        "the workflow does not exist: cannot {action} (register a version or propose a \
         workflow first)"
    )]
    NotFound { action: WorkflowAction },

    #[error("this stream belongs to workflow {stream}: cannot {action} for workflow {given}")]
    WrongWorkflow {
        stream: WorkflowName,
        given: WorkflowName,
        action: WorkflowAction,
    },

    #[error(
        "workflow {workflow} is retired ({retirement}): cannot {action} (a retired workflow \
         takes no new versions, proposals or runs)"
    )]
    WorkflowRetired {
        workflow: WorkflowName,
        action: WorkflowAction,
        retirement: Retirement,
    },

    #[error("workflow {workflow}: cannot {action} with an empty {field}")]
    Empty {
        workflow: WorkflowName,
        action: WorkflowAction,
        field: &'static str,
    },

    #[error(
        "workflow {workflow}: cannot {action}: the definition must be a JSON object (the \
         parsed workflow file), found {found}"
    )]
    DefinitionNotAnObject {
        workflow: WorkflowName,
        action: WorkflowAction,
        found: &'static str,
    },

    #[error(
        "workflow {workflow} version {version} is already registered with content hash \
         {registered}: cannot register it again with content hash {given} (versions are \
         immutable: give the changed definition a new version)"
    )]
    VersionImmutable {
        workflow: WorkflowName,
        version: Version,
        registered: ContentHash,
        given: ContentHash,
    },

    #[error(
        "workflow {workflow} already has version {version}: cannot approve proposal \
         {proposal} as it (choose a version that is not registered)"
    )]
    VersionExists {
        workflow: WorkflowName,
        version: Version,
        proposal: ProposalId,
    },

    #[error("workflow {workflow} has no version {version}: cannot {action}")]
    UnknownVersion {
        workflow: WorkflowName,
        version: Version,
        action: WorkflowAction,
    },

    #[error(
        "workflow {workflow} version {version} is already retired ({retirement}): cannot {action}"
    )]
    VersionRetired {
        workflow: WorkflowName,
        version: Version,
        action: WorkflowAction,
        retirement: Retirement,
    },

    #[error("workflow {workflow} is already paused ({hold}): cannot pause it again")]
    AlreadyPaused {
        workflow: WorkflowName,
        hold: Retirement,
    },

    #[error("workflow {workflow} is not paused: cannot resume it")]
    NotPaused { workflow: WorkflowName },

    #[error("workflow {workflow} has no proposal {proposal}: cannot {action}")]
    UnknownProposal {
        workflow: WorkflowName,
        proposal: ProposalId,
        action: WorkflowAction,
    },

    #[error(
        "proposal {proposal} of workflow {workflow} was already made with content hash \
         {proposed}: cannot propose it again with content hash {given} (a proposal never \
         changes: propose the new definition under a new id)"
    )]
    ProposalConflict {
        workflow: WorkflowName,
        proposal: ProposalId,
        proposed: ContentHash,
        given: ContentHash,
    },

    #[error(
        "proposal {proposal} of workflow {workflow} was already {decision}: cannot {action} \
         (a proposal is decided once)"
    )]
    ProposalDecided {
        workflow: WorkflowName,
        proposal: ProposalId,
        action: WorkflowAction,
        decision: ProposalDecision,
    },

    #[error(
        "workflow {workflow}: cannot propose {proposal} with confidence {confidence} \
         (confidence is a fraction from 0 to 1)"
    )]
    ConfidenceOutOfRange {
        workflow: WorkflowName,
        proposal: ProposalId,
        confidence: f64,
    },

    #[error(
        "workflow {workflow}: cannot propose {proposal} with evidence of {successes} \
         successful out of {executions} executions ({why})"
    )]
    InvalidEvidence {
        workflow: WorkflowName,
        proposal: ProposalId,
        successes: u32,
        executions: u32,
        why: &'static str,
    },
}

/// Why a version of a workflow cannot start a new run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NotRunnable {
    #[error("the workflow does not exist: no version of it can run")]
    NotFound,

    #[error(
        "workflow {workflow} is retired ({retirement}): it takes no new runs (runs already \
         started finish)"
    )]
    WorkflowRetired {
        workflow: WorkflowName,
        retirement: Retirement,
    },

    #[error(
        "workflow {workflow} has no version {version} (a learned workflow runs only once a \
         person approved it)"
    )]
    UnknownVersion {
        workflow: WorkflowName,
        version: Version,
    },

    #[error(
        "workflow {workflow} version {version} is retired ({retirement}): it takes no new \
         runs (runs already started finish)"
    )]
    VersionRetired {
        workflow: WorkflowName,
        version: Version,
        retirement: Retirement,
    },
}
